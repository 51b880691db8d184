"""NSQDHTTPClient: a channel's depth from nsqd's /stats without taking anything, both
drivers, against the broker (or a real nsqd via NSQD_ADDRESS / NSQD_HTTP_ADDRESS)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConsumer
from airflow_provider_nsq.client.http.nsqd_api import ChannelDepth, NSQDHTTPClient
from airflow_provider_nsq.protocol.errors import (
    NSQConnectionError,
    NSQHTTPError,
    NSQProtocolError,
    NSQTimeoutError,
    NSQValueError,
)


def _blocking(client: NSQDHTTPClient, topic: str, channel: str, create: bool) -> ChannelDepth:
    return client.channel_depth(topic, channel, create=create)


def _asyncio(client: NSQDHTTPClient, topic: str, channel: str, create: bool) -> ChannelDepth:
    return asyncio.run(client.achannel_depth(topic, channel, create=create))


Depth = Callable[[NSQDHTTPClient, str, str, bool], ChannelDepth]


@pytest.fixture(params=[_blocking, _asyncio], ids=["blocking", "asyncio"])
def depth(request: pytest.FixtureRequest) -> Depth:
    return request.param


@pytest.fixture
def api(nsqd) -> NSQDHTTPClient:
    return NSQDHTTPClient(nsqd.http_host, nsqd.http_port, timeout=5)


def test_missing_topic_holds_nothing_and_create_registers_the_channel(nsqd, api, depth, nsq_topic):
    got = depth(api, nsq_topic, "etl", True)

    assert (got.exists, got.depth, got.ready) == (False, 0, 0)
    assert nsqd.channel_stats(nsq_topic, "etl") is not None  # created, as a SUB would
    nsqd.http_publish(nsq_topic, b"after")
    nsqd.wait_for(lambda: depth(api, nsq_topic, "etl", False).ready == 1)


def test_a_topic_without_channels_keeps_its_queue_for_the_first_channel(
    nsqd, api, depth, nsq_topic
):
    for body in (b"a", b"b"):
        nsqd.http_publish(nsq_topic, body)

    got = depth(api, nsq_topic, "etl", False)

    assert (got.exists, got.ready) == (False, 2)
    assert nsqd.channel_stats(nsq_topic, "etl") is None  # create=False: nothing changed


def test_another_channel_existing_means_nothing_waits_for_this_one(nsqd, api, depth, nsq_topic):
    nsqd.create_channel(nsq_topic, "other")
    nsqd.http_publish(nsq_topic, b"for-other")

    got = depth(api, nsq_topic, "etl", False)

    assert (got.exists, got.ready) == (False, 0)


def test_depth_counts_ready_messages_only(nsqd, api, depth, nsq_topic):
    nsqd.create_channel(nsq_topic, "etl")
    for body in (b"1", b"2", b"3"):
        nsqd.http_publish(nsq_topic, body)
    nsqd.http_publish(nsq_topic, b"later", defer_ms=600_000)
    config = ClientConfig(host=nsqd.host, port=nsqd.tcp_port)
    with NSQConsumer(nsq_topic, "etl", config=config) as consumer:
        held = consumer.consume(max_messages=1, timeout=5, ack="manual")
        assert len(held) == 1

        def settled() -> ChannelDepth | None:
            got = depth(api, nsq_topic, "etl", False)
            return got if (got.depth, got.in_flight, got.deferred) == (2, 1, 1) else None

        got = nsqd.wait_for(settled)
    assert (got.exists, got.ready, got.paused, got.nsqd) == (True, 2, False, nsqd.http_address)


def test_a_paused_channel_has_nothing_ready(nsqd, api, depth, nsq_topic):
    nsqd.create_channel(nsq_topic, "etl")
    nsqd.http_publish(nsq_topic, b"waiting")
    nsqd.wait_for(lambda: depth(api, nsq_topic, "etl", False).depth == 1)
    nsqd._post("/channel/pause", {"topic": nsq_topic, "channel": "etl"})

    got = depth(api, nsq_topic, "etl", False)

    assert (got.depth, got.paused, got.ready) == (1, True, 0)


def test_an_ephemeral_channel_is_never_created(nsqd, api, depth, nsq_topic):
    got = depth(api, nsq_topic, "etl#ephemeral", True)

    assert got.exists is False
    assert nsqd.channel_stats(nsq_topic, "etl#ephemeral") is None


def test_bad_names_fail_before_any_request(api, depth):
    with pytest.raises(NSQValueError, match="topic name"):
        depth(api, "bad topic", "etl", False)


# -- failures: each names the URL, within the timeout -----------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_http_port_is_a_connection_error(depth):
    port = _closed_port()
    api = NSQDHTTPClient("127.0.0.1", port, timeout=2)
    with pytest.raises(NSQConnectionError, match=f"127.0.0.1:{port}/stats"):
        depth(api, "t", "c", False)


def test_the_tcp_port_given_as_http_port_is_a_protocol_error(nsqd, depth):
    api = NSQDHTTPClient(nsqd.host, nsqd.tcp_port, timeout=5)
    with pytest.raises(NSQProtocolError, match="valid HTTP"):
        depth(api, "t", "c", False)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def test_a_server_that_never_answers_times_out(silent_port, depth):
    api = NSQDHTTPClient("127.0.0.1", silent_port, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(
        NSQTimeoutError,
        match=r"could not get an answer from http://127\.0\.0\.1:\d+/stats.* within 0\.5s",
    ):
        depth(api, "t", "c", False)
    assert time.monotonic() - started < 5


class _Answer(BaseHTTPRequestHandler):
    status = 500
    body = b'{"message":"INTERNAL_ERROR"}'

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[Callable[[int, bytes], int]]:
    servers: list[ThreadingHTTPServer] = []

    def start(status: int, body: bytes) -> int:
        handler = type("Handler", (_Answer,), {"status": status, "body": body})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_an_error_status_carries_nsqds_message(answering, depth):
    port = answering(500, b'{"message":"INTERNAL_ERROR"}')
    with pytest.raises(NSQHTTPError, match="HTTP 500: INTERNAL_ERROR") as info:
        depth(NSQDHTTPClient("127.0.0.1", port), "t", "c", False)
    assert info.value.status == 500


def test_an_answer_that_is_not_stats_is_a_protocol_error(answering, depth):
    port = answering(200, b'{"hello": "world"}')
    with pytest.raises(NSQProtocolError, match="did not answer with nsqd's stats"):
        depth(NSQDHTTPClient("127.0.0.1", port), "t", "c", False)


def test_the_pre_1_0_data_envelope_is_understood(answering, depth):
    doc = (
        b'{"status_code":200,"status_txt":"OK","data":{"version":"0.3.8","topics":'
        b'[{"topic_name":"t","depth":0,"paused":false,"channels":[{"channel_name":"c",'
        b'"depth":7,"in_flight_count":1,"deferred_count":0,"paused":false}]}]}}'
    )
    port = answering(200, doc)
    got = depth(NSQDHTTPClient("127.0.0.1", port), "t", "c", False)
    assert (got.exists, got.ready, got.in_flight) == (True, 7, 1)


# -- which API a connection's settings select ------------------------------------------


def test_from_config_picks_https_only_with_tls_and_an_https_port(tls_files):
    plain = ClientConfig(host="nsqd-a")
    secure = ClientConfig(host="nsqd-a", tls=True, tls_ca_file=tls_files.ca_file)

    assert NSQDHTTPClient.from_config(plain) is None
    assert repr(NSQDHTTPClient.from_config(plain, http_port=4151)) == (
        "<NSQDHTTPClient http://nsqd-a:4151>"
    )
    assert repr(NSQDHTTPClient.from_config(secure, http_port=4151)) == (
        "<NSQDHTTPClient http://nsqd-a:4151>"
    )
    assert repr(NSQDHTTPClient.from_config(secure, http_port=4151, https_port=4152)) == (
        "<NSQDHTTPClient https://nsqd-a:4152>"
    )


def test_https_verifies_nsqds_certificate(nsqd_factory, tls_files, depth, nsq_topic):
    server = nsqd_factory(tls_cert=tls_files.server_cert, tls_key=tls_files.server_key)
    https_port = server.broker.https_port
    trusted = ClientConfig(host="127.0.0.1", tls=True, tls_ca_file=tls_files.ca_file)
    untrusted = ClientConfig(host="127.0.0.1", tls=True)

    api = NSQDHTTPClient.from_config(trusted, https_port=https_port)
    assert api is not None and depth(api, nsq_topic, "etl", True).exists is False
    assert server.channel_stats(nsq_topic, "etl") is not None

    api = NSQDHTTPClient.from_config(untrusted, https_port=https_port)
    assert api is not None
    with pytest.raises(NSQConnectionError, match="certificate"):
        depth(api, nsq_topic, "etl", False)
