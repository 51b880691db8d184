"""TLS (incl. tls_required and verified client certificates), AUTH (callable and HTTP,
with TTL re-query) and snappy / deflate on the embedded broker."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import os
import socket
import ssl
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection
from airflow_provider_nsq.testing.auth_server import AuthServer, StaticAuthorizer, allow_all
from airflow_provider_nsq.testing.broker.authorization import query_authd
from airflow_provider_nsq.testing.servers.http_server import Request, Response, start_http_server
from airflow_provider_nsq.testing.servers.loop_thread import LoopThread
from tests.support.nsqd_wire import cmd, mpub_body


def negotiate(peer, **fields):
    peer.send(cmd("IDENTIFY", json.dumps({"feature_negotiation": True, **fields}).encode()))
    return json.loads(peer.read_frame().data)


def client_context(tls_files, with_cert=True):
    ctx = ssl.create_default_context(cafile=tls_files.ca_file)
    if with_cert:
        ctx.load_cert_chain(tls_files.client_cert, tls_files.client_key)
    return ctx


def test_tls_required_with_verified_client_certificate(nsqd_factory, open_peer, tls_files):
    authorizer = StaticAuthorizer({"s3cret": allow_all("cert-user")})
    server = nsqd_factory(
        tls_cert=tls_files.server_cert,
        tls_key=tls_files.server_key,
        tls_root_ca_file=tls_files.ca_file,
        tls_client_auth_policy="require-verify",  # forces tls_required, as in nsqd
        authorizer=authorizer,
    )
    peer = open_peer(server)
    assert negotiate(peer, tls_v1=True)["tls_v1"] is True
    peer.start_tls(client_context(tls_files))
    assert peer.read_frame().data == b"OK"
    peer.send(cmd("AUTH", b"s3cret"))
    assert json.loads(peer.read_frame().data)["identity"] == "cert-user"
    peer.send(cmd("PUB tls_topic", b"secure"))
    assert peer.read_frame().data == b"OK"
    (asked,) = authorizer.requests
    assert (asked.tls, asked.common_name, asked.remote_ip) == (
        True,
        tls_files.client_common_name,
        "127.0.0.1",
    )
    clients = server.stats()["producers"]
    assert clients[0]["tls"] is True and clients[0]["tls_version"].startswith("TLS")


def test_client_without_certificate_is_refused(nsqd_factory, open_peer, tls_files):
    server = nsqd_factory(
        tls_cert=tls_files.server_cert,
        tls_key=tls_files.server_key,
        tls_root_ca_file=tls_files.ca_file,
        tls_client_auth_policy="require-verify",
    )
    peer = open_peer(server)
    negotiate(peer, tls_v1=True)
    with pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
        peer.start_tls(client_context(tls_files, with_cert=False))
        peer.send(cmd("NOP"))  # TLS 1.3 reports the refusal on the first read
        peer.read_frame(timeout=3)


def test_tls_required_refuses_plaintext_commands_and_http(nsqd_factory, open_peer, tls_files):
    server = nsqd_factory(
        tls_cert=tls_files.server_cert, tls_key=tls_files.server_key, tls_required=True
    )
    peer = open_peer(server)
    peer.send(cmd("SUB t c"))
    assert peer.read_frame().data == b"E_INVALID cannot SUB in current state (TLS required)"
    broker = server.broker
    assert server.http_port == broker.https_port  # the helpers switched to HTTPS
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"http://{broker.http_address}/ping", timeout=5)
    assert info.value.code == 403
    assert json.loads(info.value.read()) == {
        "message": "TLS_REQUIRED",
        "https_port": broker.https_port,
    }
    assert server.http("GET", "/ping") == (200, b"OK")


def test_tls_without_negotiation_or_cert_stays_plaintext(broker, open_peer):
    peer = open_peer(broker)
    assert negotiate(peer, tls_v1=True)["tls_v1"] is False
    peer.send(cmd("PUB t", b"plain"))
    assert peer.read_frame().data == b"OK"


# -- AUTH ------------------------------------------------------------------------------------


def test_callable_authorizer_is_asked_again_after_ttl(nsqd_factory, open_peer, caplog):
    authorizer = StaticAuthorizer({"good": allow_all(ttl=1)})
    server = nsqd_factory(authorizer=authorizer)
    peer = open_peer(server)
    assert negotiate(peer)["auth_required"] is True
    peer.send(cmd("AUTH", b"good"))
    assert json.loads(peer.read_frame().data) == {
        "identity": "test-user",
        "identity_url": "",
        "permission_count": 1,
    }
    peer.send(cmd("PUB t", b"1"))
    assert peer.read_frame().data == b"OK"
    assert len(authorizer.requests) == 1  # cached within the TTL
    deadline = time.monotonic() + 1.05
    peer.expect_nothing(max(0.0, deadline - time.monotonic()))
    authorizer.secrets.pop("good")  # the re-query will now fail
    caplog.set_level(logging.INFO, "airflow_provider_nsq.testing.broker")
    peer.send(cmd("PUB t", b"2"))
    assert peer.read_frame().data == b"E_AUTH_FAILED AUTH failed"
    assert peer.expect_closed() == "eof"
    assert len(authorizer.requests) == 2
    assert "good" not in caplog.text.replace("good-", "")  # the secret is never logged


def test_http_authorizer_ttl_requery_and_request_shape(nsqd_factory, open_peer):
    answer = allow_all("http-user", ttl=1)
    answer["authorizations"] = [
        {"topic": "^allowed", "channels": [".*"], "permissions": ["publish"]}
    ]
    with AuthServer({"tok en/+": answer}) as auth:
        server = nsqd_factory(auth_http_address=[auth.address])
        peer = open_peer(server)
        peer.send(cmd("AUTH", b"tok en/+"))
        assert json.loads(peer.read_frame().data)["identity"] == "http-user"
        peer.send(cmd("PUB allowed_1", b"x"))
        assert peer.read_frame().data == b"OK"
        peer.expect_nothing(1.05)
        peer.send(cmd("PUB allowed_2", b"x"))
        assert peer.read_frame().data == b"OK"
        assert len(auth.requests) == 2
        assert auth.requests[0].query == {
            "common_name": "",
            "remote_ip": "127.0.0.1",
            "secret": "tok en/+",
            "tls": "false",
        }
        assert auth.requests[0].accept == "application/vnd.nsq; version=1.0"
        peer.send(cmd("PUB other", b"x"))
        assert peer.read_frame().data == b'E_UNAUTHORIZED AUTH failed for PUB on "other" ""'


def test_auth_server_stop_closes_idle_keep_alive_connections():
    # From Python 3.12.1 an asyncio server's wait_closed() waits for every connection.
    before = {t.name for t in threading.enumerate()}
    with AuthServer({"s": allow_all()}) as auth:
        conn = http.client.HTTPConnection("127.0.0.1", auth.port, timeout=5)
        conn.request("GET", "/auth?secret=s")
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())["identity"]) == (200, "test-user")
    assert conn.sock.recv(100) == b""  # the server closed it on stop
    conn.close()
    assert {t.name for t in threading.enumerate()} - before == set()  # not held (30 s)


def test_a_403_naming_an_https_port_is_asked_again_over_https(tls_files):
    # nsqd's convention: an auth server answering 403 {"https_port": N} over HTTP wants
    # the same question over HTTPS on port N (verified against --tls-root-ca-file).
    answer = allow_all("tls-user")
    asked: list[tuple[bool, str]] = []
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(tls_files.server_cert, tls_files.server_key)

    def over_https(request: Request) -> Response:
        asked.append((request.secure, request.target))
        return Response(200, json.dumps(answer).encode())

    async def open_both() -> tuple[asyncio.Server, asyncio.Server]:
        https = await start_http_server(over_https, "127.0.0.1", 0, ssl_context=server_tls)
        https_port = https.sockets[0].getsockname()[1]

        def over_http(request: Request) -> Response:
            asked.append((request.secure, request.target))
            return Response(403, json.dumps({"https_port": https_port}).encode())

        return await start_http_server(over_http, "127.0.0.1", 0), https

    async def close_both(servers: tuple[asyncio.Server, asyncio.Server]) -> None:
        for server in servers:
            server.close()
            await server.wait_closed()

    runner: LoopThread[tuple[asyncio.Server, asyncio.Server]] = LoopThread("auth-servers")
    http, _ = runner.start(open_both, close_both)
    try:
        state = query_authd(
            f"127.0.0.1:{http.sockets[0].getsockname()[1]}",
            "127.0.0.1",
            True,
            "client-cn",
            b"s3cret",
            context=ssl.create_default_context(cafile=tls_files.ca_file),
        )
    finally:
        runner.stop()
    assert state.identity == "tls-user" and state.allows("any_topic", "")
    target = "/auth?common_name=client-cn&remote_ip=127.0.0.1&secret=s3cret&tls=true"
    assert asked == [(False, target), (True, target)]


def test_auth_server_down_is_auth_failed(nsqd_factory, open_peer):
    server = nsqd_factory(auth_http_address=["127.0.0.1:1"], http_client_request_timeout=1000)
    peer = open_peer(server)
    peer.send(cmd("AUTH", b"x"))
    assert peer.read_frame().data == b"E_AUTH_FAILED AUTH failed"


# -- compression --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["snappy", "deflate"])
def test_compressed_publish_and_consume(broker, open_peer, kind):
    bodies = [b"compressible " * 20000, os.urandom(100_000), b"x"]  # > 64 KiB snappy chunks
    p = open_peer(broker)
    assert negotiate(p, **{kind: True, "deflate_level": 1})[kind] is True
    p.start_compression(kind)
    assert p.read_frame().data == b"OK"
    p.send(cmd("MPUB zip", mpub_body(*bodies)))
    assert p.read_frame().data == b"OK"
    c = open_peer(broker)
    negotiate(c, **{kind: True})
    c.start_compression(kind)
    assert c.read_frame().data == b"OK"
    c.send(cmd("SUB zip ch") + cmd("RDY 3"))
    assert c.read_frame().data == b"OK"
    got = c.read_frames(3)
    assert [f.body for f in got] == bodies
    for f in got:
        c.send(cmd(b"FIN " + f.msg_id))
    broker.wait_for(lambda: broker.channel_stats("zip", "ch")["in_flight_count"] == 0)
    clients = broker.channel_stats("zip", "ch")["clients"]
    assert clients[0][kind] is True


def test_tls_then_snappy(nsqd_factory, open_peer, tls_files):
    server = nsqd_factory(tls_cert=tls_files.server_cert, tls_key=tls_files.server_key)
    peer = open_peer(server)
    assert negotiate(peer, tls_v1=True, snappy=True)["snappy"] is True
    peer.start_tls(client_context(tls_files, with_cert=False))
    assert peer.read_frame().data == b"OK"
    peer.start_compression("snappy")
    assert peer.read_frame().data == b"OK"
    peer.send(cmd("PUB t", b"both"))
    assert peer.read_frame().data == b"OK"


def test_clients_that_reset_mid_delivery_are_not_written_to_again(
    nsqd_factory, tls_files, nsq_topic
):
    """A client that resets its connection while messages pour out over TLS: the broker
    stops writing to it at the first failed write (asyncio logged each later write
    once the TCP transport had failed, hundreds of lines for a few hundred clients)."""
    server = nsqd_factory(tls_cert=tls_files.server_cert, tls_key=tls_files.server_key)
    with NSQConnection(ClientConfig(host=server.host, port=server.tcp_port)) as conn:
        for _ in range(4):
            conn.multi_publish(nsq_topic, [b"x" * 2000] * 500)
    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    loop_log = logging.getLogger("asyncio")
    disabled, loop_log.disabled = loop_log.disabled, False  # Airflow's logging config
    loop_log.addHandler(handler)
    context = client_context(tls_files, with_cert=False)
    identify = json.dumps({"feature_negotiation": True, "tls_v1": True}).encode()
    try:
        for n in range(120):
            raw = socket.create_connection((server.host, server.tcp_port), timeout=5)
            raw.sendall(b"  V2" + b"IDENTIFY\n" + struct.pack(">I", len(identify)) + identify)
            raw.recv(4096)  # the IDENTIFY response: TLS from here
            sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
            sock.recv(4096)  # OK
            sock.sendall(f"SUB {nsq_topic} c{n % 3}\nRDY 2500\n".encode())
            sock.recv(1)  # deliveries have started
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # RST with the broker mid-write
        # Every session has seen its reset once the broker answers a new client.
        with NSQConnection(ClientConfig(host=server.host, port=server.tcp_port)) as conn:
            conn.publish(nsq_topic, b"after")
    finally:
        loop_log.removeHandler(handler)
        loop_log.disabled = disabled
    assert warnings == []
