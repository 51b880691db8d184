"""Client edge cases against a scripted server, for both drivers."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import pytest

from airflow_provider_nsq.client import ClientConfig
from airflow_provider_nsq.protocol import (
    NSQAuthError,
    NSQConnectionClosedError,
    NSQConnectionError,
    NSQProtocolError,
    NSQServerError,
    NSQTimeoutError,
    NSQValueError,
)
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.drivers import DRIVERS, make_consumer, make_driver
from tests.support.scripted_nsqd import Peer, ScriptedNSQD

pytestmark = pytest.mark.parametrize("kind", DRIVERS)


def config(server: ScriptedNSQD, **kw) -> ClientConfig:
    kw.setdefault("read_timeout", 5.0)
    kw.setdefault("connect_timeout", 5.0)
    return ClientConfig(host="127.0.0.1", port=server.port, **kw)


def test_heartbeat_between_pub_and_ok_is_answered_and_publish_returns(kind) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command() == ("PUB t", b"hello")
        peer.send_response(b"_heartbeat_")
        assert peer.read_command()[0] == "NOP"  # answered before the OK arrives
        peer.send_response(b"OK")
        peer.read_command()

    with ScriptedNSQD(script) as server, make_driver(kind, config(server)) as conn:
        conn.publish("t", b"hello")
        assert [c[0] for c in server.peers[0].commands] == ["IDENTIFY", "PUB t", "NOP"]


def test_non_fatal_error_does_not_consume_the_pending_reply(kind) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.send_error("E_FIN_FAILED", "FIN 0000000000000000 failed ID not in flight")
        peer.send_response(b"OK")
        peer.read_command()

    with ScriptedNSQD(script) as server, make_driver(kind, config(server)) as conn:
        conn.publish("t", b"x")
        assert [w.code for w in conn.warnings] == ["E_FIN_FAILED"]
        assert conn.connected


def test_fatal_error_raises_code_and_text_and_next_publish_reconnects(kind) -> None:
    def refuse(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.send_error("E_PUB_FAILED", "PUB failed exiting")
        peer.close()

    def accept(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command() == ("PUB t", b"again")
        peer.send_response(b"OK")
        peer.read_command()

    with ScriptedNSQD(refuse, accept) as server, make_driver(kind, config(server)) as conn:
        with pytest.raises(NSQServerError) as info:
            conn.publish("t", b"x")
        assert (info.value.code, info.value.description) == ("E_PUB_FAILED", "PUB failed exiting")
        assert info.value.fatal
        conn.publish("t", b"again")
        assert server.connections == 2


def test_close_before_ok_is_never_reported_as_success(kind) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.close()

    with (
        ScriptedNSQD(script) as server,
        make_driver(kind, config(server)) as conn,
        pytest.raises(
            NSQConnectionClosedError, match="before answering PUB: the outcome is unknown"
        ),
    ):
        conn.publish("t", b"x")


def test_idle_connection_nsqd_dropped_is_reopened_before_the_publish_is_written(kind) -> None:
    dropped = threading.Event()

    def drops_when_idle(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command() == ("PUB t", b"first")
        peer.send_response(b"OK")
        # nsqd: nothing read for 2 x heartbeat_interval -> close without an error frame
        peer.sock.settimeout(2.0)
        try:
            peer.read_command()
        except TimeoutError:
            peer.close()
            dropped.set()

    def fresh(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command() == ("PUB t", b"second")
        peer.send_response(b"OK")
        peer.read_command()

    with ScriptedNSQD(drops_when_idle, fresh) as server:
        cfg = config(server, heartbeat_interval_ms=1000)
        with make_driver(kind, cfg) as conn:
            conn.publish("t", b"first")
            assert dropped.wait(10)
            conn.publish("t", b"second")
            assert server.connections == 2
            assert [c for c in server.peers[0].commands if c[0].startswith("PUB")] == [
                ("PUB t", b"first")
            ]


def test_frames_split_into_single_bytes_are_reassembled(kind) -> None:
    body = bytes(range(256))

    def script(peer: Peer) -> None:
        peer.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer.handshake()
        assert peer.read_command()[0] == "SUB t c"
        peer.send_response(b"OK")
        assert peer.read_command()[0] == "RDY 1"
        frame = struct.pack(">IIqH", 4 + 26 + len(body), 2, 123, 1) + b"0123456789abcdef" + body
        for i in range(len(frame)):
            peer.send(frame[i : i + 1])
        while True:
            peer.read_command()

    with ScriptedNSQD(script) as server, make_driver(kind, config(server)) as conn:
        conn.subscribe("t", "c")
        conn.ready(1)
        got = wait_for(lambda: conn.read_messages(1.0), 5, 0)
        assert [(m.id, m.timestamp, m.attempts, m.body) for m in got] == [
            ("0123456789abcdef", 123, 1, body)
        ]


@pytest.mark.parametrize(
    "response, seen",
    [
        # nsqd's own HTTP port (what a mistyped port usually is)
        (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "(HTTP/1.1 400 Bad Request)"),
        # an HTTP proxy in front of it: reported as seen, not blamed on nsqd
        (
            b"HTTP/1.1 502 Bad Gateway\r\nServer: envoy\r\nContent-Length: 0\r\n\r\n",
            "(HTTP/1.1 502 Bad Gateway; Server: envoy)",
        ),
    ],
)
def test_an_http_answer_is_quoted_and_its_source_asked(kind, response, seen) -> None:
    def http(peer: Peer) -> None:
        peer.expect_magic()
        peer.send(response)
        peer.close()

    with ScriptedNSQD(http) as server:
        conn = make_driver(kind, config(server))
        with pytest.raises(NSQProtocolError) as info:
            conn.connect()
        conn.close()
    text = str(info.value)
    assert f"got an HTTP response where NSQ frames were expected {seen}" in text
    assert "is this nsqd's HTTP port (4151 by default) or an HTTP proxy?" in text
    assert "TCP port (4150 by default)" in text
    assert "this address is nsqd's HTTP port" not in text  # a hint, not a verdict


def test_oversized_frame_is_a_protocol_error_not_an_allocation(kind) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.send(struct.pack(">II", 0x7FFFFFF0, 0))
        peer.read_command()

    with ScriptedNSQD(script) as server, make_driver(kind, config(server)) as conn:
        with pytest.raises(NSQProtocolError, match="exceeds the limit"):
            conn.publish("t", b"x")
        assert not conn.connected


def test_auth_required_without_secret_fails_clearly(kind) -> None:
    def script(peer: Peer) -> None:
        peer.handshake(auth_required=True)
        peer.read_command()

    with ScriptedNSQD(script) as server:
        conn = make_driver(kind, config(server))
        with pytest.raises(NSQAuthError, match="no AUTH secret"):
            conn.connect()
        conn.close()


def test_auth_with_secret_is_sent_after_identify(kind) -> None:
    def script(peer: Peer) -> None:
        peer.handshake(auth_required=True)
        assert peer.read_command() == ("AUTH", b"s3cret")
        peer.send_response(
            json.dumps({"identity": "me", "identity_url": "", "permission_count": 1}).encode()
        )
        assert peer.read_command() == ("PUB t", b"x")
        peer.send_response()
        peer.read_command()

    with ScriptedNSQD(script) as server:
        cfg = config(server, auth_secret="s3cret")
        assert "s3cret" not in repr(cfg)
        with make_driver(kind, cfg) as conn:
            assert conn.auth_info["identity"] == "me"
            conn.publish("t", b"x")


def test_no_reply_within_read_timeout_raises_and_drops_the_connection(kind) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.read_command()  # until the client goes away

    with (
        ScriptedNSQD(script) as server,
        make_driver(kind, config(server, read_timeout=0.3)) as conn,
    ):
        started = time.monotonic()
        with pytest.raises(NSQTimeoutError, match="did not answer"):
            conn.publish("t", b"x")
        assert time.monotonic() - started < 3
        assert not conn.connected


def test_connect_to_a_closed_port_fails_fast(kind) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    conn = make_driver(kind, ClientConfig(host="127.0.0.1", port=port, connect_timeout=2))
    started = time.monotonic()
    with pytest.raises(NSQConnectionError, match=f"127.0.0.1:{port}"):
        conn.connect()
    assert time.monotonic() - started < 2
    conn.close()


def test_silent_server_times_out_within_connect_timeout(kind) -> None:
    def silent(peer: Peer) -> None:
        peer.expect_magic()
        peer.read_command()
        peer.read_command()

    with ScriptedNSQD(silent) as server:
        conn = make_driver(kind, config(server, connect_timeout=0.3))
        with pytest.raises(NSQTimeoutError):
            conn.connect()
        conn.close()


def test_mpub_split_to_fit_max_body_size_and_partial_failure_is_reported(kind) -> None:
    bodies = [bytes([65 + i]) * 300 for i in range(10)]

    def script(peer: Peer) -> None:
        peer.handshake()
        received = []
        for _ in range(4):
            line, body = peer.read_command()
            assert line == "MPUB t"
            assert len(body) <= 1024
            received.append(body)
        count = [struct.unpack(">I", b[:4])[0] for b in received]
        assert count == [3, 3, 3, 1]
        peer.send_response()
        peer.send_error("E_MPUB_FAILED", "MPUB failed exiting")
        peer.close()

    with (
        ScriptedNSQD(script) as server,
        make_driver(kind, config(server, max_body_size=1024)) as conn,
    ):
        with pytest.raises(NSQServerError, match="accepted 1 MPUB frames with 3 messages") as info:
            conn.multi_publish("t", bodies)
        assert info.value.code == "E_MPUB_FAILED"


def test_bad_input_is_refused_before_anything_is_sent(kind) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()

    with ScriptedNSQD(script) as server, make_driver(kind, config(server, max_msg_size=10)) as conn:
        with pytest.raises(NSQValueError, match="max message size of 10"):
            conn.publish("t", b"x" * 11)
        with pytest.raises(NSQValueError, match="empty"):
            conn.multi_publish("t", [b"ok", b""])
        with pytest.raises(NSQValueError, match="invalid topic name 'bad topic'"):
            conn.publish("bad topic", b"x")
        with pytest.raises(NSQValueError, match="out of range 0-3600000"):
            conn.defer_publish("t", b"x", 3_600_001)
        assert conn.connected
    assert [c[0] for c in server.peers[0].commands] == ["IDENTIFY"]


def test_manual_window_hands_back_messages_and_close_requeues_the_rest(kind) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command()[0] == "SUB t c"
        peer.send_response()
        assert peer.read_command()[0] == "RDY 2"
        peer.send_message(b"000000000000000a", b"one")
        peer.send_message(b"000000000000000b", b"two")
        while True:
            if peer.read_command()[0] == "CLS":
                peer.send_response(b"CLOSE_WAIT")

    with ScriptedNSQD(script) as server:
        consumer = make_consumer(kind, "t", "c", config(server))
        got = consumer.consume(max_messages=2, timeout=5, ack="manual")
        assert [m.body for m in got] == [b"one", b"two"]
        got[0].finish()
        got[0].finish()  # idempotent
        consumer.close()
        server.done.wait(5)

    def commands() -> list[str]:
        return [c[0] for c in server.peers[0].commands]

    lines = wait_for(
        lambda: "REQ 000000000000000b 0" in commands() and commands(),
        5,
        0.01,
        message=lambda: f"the REQ at close, among {commands()}",
    )
    answers = [line for line in lines if line.startswith(("FIN", "REQ"))]
    assert answers == ["FIN 000000000000000a", "REQ 000000000000000b 0"]
