"""The HTTP API, the CLI, the in-process runner and the pytest plugin's fixtures."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading

import pytest

from airflow_provider_nsq.protocol.names import is_valid_name
from airflow_provider_nsq.testing.broker import EmbeddedNSQD
from airflow_provider_nsq.testing.certificates import generate_tls_files
from tests.support.listening import listening_ports
from tests.support.nsqd_wire import cmd


def test_ping_info_and_errors(broker):
    assert broker.http("GET", "/ping") == (200, b"OK")
    status, body = broker.http("GET", "/info")
    assert status == 200 and json.loads(body)["tcp_port"] == broker.tcp_port
    assert broker.http("GET", "/nope") == (404, b'{"message":"NOT_FOUND"}')
    assert broker.http("GET", "/pub", {"topic": "t"}) == (405, b'{"message":"METHOD_NOT_ALLOWED"}')
    assert broker.http("POST", "/pub", {}, b"x") == (400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert broker.http("POST", "/pub", {"topic": "bad!"}, b"x") == (
        400,
        b'{"message":"INVALID_TOPIC"}',
    )
    assert broker.http("POST", "/pub", {"topic": "t"}, b"") == (400, b'{"message":"MSG_EMPTY"}')
    assert broker.http("POST", "/pub", {"topic": "t", "defer": "-1"}, b"x")[0] == 400
    assert broker.http("POST", "/channel/create", {"topic": "missing", "channel": "c"}) == (
        404,
        b'{"message":"TOPIC_NOT_FOUND"}',
    )
    assert broker.http("POST", "/topic/delete", {"topic": "missing"})[0] == 404


def test_pub_mpub_defer_and_stats_shape(nsqd_factory):
    server = nsqd_factory(max_msg_size=100)
    server.create_channel("h", "c")
    server.http_publish("h", b"one")
    assert server.http("POST", "/mpub", {"topic": "h"}, b"two\n\nthree\n") == (200, b"OK")
    binary = struct.pack(">I", 2) + struct.pack(">I", 4) + b"four" + struct.pack(">I", 4) + b"five"
    assert server.http("POST", "/mpub", {"topic": "h", "binary": "true"}, binary) == (200, b"OK")
    assert server.http("POST", "/pub", {"topic": "h"}, b"x" * 101) == (
        413,
        b'{"message":"MSG_TOO_BIG"}',
    )
    server.http_publish("h", b"later", defer_ms=60_000)
    stats = server.stats()
    assert list(stats)[:4] == ["version", "health", "start_time", "topics"]
    assert stats["version"] == "1.3.0" and "producers" in stats and "memory" in stats
    topic = server.topic_stats("h")
    assert topic["message_count"] == 6 and topic["depth"] == 0
    channel = server.channel_stats("h", "c")
    assert {
        k: channel[k] for k in ("depth", "deferred_count", "in_flight_count", "message_count")
    } == {
        "depth": 5,
        "deferred_count": 1,
        "in_flight_count": 0,
        "message_count": 6,
    }
    assert set(channel) >= {
        "channel_name",
        "depth",
        "backend_depth",
        "in_flight_count",
        "deferred_count",
        "message_count",
        "requeue_count",
        "timeout_count",
        "client_count",
        "clients",
        "paused",
    }
    assert server.stats()["topics"][0]["topic_name"] == "h"
    status, text = server.http("GET", "/stats")
    assert status == 200 and b"[h" in text
    assert server.http("POST", "/channel/empty", {"topic": "h", "channel": "c"})[0] == 200
    assert server.channel_stats("h", "c")["depth"] == 0
    assert server.channel_stats("h", "nope") is None
    server.delete_topic("h")
    assert server.topic_stats("h") is None


def test_topic_and_channel_pause(broker, open_peer):
    broker.create_channel("p", "c")
    assert broker.http("POST", "/channel/pause", {"topic": "p", "channel": "c"})[0] == 200
    c = open_peer(broker)
    c.send(cmd("SUB p c") + cmd("RDY 1"))
    assert c.read_frame().data == b"OK"
    broker.http_publish("p", b"held")
    c.expect_nothing(0.3)
    assert broker.channel_stats("p", "c")["paused"] is True
    assert broker.http("POST", "/channel/unpause", {"topic": "p", "channel": "c"})[0] == 200
    assert c.read_frame().body == b"held"


def test_keep_alive_chunked_and_expect_continue(broker):
    conn = http.client.HTTPConnection(broker.host, broker.http_port, timeout=5)
    conn.request("POST", "/pub?topic=k", body=iter([b"chu", b"nked"]), encode_chunked=True)
    response = conn.getresponse()
    assert (response.status, response.read()) == (200, b"OK")
    conn.request("POST", "/pub?topic=k", body=b"x" * 2000, headers={"Expect": "100-continue"})
    response = conn.getresponse()  # the same connection: keep-alive
    assert (response.status, response.read()) == (200, b"OK")
    conn.close()
    assert broker.topic_stats("k")["message_count"] == 2


# -- in-process runner ------------------------------------------------------------------------


def test_embedded_broker_stops_cleanly():
    before = {t.name for t in threading.enumerate()}
    with EmbeddedNSQD() as nsqd:
        assert nsqd.tcp_address == f"127.0.0.1:{nsqd.tcp_port}"
        assert nsqd.http_address == f"127.0.0.1:{nsqd.http_port}"
        peer = socket.create_connection((nsqd.host, nsqd.tcp_port))
        peer.sendall(b"  V2" + cmd("PUB e", b"x"))
        assert peer.recv(100).endswith(b"OK")
        nsqd.publish("e", b"direct")
        assert nsqd.stats(topic="e")["topics"][0]["message_count"] == 2
        port = nsqd.tcp_port
    assert peer.recv(100) == b""  # the broker closed our connection on stop
    peer.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    assert {t.name for t in threading.enumerate()} - before == set()


def test_embedded_broker_stop_closes_idle_keep_alive_http_connections():
    # From Python 3.12.1 an asyncio server's wait_closed() waits for every connection:
    # one a client keeps open would hold stop() until its timeout.
    before = {t.name for t in threading.enumerate()}
    with EmbeddedNSQD() as nsqd:
        conn = http.client.HTTPConnection(nsqd.host, nsqd.http_port, timeout=5)
        conn.request("GET", "/ping")
        assert conn.getresponse().read() == b"OK"  # the connection stays open: keep-alive
    assert conn.sock.recv(100) == b""  # the broker closed it on stop
    conn.close()
    assert {t.name for t in threading.enumerate()} - before == set()


def test_embedded_broker_reports_startup_errors():
    with EmbeddedNSQD() as first, pytest.raises(OSError):
        EmbeddedNSQD(tcp_port=first.tcp_port).start()


# -- CLI --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_serves_and_stops_on_signal(sig):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_provider_nsq.testing.broker",
            "--tcp-port",
            "0",
            "--http-port",
            "0",
            "--msg-timeout=90s",
            "--max-rdy-count",
            "10",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ports = listening_ports(proc.stderr)
        tcp_port, http_port = ports["TCP"], ports["HTTP"]
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
        conn.request("GET", "/ping")
        assert conn.getresponse().read() == b"OK"
        with socket.create_connection(("127.0.0.1", tcp_port)) as s:
            s.sendall(b"  V2" + cmd("IDENTIFY", b'{"feature_negotiation":true}'))
            s.settimeout(10)
            frame = b""
            while len(frame) < 4 or len(frame) < 4 + int.from_bytes(frame[:4], "big"):
                chunk = s.recv(4096)
                assert chunk, "broker closed the connection"
                frame += chunk
            answer = json.loads(frame[8:])
        assert answer["max_rdy_count"] == 10 and answer["msg_timeout"] == 90_000
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_cli_rejects_bad_flags():
    result = subprocess.run(
        [sys.executable, "-m", "airflow_provider_nsq.testing.broker", "--msg-timeout", "soon"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "invalid duration" in result.stderr


# -- pytest plugin ----------------------------------------------------------------------------


def test_nsq_topic_is_unique_and_valid(nsq_topic, request):
    assert is_valid_name(nsq_topic) and nsq_topic.startswith("t_test_nsq_topic")
    assert len(nsq_topic) <= 64


@pytest.mark.parametrize("suffix", ["x" * 80])
def test_nsq_topic_is_truncated(nsq_topic, suffix):
    assert is_valid_name(nsq_topic) and len(nsq_topic) == 64


def test_session_nsqd_fixture(nsqd, nsq_topic):
    assert nsqd.embedded is (nsqd.broker is not None)
    nsqd.create_channel(nsq_topic, "c")
    nsqd.http_publish(nsq_topic, b"hello")
    assert nsqd.wait_for(lambda: (nsqd.channel_stats(nsq_topic, "c") or {}).get("depth") == 1)
    with pytest.raises(AssertionError, match="not met within"):
        nsqd.wait_for(lambda: False, timeout=0.05)
    nsqd.delete_topic(nsq_topic)
    assert nsqd.topic_stats(nsq_topic) is None


def test_tls_files_make_a_valid_chain(tls_files):
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tls_files.ca_file)
    server.load_cert_chain(tls_files.server_cert, tls_files.server_key)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(cafile=tls_files.ca_file)
    client.load_cert_chain(tls_files.client_cert, tls_files.client_key)
    # Python 3.13's defaults (strict X.509, which refuses an empty subjectAltName), on all
    for context in (server, client):
        context.verify_flags |= ssl.VERIFY_X509_STRICT
    a, b = socket.socketpair()
    with a, b:
        results: list = []
        t = threading.Thread(
            target=lambda: results.append(server.wrap_socket(a, server_side=True).getpeercert())
        )
        t.start()
        client.wrap_socket(b, server_hostname="127.0.0.1").do_handshake()
        t.join(5)
    subject = dict(x[0] for x in results[0]["subject"])
    assert subject["commonName"] == tls_files.client_common_name
    assert results[0]["subjectAltName"] == (("DNS", tls_files.client_common_name),)


def test_tls_files_refuse_a_client_name_that_is_not_a_host_name(tmp_path):
    with pytest.raises(ValueError, match="'test client'"):
        generate_tls_files(tmp_path, client_common_name="test client")
    assert not list(tmp_path.iterdir())  # nothing written
