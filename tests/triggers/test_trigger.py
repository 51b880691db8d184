"""NSQMessageTrigger: serialisable; fires once min_messages are ready, without consuming
(HTTP check) or handing back what it held (TCP peek); bounded by its deadline; closes on
cancel."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger
from tests.support.marks import unraisable_is_an_error
from tests.support.nsqd_contents import read

pytestmark = unraisable_is_an_error


def _trigger(topic: str = "events", **kwargs) -> NSQMessageTrigger:
    return NSQMessageTrigger(topic=topic, channel="etl", **kwargs)


def test_serialize_round_trips():
    trigger = _trigger(
        nsq_conn_id="nsq_other",
        read_timeout=12.5,
        min_messages=3,
        deadline=1_800_000_000.5,
        poll_interval=2.0,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_nsq.triggers.nsq.NSQMessageTrigger"
    json.dumps(kwargs)  # the triggerer stores it as JSON
    assert type(trigger)(**kwargs).serialize() == trigger.serialize()


async def _first_event(trigger: NSQMessageTrigger, timeout: float = 15.0):
    return await asyncio.wait_for(trigger.run().__anext__(), timeout)


def test_http_check_fires_once_enough_are_ready_and_takes_nothing(nsqd, nsq_default, nsq_topic):
    nsqd.create_channel(nsq_topic, "etl")
    for body in (b"a", b"b"):
        nsqd.http_publish(nsq_topic, body)

    event = asyncio.run(_first_event(_trigger(nsq_topic, min_messages=2)))

    assert event.payload == {
        "status": "ready",
        "topic": nsq_topic,
        "channel": "etl",
        "ready": 2,
        "checked_by": "http",
        "deadline": None,
    }
    stats = nsqd.channel_stats(nsq_topic, "etl")
    assert (stats["depth"], stats["message_count"], stats["requeue_count"]) == (2, 2, 0)


def test_tcp_peek_hands_back_what_it_held_once(nsqd, nsq_default_tcp_only, nsq_topic):
    nsqd.http_publish(nsq_topic, b"hello")

    event = asyncio.run(_first_event(_trigger(nsq_topic)))

    assert (event.payload["status"], event.payload["ready"]) == ("ready", 1)
    assert event.payload["checked_by"] == "tcp"
    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, "etl")["depth"] == 1)
    (message,) = read(nsqd, nsq_topic, "etl", count=1)
    assert (message.body, message.attempts) == (b"hello", 2)


@pytest.mark.parametrize("connection", ["nsq_default", "nsq_default_tcp_only"])
def test_the_deadline_ends_the_wait_with_a_timeout_event(nsqd, nsq_topic, request, connection):
    request.getfixturevalue(connection)
    nsqd.create_channel(nsq_topic, "etl")
    nsqd.http_publish(nsq_topic, b"only-one")
    deadline = time.time() + 2

    started = time.monotonic()
    event = asyncio.run(
        _first_event(_trigger(nsq_topic, min_messages=3, deadline=deadline, poll_interval=0.2))
    )

    assert event.payload["status"] == "timeout"
    assert event.payload["ready"] == 1
    assert 1.5 < time.monotonic() - started < 8
    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, "etl")["depth"] == 1)


def test_cancelling_closes_the_connection(nsqd, nsq_default_tcp_only, nsq_topic):
    trigger = _trigger(nsq_topic)

    def subscribers() -> int:
        stats = nsqd.channel_stats(nsq_topic, "etl") or {}
        return len(stats.get("clients", []))

    async def scenario() -> None:
        task = asyncio.ensure_future(_first_event(trigger, timeout=60))
        await asyncio.to_thread(nsqd.wait_for, lambda: subscribers() == 1, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert trigger.consumer is None
    nsqd.wait_for(lambda: subscribers() == 0)


def test_bad_connection_settings_fire_an_error_event(monkeypatch, nsq_topic):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", "nsq://localhost:4150?compression=gzip")
    event = asyncio.run(_first_event(_trigger(nsq_topic)))
    assert event.payload["status"] == "error"
    assert "compression" in event.payload["message"]


def test_tls_that_cannot_be_set_up_is_an_error_not_a_retry(nsqd, monkeypatch, nsq_topic):
    # This nsqd has no certificate: retrying would never help, so the task fails at once.
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{nsqd.tcp_address}?tls=true")
    event = asyncio.run(_first_event(_trigger(nsq_topic), timeout=10))
    assert event.payload["status"] == "error"
    assert "TLS" in event.payload["message"]
