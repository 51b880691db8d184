"""What an owner of many connections (the consumer) reads of one, over both drivers
against a real server: messages taken, the in-flight count, the wake-up callback, the
failure, abort; and the blocking driver's selector surface."""

from __future__ import annotations

import selectors
import time

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.drivers import DRIVERS, make_driver


@pytest.mark.parametrize("kind", DRIVERS)
def test_in_flight_counts_what_is_delivered_and_not_answered(kind, nsqd, nsq_topic) -> None:
    nsqd.create_channel(nsq_topic, "c")
    for i in range(3):
        nsqd.http_publish(nsq_topic, b"m%d" % i)
    woken: list[int] = []
    with make_driver(kind, ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        driver = conn if kind == "blocking" else conn.conn  # the facade wraps the driver
        driver.on_wake = lambda: woken.append(1)
        conn.subscribe(nsq_topic, "c")
        conn.ready(3)
        got: list = []

        def three_read() -> bool:
            got.extend(conn.read_messages(0.5))
            return len(got) >= 3

        wait_for(three_read, 10, 0)
        assert len(got) == 3 and woken  # the owner was woken when they arrived
        assert (conn.in_flight, conn.messages_waiting, conn.take_messages()) == (3, 0, [])
        assert all(m.connection is not None and not m.responded for m in got)
        got[0].finish()
        conn.requeue(got[1])
        conn.touch(got[2])  # a TOUCH answers nothing: still in flight
        assert (conn.in_flight, [m.responded for m in got]) == (1, [True, True, False])
        assert (conn.alive, conn.failure) == (True, None)
        conn.abort()  # no REQ: nsqd redelivers the last one after its msg_timeout
        assert (conn.alive, conn.in_flight) == (False, 0)


def test_a_selector_sees_the_blocking_connection_and_it_reads_without_waiting(
    nsqd, nsq_topic
) -> None:
    nsqd.create_channel(nsq_topic, "c")
    with NSQConnection(ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        conn.subscribe(nsq_topic, "c")
        conn.ready(1)
        assert conn.read_available() is False  # nothing yet, and no wait
        nsqd.http_publish(nsq_topic, b"one")
        with selectors.DefaultSelector() as selector:
            selector.register(conn, selectors.EVENT_READ)
            assert selector.select(10)  # fileno(): the socket's
        assert not conn.has_buffered_input  # no TLS
        assert conn.read_available() is True
        [message] = conn.take_messages()
        assert (message.body, conn.in_flight) == (b"one", 1)
        message.finish()
    assert conn.fileno() == -1  # closed


@pytest.mark.parametrize("kind", DRIVERS)
def test_last_received_follows_every_read_the_ok_fast_path_included(kind, nsqd, nsq_topic) -> None:
    # A consumer's contact() reads it: what nsqd sent last, whichever path read it.
    with make_driver(kind, ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        driver = conn if kind == "blocking" else conn.conn
        after_handshake = driver.last_received
        assert 0 < after_handshake <= time.monotonic()
        before = time.monotonic()
        conn.publish(nsq_topic, b"x")  # a lone OK: the read that skips the dispatch
        assert driver.last_received >= before > after_handshake
