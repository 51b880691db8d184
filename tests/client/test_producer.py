"""``NSQProducer`` and ``AsyncNSQProducer``: failover before the command is written,
never after it."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_nsq.client.producer import AsyncNSQProducer, NSQProducer
from airflow_provider_nsq.protocol.errors import NSQConnectionError, NSQServerError, NSQValueError
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.net import TCPProxy, closed_port
from tests.support.scripted_nsqd import Peer, ScriptedNSQD


def depth(nsqd, topic: str) -> int:
    stats = nsqd.topic_stats(topic)
    return stats["depth"] if stats else 0


def test_a_dead_first_nsqd_is_skipped_and_the_publish_lands_on_the_next(
    nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=2)
    dead = f"127.0.0.1:{closed_port()}"
    with NSQProducer([dead, *topology.nsqd_tcp_addresses]) as producer:
        producer.publish(nsq_topic, b"one")
        producer.defer_publish(nsq_topic, b"two", 0)
        assert producer.multi_publish(nsq_topic, [b"three", b"four"]) == 1
        assert producer.address == topology.nsqd_tcp_addresses[0]
    first, second = topology.nsqds
    first.wait_for(lambda: depth(first, nsq_topic) == 4)
    assert depth(second, nsq_topic) == 0


def test_when_the_nsqd_in_use_goes_away_the_next_publish_fails_over(
    nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=2)
    first, second = topology.nsqds
    proxy = TCPProxy(first.host, first.tcp_port)
    with NSQProducer([proxy.address, second.tcp_address]) as producer:
        producer.publish(nsq_topic, b"via the first")
        proxy.cut()
        # nsqd's side is gone (EOF waiting): found before anything is written.
        first.wait_for(
            lambda: (
                producer._conn is not None
                and producer._conn._io is not None
                and producer._conn._io.readable()
            )
        )
        producer.publish(nsq_topic, b"via the second")
        assert producer.address == second.tcp_address
    first.wait_for(lambda: depth(first, nsq_topic) == 1 and depth(second, nsq_topic) == 1)


def test_a_failure_after_the_command_was_written_is_an_unknown_outcome_not_a_retry(
    nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=1)

    def swallow(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command()[0] == f"PUB {nsq_topic}"
        peer.reset()  # no OK: did it get the message? Nobody can tell.

    with ScriptedNSQD(swallow) as server:
        addresses = [f"127.0.0.1:{server.port}", *topology.nsqd_tcp_addresses]
        with NSQProducer(addresses) as producer, pytest.raises(NSQConnectionError) as info:
            producer.publish(nsq_topic, b"maybe")
    text = str(info.value)
    assert "outcome is unknown" in text and f"127.0.0.1:{server.port}" in text
    assert depth(topology.nsqds[0], nsq_topic) == 0  # not sent again elsewhere


def test_a_kept_connection_answers_the_heartbeat_waiting_then_publishes_once() -> None:
    """The producer asks its connection once per publish whether it is usable: the
    heartbeat that arrived meanwhile is answered before the PUB, and nothing is written
    twice."""

    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command() == ("PUB t", b"one")
        peer.send_response(b"OK")
        peer.send_response(b"_heartbeat_")
        assert peer.read_command() == ("NOP", b"")
        assert peer.read_command() == ("PUB t", b"two")
        peer.send_response(b"OK")
        peer.read_command()

    with ScriptedNSQD(script) as server:
        with NSQProducer([f"127.0.0.1:{server.port}"]) as producer:
            producer.publish("t", b"one")
            io = producer._conn._io  # type: ignore[union-attr]
            wait_for(io.readable)  # the heartbeat is waiting, not yet read
            producer.publish("t", b"two")
            assert producer.connects == 1
        assert [c[0] for c in server.peers[0].commands] == ["IDENTIFY", "PUB t", "NOP", "PUB t"]


def test_nsqds_refusal_is_its_answer_not_a_reason_to_fail_over(nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=1)

    def refuse(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.send_error("E_PUB_FAILED", "PUB failed exiting")

    with ScriptedNSQD(refuse) as server:
        addresses = [f"127.0.0.1:{server.port}", *topology.nsqd_tcp_addresses]
        with NSQProducer(addresses) as producer, pytest.raises(NSQServerError) as info:
            producer.publish(nsq_topic, b"x")
    assert info.value.code == "E_PUB_FAILED"
    assert depth(topology.nsqds[0], nsq_topic) == 0


def test_no_nsqd_reachable_names_each() -> None:
    dead = [f"127.0.0.1:{closed_port()}", f"127.0.0.1:{closed_port()}"]
    with pytest.raises(NSQConnectionError) as info:
        NSQProducer(dead).publish("t", b"x")
    assert all(a in str(info.value) for a in dead)
    single = f"127.0.0.1:{closed_port()}"
    with pytest.raises(NSQConnectionError, match=f"nsqd at {single}"):
        NSQProducer([single]).publish("t", b"x")


def test_a_producers_nsqd_list_is_in_order_normalised_and_deduplicated() -> None:
    for given in ("b:1, a:4150, a, c, b:1", ["b:1", "a:4150", "a", "c", "b:1"]):
        for _ in range(2):  # parsed once, then remembered: the same answer
            producer = NSQProducer(given)
            assert producer.addresses == ["b:1", "a:4150", "c:4150"]
            producer.addresses.append("x:1")  # a producer's own list
    assert AsyncNSQProducer(("[::1]:5",)).addresses == ["[::1]:5"]
    with pytest.raises(NSQValueError, match="entries must be strings"):
        NSQProducer([["a:1"]])  # type: ignore[list-item]


# -- the asyncio sibling: the same policy on the event loop ------------------------------


def test_async_a_dead_first_nsqd_is_skipped_and_the_publish_lands_on_the_next(
    nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=2)
    dead = f"127.0.0.1:{closed_port()}"

    async def publish() -> str | None:
        async with AsyncNSQProducer([dead, *topology.nsqd_tcp_addresses]) as producer:
            await producer.publish(nsq_topic, b"one")
            await producer.defer_publish(nsq_topic, b"two", 0)
            assert await producer.multi_publish(nsq_topic, [b"three", b"four"]) == 1
            return producer.address

    assert asyncio.run(publish()) == topology.nsqd_tcp_addresses[0]
    first, second = topology.nsqds
    first.wait_for(lambda: depth(first, nsq_topic) == 4)
    assert depth(second, nsq_topic) == 0


def test_async_a_failure_after_the_command_was_written_is_an_unknown_outcome(
    nsq_topology, nsq_topic
) -> None:
    topology = nsq_topology(n=1)

    def swallow(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command()[0] == f"PUB {nsq_topic}"
        peer.reset()

    async def publish(addresses: list[str]) -> None:
        async with AsyncNSQProducer(addresses) as producer:
            await producer.publish(nsq_topic, b"maybe")

    with ScriptedNSQD(swallow) as server:
        addresses = [f"127.0.0.1:{server.port}", *topology.nsqd_tcp_addresses]
        with pytest.raises(NSQConnectionError) as info:
            asyncio.run(publish(addresses))
    text = str(info.value)
    assert "outcome is unknown" in text and f"127.0.0.1:{server.port}" in text
    assert depth(topology.nsqds[0], nsq_topic) == 0


def test_async_nsqds_refusal_is_its_answer(nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=1)

    def refuse(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.send_error("E_PUB_FAILED", "PUB failed exiting")

    async def publish(addresses: list[str]) -> None:
        async with AsyncNSQProducer(addresses) as producer:
            await producer.publish(nsq_topic, b"x")

    with ScriptedNSQD(refuse) as server, pytest.raises(NSQServerError) as info:
        asyncio.run(publish([f"127.0.0.1:{server.port}", *topology.nsqd_tcp_addresses]))
    assert info.value.code == "E_PUB_FAILED"
    assert depth(topology.nsqds[0], nsq_topic) == 0


def test_async_no_nsqd_reachable_names_each() -> None:
    dead = [f"127.0.0.1:{closed_port()}", f"127.0.0.1:{closed_port()}"]

    async def publish() -> None:
        async with AsyncNSQProducer(dead) as producer:
            await producer.publish("t", b"x")

    with pytest.raises(NSQConnectionError) as info:
        asyncio.run(publish())
    assert all(a in str(info.value) for a in dead)
