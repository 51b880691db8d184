"""The fault-injecting proxy (airflow_provider_nsq.testing.faults) does what it says, so the
guarantee tests built on it mean something. Runs against the session's nsqd (embedded, or
a real one with NSQD_ADDRESS)."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection
from airflow_provider_nsq.protocol import (
    NSQConnectionError,
    NSQTimeoutError,
    encode_pub,
)
from airflow_provider_nsq.testing.faults import FaultProxy, cut, drop, stall


@pytest.fixture
def proxy(nsqd):
    with FaultProxy(nsqd.tcp_address) as p:
        yield p


def client(proxy: FaultProxy, **kw) -> NSQConnection:
    kw.setdefault("read_timeout", 5.0)
    return NSQConnection(ClientConfig(host=proxy.host, port=proxy.port, **kw))


def depth(nsqd, topic: str) -> int:
    stats = nsqd.channel_stats(topic, "c")
    return stats["depth"] if stats else 0


def test_a_clean_proxy_is_transparent(nsqd, nsq_topic, proxy) -> None:
    nsqd.create_channel(nsq_topic, "c")
    with client(proxy) as conn:
        for i in range(20):
            conn.publish(nsq_topic, b"%d" % i)
        conn.multi_publish(nsq_topic, [b"a", b"b"])
    nsqd.wait_for(lambda: depth(nsqd, nsq_topic) == 22)
    assert (proxy.connections, proxy.peak_active, proxy.cuts) == (1, 1, 0)


@pytest.mark.parametrize("how", ["fin", "rst"])
@pytest.mark.parametrize("where", ["before", "mid"])
def test_a_command_cut_before_or_inside_never_reaches_nsqd(
    nsqd, nsq_topic, proxy, where, how
) -> None:
    nsqd.create_channel(nsq_topic, "c")
    proxy.next_connection(cut("to_server", 2, match=b"PUB", where=where, how=how))
    with client(proxy) as conn:
        conn.publish(nsq_topic, b"first")
        with pytest.raises(NSQConnectionError):
            conn.publish(nsq_topic, b"second")
        conn.publish(nsq_topic, b"third")  # the client reconnects on its own
    nsqd.wait_for(lambda: depth(nsqd, nsq_topic) == 2)
    assert proxy.cuts == 1 and proxy.connections == 2


@pytest.mark.parametrize("how", ["fin", "rst"])
@pytest.mark.parametrize("where", ["before", "mid", "after"])
def test_a_reply_cut_leaves_the_message_published_and_the_caller_an_error(
    nsqd, nsq_topic, proxy, where, how
) -> None:
    nsqd.create_channel(nsq_topic, "c")
    # "after" the OK of the 1st PUB: the 2nd PUB then meets a dead connection.
    nth = 1 if where == "after" else 2
    proxy.next_connection(cut("to_client", nth, match=b"OK", where=where, how=how))
    with client(proxy) as conn:
        conn.publish(nsq_topic, b"first")
        if where == "after":
            # The client may or may not notice the cut before writing: either way the
            # 2nd publish is either refused or reconnects, never silently lost.
            try:
                conn.publish(nsq_topic, b"second")
                expected = 2
            except NSQConnectionError:
                expected = 1
        else:
            with pytest.raises(NSQConnectionError):
                conn.publish(nsq_topic, b"second")
            expected = 2  # nsqd had it: only the OK was lost
    nsqd.wait_for(lambda: depth(nsqd, nsq_topic) == expected)


def test_a_command_cut_after_it_reaches_nsqd(nsqd, nsq_topic, proxy) -> None:
    nsqd.create_channel(nsq_topic, "c")
    proxy.next_connection(cut("to_server", 1, match=b"PUB", where="after", how="fin"))
    with client(proxy) as conn, pytest.raises(NSQConnectionError):
        conn.publish(nsq_topic, b"x")
    nsqd.wait_for(lambda: depth(nsqd, nsq_topic) == 1)


def test_a_stalled_reply_times_out_and_release_delivers_what_was_held(nsqd, proxy) -> None:
    proxy.next_connection(stall("to_client", 1))  # the first frame: PUB's OK
    with socket.create_connection((proxy.host, proxy.port), timeout=5) as sock:
        sock.sendall(b"  V2" + encode_pub("stall_topic", b"x"))
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(100)
        proxy.release()
        sock.settimeout(5)
        assert sock.recv(100) == struct.pack(">II", 6, 0) + b"OK"


def test_a_stalled_publish_fails_within_read_timeout(nsqd, nsq_topic, proxy) -> None:
    proxy.next_connection(stall("to_client", 1, match=b"OK"))
    with client(proxy, read_timeout=0.5) as conn:
        started = time.monotonic()
        with pytest.raises(NSQTimeoutError):
            conn.publish(nsq_topic, b"x")
        assert time.monotonic() - started < 5


def test_dropped_commands_never_arrive(nsqd, nsq_topic, proxy) -> None:
    nsqd.create_channel(nsq_topic, "c")
    proxy.next_connection(drop("to_server", 1, match=b"PUB"))
    with client(proxy, read_timeout=0.5) as conn, pytest.raises(NSQTimeoutError):
        conn.publish(nsq_topic, b"x")
    time.sleep(0.2)  # give a wrongly forwarded PUB the time to land
    assert depth(nsqd, nsq_topic) == 0


@pytest.mark.parametrize(("how", "outcome"), [("fin", b""), ("rst", ConnectionResetError)])
def test_fin_is_an_orderly_close_and_rst_a_reset(nsqd, proxy, how, outcome) -> None:
    proxy.next_connection(cut("to_client", 1, how=how))
    with socket.create_connection((proxy.host, proxy.port), timeout=5) as sock:
        sock.sendall(b"  V2IDENTIFY\n" + struct.pack(">I", 2) + b"{}")
        if outcome == b"":
            assert sock.recv(100) == b""
        else:
            with pytest.raises(outcome):
                sock.recv(100)


def test_at_byte_cuts_an_opaque_compressed_stream(nsqd, nsq_topic, proxy) -> None:
    with client(proxy, compression="deflate") as conn:
        conn.publish(nsq_topic, b"compressed")
        proxy.inject(cut("to_server", at_byte=5))
        with pytest.raises(NSQConnectionError):
            conn.publish(nsq_topic, b"y" * 1000)
    assert proxy.cuts == 1


def test_down_refuses_connections_and_up_brings_them_back(nsqd, nsq_topic, proxy) -> None:
    with client(proxy, connect_timeout=2) as conn:
        conn.publish(nsq_topic, b"before")
        proxy.down()
        with pytest.raises(NSQConnectionError):
            conn.publish(nsq_topic, b"during")
        with pytest.raises(NSQConnectionError):
            conn.connect()
        proxy.up()
        conn.publish(nsq_topic, b"after")
    assert proxy.cuts == 1


def test_peak_active_counts_connections_open_at_the_same_time(nsqd, proxy) -> None:
    for _ in range(3):  # one after the other: never more than one open
        with client(proxy) as conn:
            conn.nop()
    assert proxy.peak_active == 1
    a, b = client(proxy).connect(), client(proxy).connect()
    try:
        assert proxy.peak_active == 2
    finally:
        a.close()
        b.close()
    nsqd.wait_for(lambda: proxy.active == 0)
