"""The triggers fail over in seconds and say they are alive.

- They ask nsqd for a short msg_timeout of their own (``HELD_MSG_TIMEOUT_MS``) unless
  the connection sets one, and TOUCH what they hold within it: what a dead triggerer
  held is back on the channel that soon, not after nsqd's 60 s;
- they report their health (reports, connections up, messages held, seconds since they
  last heard from nsqd) through the triggerer's metrics.

The producer is driven the way Airflow drives it (``open_stream``), on every Airflow
version; a "dead triggerer" is its connection dropped without a word (``abort()``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any
from unittest.mock import Mock

import pytest

from airflow_provider_nsq import metrics
from airflow_provider_nsq.hooks import base as hook_base
from airflow_provider_nsq.hooks.base import HELD_MSG_TIMEOUT_MS
from airflow_provider_nsq.testing.polling import async_wait_for
from airflow_provider_nsq.triggers import health
from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger
from airflow_provider_nsq.triggers.nsq_event import NSQEventStreamProducer
from tests.support.marks import unraisable_is_an_error
from tests.support.nsqd_contents import read

pytestmark = unraisable_is_an_error

CHANNEL = "airflow"


def _producer(topic: str, **kwargs: Any) -> NSQEventStreamProducer:
    options = {"batch_size": 10, "batch_timeout": 0.3, "min_event_interval": 0, **kwargs}
    return NSQEventStreamProducer(topic=topic, channel=CHANNEL, **options)


async def _first_batch(stream: AsyncGenerator[Any, None], timeout: float = 15.0) -> Any:
    batch, _ = await asyncio.wait_for(stream.__anext__(), timeout)
    return batch


def _gauges(stats: Mock, name: str) -> list[tuple[float, dict[str, str]]]:
    return [(c.args[1], c.kwargs["tags"]) for c in stats.gauge.call_args_list if c.args[0] == name]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [("", HELD_MSG_TIMEOUT_MS), ("?msg_timeout_ms=30000", 30_000)],
    ids=["trigger-default", "the-connection's"],
)
def test_the_event_trigger_asks_nsqd_for_a_short_msg_timeout(
    nsqd, monkeypatch, nsq_topic, extra, expected
):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{nsqd.tcp_address}{extra}")
    nsqd.http_publish(nsq_topic, b"one")

    async def scenario() -> int:
        producer = _producer(nsq_topic)
        stream = producer.open_stream()
        try:
            await _first_batch(stream)
            assert producer.consumer is not None
            # What nsqd answered to IDENTIFY: the msg_timeout of this connection.
            return producer.consumer.msg_timeout_ms
        finally:
            await stream.aclose()
            await producer.aclose()

    assert asyncio.run(scenario()) == expected


@pytest.mark.slow
def test_what_a_dead_event_trigger_held_is_back_within_its_msg_timeout(
    nsqd, nsq_default, nsq_topic
):
    """Held past a TOUCH, then the connection drops without a word (a SIGKILLed
    triggerer): another consumer gets the batch within the trigger's msg_timeout of the
    last TOUCH, not nsqd's 60 s."""
    for n in range(3):
        nsqd.http_publish(nsq_topic, f"m{n}".encode())
    timeout_s = HELD_MSG_TIMEOUT_MS / 1000

    async def scenario() -> float:
        producer = _producer(nsq_topic)
        stream = producer.open_stream()
        try:
            batch = await _first_batch(stream)
            assert len(batch) == 3
            # Held past the first TOUCH (a third of msg_timeout): nothing comes back yet.
            await asyncio.sleep(timeout_s / 3 + 1)
            stats = await asyncio.to_thread(nsqd.channel_stats, nsq_topic, CHANNEL)
            assert (stats["in_flight_count"], stats["timeout_count"]) == (3, 0)
            assert producer.consumer is not None
            for conn in producer.consumer.connections.values():
                conn.abort()  # dies holding the batch: no REQ, no CLS
            return time.monotonic()
        finally:
            await stream.aclose()
            await producer.aclose()

    died = asyncio.run(scenario())
    again = read(nsqd, nsq_topic, CHANNEL, 3, timeout=timeout_s + 10)
    back_after = time.monotonic() - died
    assert sorted(m.body for m in again) == [b"m0", b"m1", b"m2"]
    assert {m.attempts for m in again} == {2}
    # Within msg_timeout of the last TOUCH (at most a third of it before the drop).
    assert back_after < timeout_s + 2, back_after
    print(f"\nthe dead trigger's batch was back {back_after:.1f}s after its connection dropped")


def test_the_event_trigger_reports_its_health(nsqd_factory, monkeypatch, mocker, nsq_topic):
    server = nsqd_factory()
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{server.tcp_address}")
    stats = mocker.Mock()
    mocker.patch.object(metrics, "_triggerer_stats", return_value=stats)
    for n in range(4):
        server.http_publish(nsq_topic, f"m{n}".encode())
    tags = {"topic": nsq_topic, "channel": CHANNEL}

    async def scenario() -> None:
        producer = _producer(nsq_topic)
        stream = producer.open_stream()
        try:
            await _first_batch(stream)
            assert producer.health is not None and producer.consumer is not None
            stats.reset_mock()
            producer.health.report(producer.consumer)  # holding the batch, connected
            assert _gauges(stats, "nsq.event.health.connections") == [(1, tags)]
            assert _gauges(stats, "nsq.event.health.held") == [(4, tags)]
            ((contact, contact_tags),) = _gauges(stats, "nsq.event.health.last_contact")
            nsqd_tag = metrics.tag_value(server.tcp_address)  # "127.0.0.1_4150"
            assert contact < 1 and contact_tags == {**tags, "nsqd": nsqd_tag}
            stats.incr.assert_called_once_with("nsq.event.health.reports", 1, tags=tags)

            # Connected but silent, heartbeats included (an nsqd that froze without
            # closing): the consumer's own contact time says so while the link is up.
            conn = next(iter(producer.consumer.connections.values()))
            conn.last_received -= 45.0
            stats.reset_mock()
            producer.health.report(producer.consumer)
            assert _gauges(stats, "nsq.event.health.connections") == [(1, tags)]
            ((contact, _),) = _gauges(stats, "nsq.event.health.last_contact")
            assert contact >= 45.0

            await asyncio.to_thread(server.broker.stop)  # nsqd goes away
            consumer = producer.consumer
            await async_wait_for(
                lambda: not consumer.connections, 10, 0.05, message="the connection dropped"
            )
            await asyncio.sleep(1.0)
            stats.reset_mock()
            producer.health.report(producer.consumer)
            assert _gauges(stats, "nsq.event.health.connections") == [(0, tags)]
            ((contact, _),) = _gauges(stats, "nsq.event.health.last_contact")
            # Last heard no later than when the connection was seen gone, 1 s ago.
            assert contact >= 1.0
        finally:
            await stream.aclose()
            await producer.aclose()

    asyncio.run(scenario())


def test_the_event_trigger_reports_as_it_runs(nsqd, nsq_default, mocker, monkeypatch, nsq_topic):
    """Without being asked: every HEALTH_INTERVAL_S while the stream is open."""
    monkeypatch.setattr(health, "HEALTH_INTERVAL_S", 0.2)
    stats = mocker.Mock()
    mocker.patch.object(metrics, "_triggerer_stats", return_value=stats)
    nsqd.http_publish(nsq_topic, b"x")

    def reports() -> int:
        return sum(1 for c in stats.incr.call_args_list if c.args[0] == "nsq.event.health.reports")

    async def scenario() -> None:
        producer = _producer(nsq_topic)
        stream = producer.open_stream()
        try:
            await _first_batch(stream)
            await async_wait_for(
                lambda: reports() >= 3, 10, 0.05, message=lambda: f"{reports()} report(s) of 3"
            )
        finally:
            await stream.aclose()
            await producer.aclose()

    asyncio.run(scenario())
    held = [value for value, _ in _gauges(stats, "nsq.event.health.held")]
    assert 1 in held  # the batch, held while it waits to be settled


def test_a_deferred_sensor_peeking_reports_its_health(
    nsqd, nsq_default_tcp_only, mocker, monkeypatch, nsq_topic
):
    """A TCP peek holds what it sees (TOUCHed: the trigger's msg_timeout is short) and
    reports it; after the peek, nothing held, nsqd heard from moments ago."""
    monkeypatch.setattr(health, "HEALTH_INTERVAL_S", 0.2)
    stats = mocker.Mock()
    mocker.patch.object(metrics, "_triggerer_stats", return_value=stats)
    nsqd.http_publish(nsq_topic, b"only one")
    tags = {"topic": nsq_topic, "channel": "etl"}

    async def scenario() -> dict[str, Any]:
        trigger = NSQMessageTrigger(
            topic=nsq_topic, channel="etl", min_messages=2, deadline=time.time() + 2.5
        )
        return (await asyncio.wait_for(trigger.run().__anext__(), 15)).payload

    payload = asyncio.run(scenario())
    assert (payload["status"], payload["ready"]) == ("timeout", 1)
    assert (1, tags) in _gauges(stats, "nsq.sensor.health.held")
    assert (1, tags) in _gauges(stats, "nsq.sensor.health.connections")
    contacts = [value for value, t in _gauges(stats, "nsq.sensor.health.last_contact")]
    assert contacts and all(t == tags for _, t in _gauges(stats, "nsq.sensor.health.last_contact"))
    assert min(contacts) < 1
    channel = nsqd.channel_stats(nsq_topic, "etl")
    assert channel["timeout_count"] == 0  # held, then handed back: never timed out


@pytest.mark.slow
def test_a_peek_longer_than_the_triggers_msg_timeout_is_touched(
    nsqd, nsq_default_tcp_only, monkeypatch, nsq_topic
):
    """The connection sets no msg_timeout: the peek holds as long as nsqd's default
    allows (48 s here, the deadline first), over several of the trigger's own short
    msg_timeouts (2 s here), TOUCHing: nsqd times nothing out, and the message comes back
    once, REQ'd by the peek."""
    monkeypatch.setattr(hook_base, "HELD_MSG_TIMEOUT_MS", 2000)
    nsqd.http_publish(nsq_topic, b"held")

    async def scenario() -> dict[str, Any]:
        trigger = NSQMessageTrigger(
            topic=nsq_topic, channel="etl", min_messages=2, deadline=time.time() + 5
        )
        return (await asyncio.wait_for(trigger.run().__anext__(), 20)).payload

    payload = asyncio.run(scenario())
    assert (payload["status"], payload["ready"]) == ("timeout", 1)
    channel = nsqd.channel_stats(nsq_topic, "etl")
    assert (channel["timeout_count"], channel["requeue_count"]) == (0, 1)
    (message,) = read(nsqd, nsq_topic, "etl", 1, timeout=5)
    assert (message.body, message.attempts) == (b"held", 2)
