"""``HeldBatches`` (what the Spark stream reader holds its batches with), without
Spark: holding messages until FIN, over real sockets (the embedded broker, or a real
nsqd with NSQD_ADDRESS)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection
from airflow_provider_nsq.client.consumer import NSQConsumer
from airflow_provider_nsq.spark.held_batches import HeldBatches
from airflow_provider_nsq.testing.polling import wait_for

CHANNEL = "holder"


def publish(nsqd: Any, topic: str, bodies: list[bytes]) -> None:
    nsqd.create_channel(topic, CHANNEL)
    with NSQConnection(ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        conn.multi_publish(topic, bodies)


def drain(nsqd: Any, topic: str, expected: int) -> list[Any]:
    """Read what the channel holds now (FIN'd), up to ``expected`` and a bit more."""
    got: list[Any] = []
    config = ClientConfig(host=nsqd.host, port=nsqd.tcp_port)

    def enough() -> bool:
        if len(got) < expected:
            with NSQConsumer(topic, CHANNEL, config=config) as consumer:
                got.extend(consumer.consume(max_messages=expected - len(got), timeout=1.0))
        return len(got) >= expected

    wait_for(enough, 20, 0, message=lambda: f"{len(got)} of {expected} on {topic}")
    with NSQConsumer(topic, CHANNEL, config=config) as consumer:
        got += consumer.consume(max_messages=10, timeout=0.5)
    return got


@pytest.fixture
def holder_for(nsqd: Any) -> Iterator[Any]:
    made: list[HeldBatches] = []

    def make(
        topic: str, *, max_in_flight: int = 100, max_bytes_in_flight: int = 1 << 20, **config: Any
    ) -> HeldBatches:
        server = config.pop("server", nsqd)
        consumer = NSQConsumer(
            topic,
            CHANNEL,
            config=ClientConfig(host=server.host, port=server.tcp_port, **config),
            max_connections_per_nsqd=32,  # the reader's default
        )
        holder = HeldBatches(
            consumer, max_in_flight=max_in_flight, max_bytes_in_flight=max_bytes_in_flight
        )
        holder.start()
        made.append(holder)
        return holder

    yield make
    for holder in made:
        holder.close()


def soon(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


def test_batches_respect_the_count_and_byte_bounds(
    nsqd: Any, nsq_topic: str, holder_for: Any
) -> None:
    publish(nsqd, nsq_topic, [b"%03d" % i + b"x" * 97 for i in range(50)])  # 100 bytes each
    holder = holder_for(nsq_topic)

    by_bytes = holder.take(1000, 1000, until=soon())
    by_count = holder.take(7, 10**9, until=soon())
    rest = holder.take(1000, 10**9, idle=0.5)  # until the channel runs dry

    assert [len(by_bytes), len(by_count), len(rest)] == [10, 7, 33]
    assert {m.nsqd for m in by_bytes} == {nsqd.tcp_address}
    # Nothing is FIN'd until asked: all 50 are in flight.
    assert nsqd.channel_stats(nsq_topic, CHANNEL)["in_flight_count"] == 50
    holder.finish(by_bytes + by_count + rest)
    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, CHANNEL)["in_flight_count"] == 0)
    assert sorted(m.body for m in by_bytes + by_count + rest)[0].startswith(b"000")


def test_a_message_bigger_than_the_byte_bound_still_makes_a_batch(
    nsqd: Any, nsq_topic: str, holder_for: Any
) -> None:
    publish(nsqd, nsq_topic, [b"y" * 5000])
    holder = holder_for(nsq_topic)
    assert len(holder.take(100, 10, until=soon())) == 1


def test_close_requeues_what_was_not_finished(nsqd: Any, nsq_topic: str, holder_for: Any) -> None:
    bodies = [b"m%d" % i for i in range(40)]
    publish(nsqd, nsq_topic, bodies)
    holder = holder_for(nsq_topic)
    done = holder.take(15, 10**9, until=soon())
    holder.take(25, 10**9, until=soon())  # delivered, never FIN'd
    holder.finish(done)

    assert holder.close() == 25

    back = drain(nsqd, nsq_topic, 25)
    assert sorted(m.body for m in back) == sorted(set(bodies) - {m.body for m in done})
    assert {m.attempts for m in back} == {2}  # REQ'd once: redelivered with attempts + 1


def test_held_messages_outlive_msg_timeout_and_heartbeats(
    nsqd: Any, nsq_topic: str, holder_for: Any
) -> None:
    publish(nsqd, nsq_topic, [b"a", b"b", b"c"])
    # nsqd drops a client silent for 2 heartbeats (2 s) and redelivers a message not
    # TOUCHed within msg_timeout (1 s): hold 3 messages for 3.5 s without answering.
    holder = holder_for(nsq_topic, heartbeat_interval_ms=1000, msg_timeout_ms=1000)
    held = holder.take(3, 10**9, until=soon())
    assert len(held) == 3
    time.sleep(3.5)  # the time a long Spark batch takes; nothing is waited on here

    stats = nsqd.channel_stats(nsq_topic, CHANNEL)
    assert (stats["in_flight_count"], stats["timeout_count"], len(stats["clients"])) == (3, 0, 1)
    holder.finish(held)
    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, CHANNEL)["in_flight_count"] == 0)
    assert drain(nsqd, nsq_topic, 0) == []
    assert holder.touched >= 2


def test_in_flight_beyond_max_rdy_count_opens_more_connections(
    nsqd_factory: Any, nsq_topic: str, holder_for: Any
) -> None:
    server = nsqd_factory(max_rdy_count=10)
    publish(server, nsq_topic, [b"n%d" % i for i in range(25)])
    holder = holder_for(nsq_topic, server=server, max_in_flight=25)

    batch = holder.take(25, 10**9, until=soon())

    assert len(batch) == 25  # one connection could hold only 10 unanswered
    assert len(server.channel_stats(nsq_topic, CHANNEL)["clients"]) == 3
    holder.finish(batch)


def test_the_in_flight_budget_follows_the_byte_bound(
    nsqd: Any, nsq_topic: str, holder_for: Any
) -> None:
    publish(nsqd, nsq_topic, [b"z" * 1000 for _ in range(100)])
    # 100 may be in flight by count, but only about 5 KB by size: 5 messages.
    holder = holder_for(nsq_topic, max_in_flight=100, max_bytes_in_flight=5000)

    nsqd.wait_for(lambda: holder.pending >= 5)
    time.sleep(0.5)  # give a pump that ignored the bound time to take more

    assert holder.pending == 5
    stats = nsqd.channel_stats(nsq_topic, CHANNEL)
    assert (stats["in_flight_count"], stats["depth"]) == (5, 95)
    got = 0
    while got < 100:
        batch = holder.take(100, 3000, until=soon())
        assert 1 <= len(batch) <= 3
        holder.finish(batch)
        got += len(batch)


def test_nsqds_that_appear_later_are_read_too(nsq_topology: Any, nsq_topic: str) -> None:
    topology = nsq_topology(n=2)
    first, second = topology.nsqds
    publish(first, nsq_topic, [b"early"])
    topology.wait_for_producers(nsq_topic, 1)
    consumer = NSQConsumer(
        nsq_topic,
        CHANNEL,
        lookupd_http_addresses=topology.lookupd_http_addresses,
        lookupd_poll_interval=0.3,
    )
    holder = HeldBatches(consumer, max_in_flight=100, max_bytes_in_flight=1 << 20)
    holder.start()
    try:
        early = holder.take(1, 10**9, until=soon())
        assert [(m.body, m.nsqd) for m in early] == [(b"early", first.tcp_address)]
        publish(second, nsq_topic, [b"late"])  # a new producer: nsqlookupd lists it
        late = holder.take(1, 10**9, until=soon())
        assert [(m.body, m.nsqd) for m in late] == [(b"late", second.tcp_address)]
        holder.finish(early + late)
    finally:
        holder.close()
    for server in (first, second):
        server.wait_for(lambda s=server: s.channel_stats(nsq_topic, CHANNEL)["depth"] == 0)
        assert server.channel_stats(nsq_topic, CHANNEL)["in_flight_count"] == 0
