"""Every wait for nsqd is bounded, also while a request is still being written.

nsqd checks a body's size before it reads the body: it answers ``E_BAD_MESSAGE`` (or
``E_BAD_BODY``) and closes with the body unread. A client still writing that body must
end the call with nsqd's error, not wait forever for the socket to drain. A server that
stops reading and keeps the socket open must end the call with a timeout. The scripted
server makes both certain: it reads only a command's line and size, through a small
receive buffer, so a large body never fits in flight.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

import pytest

from airflow_provider_nsq.client import ClientConfig
from airflow_provider_nsq.protocol import NSQServerError, NSQTimeoutError
from tests.support.drivers import DRIVERS, make_driver
from tests.support.scripted_nsqd import Peer, ScriptedNSQD

pytestmark = [pytest.mark.parametrize("kind", DRIVERS), pytest.mark.timeout(60)]

BIG = 32_000_000  # far beyond what the socket buffers of both ends hold
LIMITS = {"max_msg_size": 64_000_000, "max_body_size": 128_000_000}  # the client lets it go


def _publish(conn, command: str, topic: str, body: bytes) -> None:
    if command == "PUB":
        conn.publish(topic, body)
    elif command == "DPUB":
        conn.defer_publish(topic, body, 1000)
    else:
        conn.multi_publish(topic, [body])


def _no_unretrieved_exceptions(caplog: pytest.LogCaptureFixture) -> None:
    gc.collect()  # asyncio logs an unretrieved exception when its future is collected
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


@pytest.mark.parametrize("command", ["PUB", "DPUB", "MPUB"])
def test_nsqd_refusing_a_body_it_has_not_read_ends_the_publish_with_its_error(
    kind, command, caplog
) -> None:
    def refuse_unread(peer: Peer) -> None:
        peer.handshake()
        line, size = peer.read_head()
        peer.send_error("E_BAD_MESSAGE", f"{line.split()[0]} message too big {size} > 1048576")
        peer.close()

    def accept(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command() == ("PUB t", b"after")
        peer.send_response(b"OK")
        peer.read_command()

    caplog.set_level(logging.DEBUG, logger="asyncio")
    scripts = [refuse_unread] * 3 + [accept]
    with ScriptedNSQD(*scripts, rcvbuf=4096) as server:
        cfg = ClientConfig(host="127.0.0.1", port=server.port, read_timeout=30, **LIMITS)
        with make_driver(kind, cfg) as conn:
            for _ in range(3):  # each on a fresh connection: the race is the same each time
                with pytest.raises(NSQServerError) as info:
                    _publish(conn, command, "t", b"x" * BIG)
                assert info.value.code == "E_BAD_MESSAGE"
                assert info.value.description.startswith(command)
            conn.publish("t", b"after")  # the connection recovers for the next call
    _no_unretrieved_exceptions(caplog)


def test_a_server_that_stops_reading_ends_the_publish_in_a_timeout(kind, caplog) -> None:
    stop = threading.Event()

    def stall(peer: Peer) -> None:
        peer.handshake()
        peer.read_head()
        stop.wait(60)  # keeps the socket open, reads nothing more, until the test ends

    caplog.set_level(logging.DEBUG, logger="asyncio")
    read_timeout = 1.0
    with ScriptedNSQD(stall, rcvbuf=4096) as server:
        cfg = ClientConfig(host="127.0.0.1", port=server.port, read_timeout=read_timeout, **LIMITS)
        conn = make_driver(kind, cfg)
        conn.connect()
        try:
            started = time.monotonic()
            with pytest.raises(NSQTimeoutError, match=r"stopped reading: \d+ bytes"):
                conn.publish("t", b"x" * BIG)
            waited = time.monotonic() - started
        finally:
            stop.set()
            conn.close()
    assert waited < read_timeout * 3  # one read_timeout without progress, plus slack
    _no_unretrieved_exceptions(caplog)


def test_a_server_that_reads_the_request_and_never_answers_times_out(kind) -> None:
    stop = threading.Event()

    def silent(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        stop.wait(60)  # silent until the test ends

    with ScriptedNSQD(silent) as server:
        cfg = ClientConfig(host="127.0.0.1", port=server.port, read_timeout=0.5)
        conn = make_driver(kind, cfg)
        conn.connect()
        try:
            with pytest.raises(NSQTimeoutError, match="did not answer"):
                conn.publish("t", b"x")
        finally:
            stop.set()
            conn.close()


@pytest.mark.parametrize("command", ["PUB", "DPUB", "MPUB"])
def test_the_server_refusing_an_oversized_body_ends_the_publish(
    kind, command, nsqd, nsq_topic, caplog
) -> None:
    """Against the embedded broker, or the real nsqd of ``NSQD_ADDRESS`` (its default
    limits: 1 MiB messages, 5 MiB MPUB bodies)."""
    caplog.set_level(logging.DEBUG, logger="asyncio")
    cfg = ClientConfig(host=nsqd.host, port=nsqd.tcp_port, read_timeout=30, **LIMITS)
    with make_driver(kind, cfg) as conn:
        for _ in range(3):
            with pytest.raises(NSQServerError) as info:
                _publish(conn, command, nsq_topic, b"x" * BIG)
            expected = "E_BAD_BODY" if command == "MPUB" else "E_BAD_MESSAGE"
            assert info.value.code == expected
            assert info.value.description.startswith(f"{command} ")
        conn.publish(nsq_topic, b"after")
    _no_unretrieved_exceptions(caplog)


def test_a_server_that_freezes_between_two_publishes_times_out_within_read_timeout(kind) -> None:
    # The asyncio driver bounds every reply wait with one timer per connection, armed at
    # the first publish: the second one's wait must still last read_timeout from its own
    # start, not from the timer's.
    stop = threading.Event()

    def freeze_after_one(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.send_response(b"OK")
        peer.read_command()
        stop.wait(60)  # silent until the test ends

    read_timeout = 2.0
    with ScriptedNSQD(freeze_after_one) as server:
        cfg = ClientConfig(host="127.0.0.1", port=server.port, read_timeout=read_timeout)
        conn = make_driver(kind, cfg)
        conn.connect()
        try:
            conn.publish("t", b"one")
            time.sleep(read_timeout * 0.6)  # set-up: the timer armed for "one" is half spent
            started = time.monotonic()
            with pytest.raises(NSQTimeoutError, match="did not answer"):
                conn.publish("t", b"two")
            waited = time.monotonic() - started
        finally:
            stop.set()
            conn.close()
    assert read_timeout * 0.9 <= waited < read_timeout * 1.3, waited
