"""The consumer over several nsqds: one window, a long-lived stream, close.

Every scenario runs over both drivers (``NSQConsumer``, ``AsyncNSQConsumer`` behind a
small sync facade) against the ``nsq_topology`` fixture, so it also passes against real
nsqd/nsqlookupd (``NSQLOOKUPD_HTTP_ADDRESS``, ``NSQD_ADDRESS`` listing the nsqds
registered with it). Only stopping an nsqd needs the embedded topology.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_nsq.client import ClientConfig
from airflow_provider_nsq.client.consumer import AsyncNSQConsumer, NSQConsumer
from airflow_provider_nsq.protocol.errors import (
    NSQConnectionError,
    NSQServerError,
    NSQStateError,
    NSQTimeoutError,
    NSQTLSError,
    NSQValueError,
)
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.drivers import AsyncFacade
from tests.support.net import TCPProxy, closed_port, silent_server
from tests.support.scripted_nsqd import Peer, ScriptedNSQD

MODES = ["blocking", "asyncio"]
pytestmark = pytest.mark.parametrize("mode", MODES)


class AsyncConsumerFacade(AsyncFacade):
    """Runs AsyncNSQConsumer's coroutines to completion on a private loop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(target=AsyncNSQConsumer(*args, **kwargs))
        self.consumer = self.conn

    def pump(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0.01))  # the loop answers heartbeats


def make(mode: str, topic: str, channel: str = "c", **kwargs: Any) -> Any:
    kwargs.setdefault("config", ClientConfig())
    if mode == "blocking":
        return NSQConsumer(topic, channel, **kwargs)
    return AsyncConsumerFacade(topic, channel, **kwargs)


def publish_spread(topology, topic: str, counts: list[int], channel: str = "c") -> list[bytes]:
    """Publish counts[i] messages on nsqd i (the channel made first); the bodies."""
    bodies = []
    for i, (nsqd, count) in enumerate(zip(topology.nsqds, counts, strict=True)):
        nsqd.create_channel(topic, channel)
        for j in range(count):
            body = f"{i}-{j}".encode()
            nsqd.http_publish(topic, body)
            bodies.append(body)
    return bodies


def settled(topology, topic: str, channel: str = "c", depth: int = 0) -> bool:
    """Every nsqd: nothing in flight, ``depth`` in all (summed)."""
    stats = [n.channel_stats(topic, channel) or {} for n in topology.nsqds]
    return (
        all(s.get("in_flight_count", 0) == 0 for s in stats)
        and sum(s.get("depth", 0) for s in stats) == depth
    )


def wait_settled(topology, topic: str, depth: int = 0, channel: str = "c") -> None:
    topology.nsqds[0].wait_for(lambda: settled(topology, topic, channel, depth), timeout=10)


# -- (a) one window ------------------------------------------------------------------------


def test_one_window_reads_every_message_from_every_nsqd_found_through_lookupd(
    mode, nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=3)
    bodies = publish_spread(topology, nsq_topic, [5, 10, 15])
    topology.wait_for_producers(nsq_topic)
    consumer = make(mode, nsq_topic, lookupd_http_addresses=topology.lookupd_http_addresses)
    try:
        started = time.monotonic()
        got = consumer.consume(max_messages=30, timeout=10)
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    assert sorted(m.body for m in got) == sorted(bodies)
    assert elapsed < 8  # it ended when it had them all, not at the timeout
    assert Counter(m.nsqd for m in got) == {
        n.tcp_address: c for n, c in zip(topology.nsqds, [5, 10, 15], strict=True)
    }
    wait_settled(topology, nsq_topic)  # all FIN'd, nothing left in flight


def test_a_window_from_a_static_list_reads_every_nsqd_and_manual_ack_answers_on_each(
    mode, nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=2)
    bodies = publish_spread(topology, nsq_topic, [3, 3])
    consumer = make(mode, nsq_topic, nsqd_tcp_addresses=",".join(topology.nsqd_tcp_addresses))
    try:
        got = consumer.consume(max_messages=10, timeout=2, ack="manual")
        assert sorted(m.body for m in got) == sorted(bodies)
        first = [m for m in got if m.nsqd == topology.nsqds[0].tcp_address]
        consumer.finish(*first)  # each on the connection that delivered it
    finally:
        consumer.close()  # REQs the other nsqd's three
    wait_settled(topology, nsq_topic, depth=3)
    assert topology.nsqds[0].channel_stats(nsq_topic, "c")["depth"] == 0


def test_a_window_takes_at_most_max_messages_and_requeues_nothing_it_did_not_return(
    mode, nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=2)
    publish_spread(topology, nsq_topic, [20, 20])
    consumer = make(mode, nsq_topic, nsqd_tcp_addresses=topology.nsqd_tcp_addresses)
    try:
        got = consumer.consume(max_messages=7, timeout=3, ack="fin")
    finally:
        consumer.close()
    assert len(got) == 7
    wait_settled(topology, nsq_topic, depth=33)


def test_a_dead_nsqd_among_live_ones_is_skipped(mode, nsq_topology, nsq_topic, caplog) -> None:
    topology = nsq_topology(n=2)
    bodies = publish_spread(topology, nsq_topic, [2, 2])
    topology.wait_for_producers(nsq_topic)
    dead = closed_port()
    with topology.lookupd.announce(nsq_topic, tcp_port=dead):
        topology.wait_for_producers(nsq_topic, 3)
        consumer = make(mode, nsq_topic, lookupd_http_addresses=topology.lookupd_http_addresses)
        try:
            with caplog.at_level(logging.WARNING):
                got = consumer.consume(max_messages=10, timeout=2)
        finally:
            consumer.close()
    assert sorted(m.body for m in got) == sorted(bodies)
    assert f"127.0.0.1:{dead}" in caplog.text


def test_a_dead_lookupd_among_live_ones_is_skipped(mode, nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=2)
    bodies = publish_spread(topology, nsq_topic, [2, 2])
    topology.wait_for_producers(nsq_topic)
    lookupds = [f"127.0.0.1:{closed_port()}", *topology.lookupd_http_addresses]
    consumer = make(mode, nsq_topic, lookupd_http_addresses=lookupds)
    try:
        got = consumer.consume(max_messages=10, timeout=2)
    finally:
        consumer.close()
    assert sorted(m.body for m in got) == sorted(bodies)


def test_no_nsqd_reachable_is_an_error_naming_them(mode, nsq_topic) -> None:
    dead = [f"127.0.0.1:{closed_port()}", f"127.0.0.1:{closed_port()}"]
    consumer = make(mode, nsq_topic, nsqd_tcp_addresses=dead)
    try:
        with pytest.raises(NSQConnectionError) as info:
            consumer.consume(max_messages=1, timeout=1)
    finally:
        consumer.close()
    assert all(a in str(info.value) for a in dead)


def test_nsqds_that_never_answer_cost_one_connect_timeout_not_one_each(mode, nsq_topic) -> None:
    # Both runners open every nsqd at once (the blocking one over a selector): four
    # hung nsqds (they accept, then never answer the handshake) take one timeout.
    with contextlib.ExitStack() as stack:
        hung = [stack.enter_context(silent_server()) for _ in range(4)]
        config = ClientConfig(connect_timeout=1.0)
        consumer = make(mode, nsq_topic, config=config, nsqd_tcp_addresses=hung)
        started = time.monotonic()
        try:
            with pytest.raises(NSQTimeoutError, match="the handshake within 1s") as info:
                consumer.start(4)
        finally:
            consumer.close()
        elapsed = time.monotonic() - started
    assert elapsed < 3.0  # one after the other would be 4 s
    assert all(a in str(info.value) for a in hung)


def test_tls_refused_by_every_nsqd_is_a_tls_error_not_an_outage(
    mode, nsqd_factory, nsq_topic
) -> None:
    # A broker without TLS: a consumer that requires it can never read, so starting is
    # an NSQTLSError to fix (callers that wait out outages must not wait on this).
    plain = [nsqd_factory().tcp_address, nsqd_factory().tcp_address]
    consumer = make(mode, nsq_topic, config=ClientConfig(tls=True), nsqd_tcp_addresses=plain)
    try:
        with pytest.raises(NSQTLSError) as info:
            consumer.start(10)
    finally:
        consumer.close()
    assert all(a in str(info.value) for a in plain)


def test_a_window_reads_every_nsqd_over_tls_with_compression(
    mode, nsqd_factory, tls_files, nsq_topic
) -> None:
    # Every handshake's TLS upgrade and compression happen while the runner opens all
    # the nsqds at once (the blocking one pumps them over one selector).
    servers = [
        nsqd_factory(tls_cert=tls_files.server_cert, tls_key=tls_files.server_key) for _ in range(3)
    ]
    bodies = []
    for i, server in enumerate(servers):
        server.create_channel(nsq_topic, "c")
        for j in range(3):
            bodies.append(f"{i}-{j}".encode())
            server.http_publish(nsq_topic, bodies[-1])
    config = ClientConfig(tls=True, tls_ca_file=tls_files.ca_file, compression="deflate")
    addresses = [s.tcp_address for s in servers]
    consumer = make(mode, nsq_topic, config=config, nsqd_tcp_addresses=addresses)
    try:
        got = consumer.consume(max_messages=9, timeout=5)
        assert all(c.tls and c.compression == "deflate" for c in consumer.connections.values())
    finally:
        consumer.close()
    assert sorted(m.body for m in got) == sorted(bodies)


def test_a_topic_no_nsqd_has_yet_is_an_empty_window(mode, nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=1)
    consumer = make(mode, nsq_topic, lookupd_http_addresses=topology.lookupd_http_addresses)
    try:
        assert consumer.consume(max_messages=5, timeout=5) == []
    finally:
        consumer.close()


def test_an_nsqd_refusing_the_sub_is_raised_not_skipped(mode, nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=1)

    def refuse(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command()[0] == f"SUB {nsq_topic} c"
        peer.send_error("E_UNAUTHORIZED", "AUTH failed for SUB")
        peer.read_command()

    with ScriptedNSQD(refuse) as refusing:
        addresses = [*topology.nsqd_tcp_addresses, f"127.0.0.1:{refusing.port}"]
        consumer = make(mode, nsq_topic, nsqd_tcp_addresses=addresses)
        try:
            with pytest.raises(NSQServerError, match="E_UNAUTHORIZED"):
                consumer.consume(max_messages=1, timeout=1)
        finally:
            consumer.close()


def test_a_producer_dropped_mid_window_loses_nothing(mode, nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=2)
    bodies = publish_spread(topology, nsq_topic, [5, 5])
    first = topology.nsqds[0]
    proxy = TCPProxy(first.host, first.tcp_port)

    def cut_when_delivered() -> None:
        first.wait_for(
            lambda: (first.channel_stats(nsq_topic, "c") or {}).get("in_flight_count") == 5,
            timeout=10,
        )
        proxy.cut()

    cutter = threading.Thread(target=cut_when_delivered)
    config = ClientConfig(msg_timeout_ms=3000)
    consumer = make(
        mode,
        nsq_topic,
        config=config,
        nsqd_tcp_addresses=[proxy.address, topology.nsqds[1].tcp_address],
    )
    try:
        cutter.start()
        got = consumer.consume(max_messages=20, timeout=2.5)
    finally:
        consumer.close()
        cutter.join()
        proxy.close()
    # The window kept only what it can answer; the cut nsqd's five come back.
    assert sorted(m.body for m in got) == sorted(b for b in bodies if b.startswith(b"1-"))
    wait_settled(topology, nsq_topic, depth=5)
    again = make(mode, nsq_topic, config=config, nsqd_tcp_addresses=topology.nsqd_tcp_addresses)
    try:
        rest = again.consume(max_messages=5, timeout=2.5)
    finally:
        again.close()
    assert sorted(m.body for m in got + rest) == sorted(bodies)
    assert {m.attempts for m in rest} == {2}


def test_a_consumer_runs_windows_or_a_stream_and_checks_its_arguments(
    mode, nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=1)
    with pytest.raises(NSQValueError, match="lookupd HTTP address"):
        make(mode, nsq_topic, lookupd_http_addresses=["host:port"])
    consumer = make(mode, nsq_topic, nsqd_tcp_addresses=topology.nsqd_tcp_addresses)
    try:
        with pytest.raises(NSQValueError, match="max_messages"):
            consumer.consume(max_messages=0, timeout=1)
        with pytest.raises(NSQStateError, match="start"):
            consumer.read(0.1)
        consumer.consume(max_messages=1, timeout=0.2)
        consumer.consume(max_messages=1, timeout=0.2)  # windows, one after the other
        with pytest.raises(NSQStateError, match="windows or one stream"):
            consumer.start(10)
    finally:
        consumer.close()
    with pytest.raises(NSQValueError, match="max_messages=6000 exceeds"):
        make(mode, nsq_topic, nsqd_tcp_addresses=topology.nsqd_tcp_addresses).consume(
            max_messages=6000, timeout=1
        )


def test_back_to_back_full_windows_read_on_the_same_subscriptions(
    mode, nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=2)
    bodies = publish_spread(topology, nsq_topic, [5, 5])
    consumer = make(mode, nsq_topic, nsqd_tcp_addresses=topology.nsqd_tcp_addresses)
    try:
        first = consumer.consume(max_messages=4, timeout=5)
        kept = dict(consumer.connections)
        assert len(first) == 4 and consumer.subscribed and len(kept) == 2
        assert consumer.ready_counts() == dict.fromkeys(kept, 0)  # paused: nothing comes
        second = consumer.consume(max_messages=4, timeout=5)
        assert consumer.connections == kept  # no new connection, no new SUB
        held = consumer.consume(max_messages=4, timeout=1, ack="manual")  # 2 left: not full
        assert len(held) == 2 and not consumer.subscribed
        with pytest.raises(NSQStateError, match="2 message\\(s\\) of the last window"):
            consumer.consume(max_messages=1, timeout=0.2)
        consumer.finish(*held)
        assert consumer.consume(max_messages=1, timeout=0.3) == []  # CLS'd: new connections
        assert set(consumer.connections.values()).isdisjoint(kept.values())
    finally:
        consumer.close()
    assert sorted(m.body for m in first + second + held) == sorted(bodies)
    wait_settled(topology, nsq_topic)


# -- (b) streaming -------------------------------------------------------------------------


def read_until(consumer: Any, count: int, timeout: float = 10.0) -> list:
    """At least ``count`` messages, read in reads of 0.2 s."""
    got: list = []

    def enough() -> bool:
        got.extend(consumer.read(0.2))
        return len(got) >= count

    wait_for(enough, timeout, 0, message=lambda: f"{len(got)} of {count} messages read")
    return got


def read_while(consumer: Any, until: Callable[[], bool], timeout: float = 10.0) -> list:
    """Read (and FIN) what comes until ``until()``: reading drives the consumer, which
    opens and drops connections as it goes."""
    got: list = []

    def step() -> bool:
        batch = consumer.read(0.1)
        consumer.finish(*batch)
        got.extend(batch)
        return until()

    wait_for(step, timeout, 0)
    return got


def test_a_stream_reads_every_nsqd_and_never_holds_more_than_its_budget(
    mode, nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=3)
    bodies = publish_spread(topology, nsq_topic, [30, 30, 30])
    topology.wait_for_producers(nsq_topic)
    consumer = make(mode, nsq_topic, lookupd_http_addresses=topology.lookupd_http_addresses)
    try:
        consumer.start(6)
        assert sum(consumer.ready_counts().values()) == 6
        first = read_until(consumer, 6)
        assert len(first) == 6
        assert consumer.read(0.5) == []  # nothing beyond the budget while these are held
        assert {m.nsqd for m in first} == set(topology.nsqd_tcp_addresses)  # none starved
        got = first
        consumer.finish(*first)
        while len(got) < 90:
            batch = read_until(consumer, 1)
            assert batch, "the stream stalled"
            assert consumer.in_flight() <= 6
            consumer.finish(*batch)
            got += batch
    finally:
        consumer.close()
    assert sorted(m.body for m in got) == sorted(bodies)
    wait_settled(topology, nsq_topic)


def clients_of(nsqd: Any, topic: str, channel: str = "c") -> int:
    return len((nsqd.channel_stats(topic, channel) or {}).get("clients") or [])


def test_a_budget_beyond_max_rdy_count_opens_more_connections_per_nsqd(
    mode, nsq_topology, nsq_topic
) -> None:
    # nsqd lets one connection have at most --max-rdy-count (10 here) unanswered: holding
    # 35 needs 4 connections to an nsqd that has them all.
    topology = nsq_topology(n=2, max_rdy_count=10)
    bodies = publish_spread(topology, nsq_topic, [40, 40])
    consumer = make(
        mode,
        nsq_topic,
        nsqd_tcp_addresses=topology.nsqd_tcp_addresses,
        max_connections_per_nsqd=4,
    )
    try:
        consumer.start(35)
        assert len(consumer.connections) == 8
        assert [clients_of(n, nsq_topic) for n in topology.nsqds] == [4, 4]
        held = read_until(consumer, 35)
        assert len(held) == 35  # more than 2 x 10: every connection delivers
        assert consumer.read(0.5) == []  # and never beyond the budget
        assert {m.nsqd for m in held} == set(topology.nsqd_tcp_addresses)
        got = held
        consumer.finish(*held)  # each on the connection that delivered it
        while len(got) < 80:
            batch = read_until(consumer, 1)
            assert batch, "the stream stalled"
            assert consumer.in_flight() <= 35
            consumer.finish(*batch)
            got += batch
    finally:
        consumer.close()
    assert sorted(m.body for m in got) == sorted(bodies)
    wait_settled(topology, nsq_topic)  # all FIN'd: none answered on the wrong connection


def test_extra_connections_close_once_the_budget_no_longer_needs_them(
    mode, nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=1, max_rdy_count=10)
    [server] = topology.nsqds
    publish_spread(topology, nsq_topic, [30])
    consumer = make(
        mode,
        nsq_topic,
        nsqd_tcp_addresses=topology.nsqd_tcp_addresses,
        max_connections_per_nsqd=8,
    )
    try:
        consumer.start(25)
        assert list(consumer.connections) == [
            server.tcp_address,
            f"{server.tcp_address}#2",
            f"{server.tcp_address}#3",
        ]
        held = read_until(consumer, 25)
        assert len(held) == 25
        consumer.set_max_in_flight(8)  # one connection is enough now
        assert consumer.read(0.3) == []  # what is held stays held
        assert len(consumer.connections) == 3
        consumer.finish(*held)
        done = len(held)
        done += len(read_while(consumer, lambda: len(consumer.connections) <= 1))
        assert list(consumer.connections) == [server.tcp_address]
        server.wait_for(lambda: clients_of(server, nsq_topic) == 1, timeout=10)
        consumer.set_max_in_flight(20)  # and they come back when it grows again
        done += len(read_while(consumer, lambda: len(consumer.connections) >= 2))
        assert len(consumer.connections) == 2
    finally:
        consumer.close()  # REQs whatever it still held
    wait_settled(topology, nsq_topic, depth=30 - done)


def test_a_budget_smaller_than_the_nsqds_gives_each_its_turn(mode, nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=3)
    publish_spread(topology, nsq_topic, [20, 20, 20])
    consumer = make(mode, nsq_topic, nsqd_tcp_addresses=topology.nsqd_tcp_addresses)
    seen: set[str] = set()
    try:
        consumer.start(1)

        def every_nsqd_seen() -> bool:
            batch = consumer.read(0.2)
            assert len(batch) <= 1
            consumer.finish(*batch)
            seen.update(m.nsqd for m in batch)
            return len(seen) == 3

        wait_for(every_nsqd_seen, 15, 0, message=lambda: f"messages from {sorted(seen)} only")
    finally:
        consumer.close()
    assert seen == set(topology.nsqd_tcp_addresses)


def test_pause_touch_and_close_requeues_what_is_held(mode, nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=2)
    publish_spread(topology, nsq_topic, [4, 4])
    config = ClientConfig(msg_timeout_ms=2000, heartbeat_interval_ms=1000)
    consumer = make(mode, nsq_topic, config=config, nsqd_tcp_addresses=topology.nsqd_tcp_addresses)
    try:
        consumer.start(4)
        held = read_until(consumer, 4)
        assert len(held) == 4
        consumer.set_max_in_flight(0)
        assert set(consumer.ready_counts().values()) == {0}
        # Held for 2.5 msg_timeouts and 3 heartbeat intervals: TOUCH and pump keep them.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            consumer.touch(*held)
            consumer.pump()
            time.sleep(0.3)
        assert consumer.read(0.1) == []
        assert len(consumer.connections) == 2  # heartbeats were answered
        assert settled(topology, nsq_topic, depth=4) is False  # still in flight, not redelivered
        assert {m.attempts for m in held} == {1}
    finally:
        consumer.close()
    wait_settled(topology, nsq_topic, depth=8)  # REQ'd at close, not after a timeout


def test_touch_held_keeps_what_is_held_in_flight_past_msg_timeout(
    mode, nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=2)
    publish_spread(topology, nsq_topic, [2, 2])
    config = ClientConfig(msg_timeout_ms=1000, heartbeat_interval_ms=1000)
    consumer = make(mode, nsq_topic, config=config, nsqd_tcp_addresses=topology.nsqd_tcp_addresses)
    touched = 0
    try:
        consumer.start(4)
        held = read_until(consumer, 4)
        assert len(held) == 4
        # Held, unanswered, for 3 msg_timeouts: only the consumer's TOUCH policy keeps them.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            count, next_in = consumer.touch_held()
            touched += count
            assert 0 < next_in <= 1 / 3 + 0.01  # a third of the shortest msg_timeout
            consumer.pump()
            time.sleep(min(next_in, 0.1))
        stats = [n.channel_stats(nsq_topic, "c") for n in topology.nsqds]
        assert [(s["in_flight_count"], s["timeout_count"]) for s in stats] == [(2, 0), (2, 0)]
        assert touched >= 4 * 6  # every message, about three times a second
        consumer.finish(*held)
        assert consumer.touch_held().touched == 0  # answered: nothing is held any more
    finally:
        consumer.close()
    wait_settled(topology, nsq_topic)


def test_a_long_lived_consumer_follows_lookupd(mode, nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=2)
    topology.nsqds[0].create_channel(nsq_topic, "c")
    for body in (b"a", b"b"):
        topology.nsqds[0].http_publish(nsq_topic, body)
    topology.wait_for_producers(nsq_topic, 1)
    consumer = make(
        mode,
        nsq_topic,
        lookupd_http_addresses=topology.lookupd_http_addresses,
        lookupd_poll_interval=0.3,
    )
    try:
        consumer.start(10)
        assert list(consumer.connections) == [topology.nsqd_tcp_addresses[0]]
        consumer.finish(*read_until(consumer, 2))
        # A new producer appears (it creates channel c as the lookupd lists it).
        topology.nsqds[1].http_publish(nsq_topic, b"late")
        late = read_until(consumer, 1)
        assert [m.body for m in late] == [b"late"]
        assert late[0].nsqd == topology.nsqd_tcp_addresses[1]
        consumer.finish(*late)
        # Tombstoned: gone from /lookup, so the consumer stops reading from it.
        first = topology.nsqds[0]
        topology.lookupd.tombstone(nsq_topic, first.http_address)
        read_while(consumer, lambda: first.tcp_address not in consumer.connections)
        assert list(consumer.connections) == [topology.nsqd_tcp_addresses[1]]
    finally:
        consumer.close()


def test_a_stream_survives_an_nsqd_going_away(mode, nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=2)
    publish_spread(topology, nsq_topic, [1, 1])
    consumer = make(mode, nsq_topic, nsqd_tcp_addresses=topology.nsqd_tcp_addresses)
    try:
        consumer.start(10)
        consumer.finish(*read_until(consumer, 2))
        topology.stop_nsqd(0)
        read_while(consumer, lambda: len(consumer.connections) <= 1)
        topology.nsqds[1].http_publish(nsq_topic, b"after")
        assert [m.body for m in read_until(consumer, 1)] == [b"after"]
    finally:
        consumer.close()


@pytest.mark.slow
def test_fifty_nsqds_on_a_smaller_budget_deliver_everything_once_and_none_starves(
    mode, nsq_topology, nsq_topic
) -> None:
    # The scale check: a budget below the nsqd count, so most connections wait for
    # their turn; every message arrives exactly once and every nsqd is read.
    topology = nsq_topology(n=50)
    bodies = publish_spread(topology, nsq_topic, [4] * 50)
    consumer = make(mode, nsq_topic, nsqd_tcp_addresses=topology.nsqd_tcp_addresses)
    got: list = []
    try:
        consumer.start(20)
        assert len(consumer.connections) == 50

        def everything_read() -> bool:
            batch = consumer.read(0.2)
            consumer.finish(*batch)
            got.extend(batch)
            return len(got) >= len(bodies)

        wait_for(everything_read, 60, 0, message=lambda: f"{len(got)} of {len(bodies)} read")
        assert consumer.read(0.5) == []  # nothing more: no message twice
    finally:
        consumer.close()
    assert sorted(m.body for m in got) == sorted(bodies)
    assert Counter(m.nsqd for m in got) == dict.fromkeys(topology.nsqd_tcp_addresses, 4)
    wait_settled(topology, nsq_topic)
