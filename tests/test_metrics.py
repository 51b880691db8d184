"""The provider's metrics: every name under ``nsq.``, and sending one never fails the
caller. Their docs: tests/docs/test_metrics_doc.py; what reaches StatsD from a real
Airflow: test_production_e2e.py."""

from __future__ import annotations

import re
from unittest.mock import Mock, call

import pytest

from airflow_provider_nsq import metrics
from airflow_provider_nsq.metrics import METRICS, emitter


def test_every_metric_is_under_the_prefix_and_a_valid_stats_name():
    for name in METRICS:
        assert name.startswith("nsq."), name
        assert re.fullmatch(r"[a-z0-9_.]+", name), name
        assert len(f"airflow.{name}") <= 63, name  # OpenTelemetry's limit on names


def test_a_failing_stats_backend_never_fails_the_caller(mocker):
    stats = mocker.Mock()
    stats.incr.side_effect = OSError("statsd host unreachable")
    mocker.patch.object(metrics, "_task_stats", return_value=stats)
    emitter("task").incr("nsq.publish.pub.messages", 3, topic="t")
    stats.incr.assert_called_once_with("nsq.publish.pub.messages", 3, tags={"topic": "t"})


def test_an_unknown_name_is_a_programming_error():
    with pytest.raises(KeyError, match=r"not in metrics\.METRICS"):
        emitter("task").incr("nsq.typo")


def test_zero_counts_send_nothing_and_empty_tags_are_dropped(mocker):
    stats = mocker.Mock()
    mocker.patch.object(metrics, "_task_stats", return_value=stats)
    emitter("task").incr("nsq.sensor.window.requeued", 0)
    stats.incr.assert_not_called()
    emitter("task").gauge("nsq.sensor.depth", 7, topic="t", dag_id=None, task_id="")
    stats.gauge.assert_called_once_with("nsq.sensor.depth", 7, tags={"topic": "t"})


def test_tag_values_keep_only_what_every_backend_takes(mocker):
    stats = mocker.Mock()
    mocker.patch.object(metrics, "_triggerer_stats", return_value=stats)
    emitter("triggerer").gauge(
        "nsq.event.health.last_contact", 1.5, nsqd="[::1]:4150", channel="tail#ephemeral"
    )
    # Airflow's StatsD logger drops a metric whose InfluxDB-style tags hold ":" or "#".
    stats.gauge.assert_called_once_with(
        "nsq.event.health.last_contact",
        1.5,
        tags={"nsqd": "___1__4150", "channel": "tail_ephemeral"},
    )


def _without_health(sent: Mock) -> list:
    """The calls of a Stats method but the triggers' health reports (test_trigger_health.py)."""
    return [c for c in sent.call_args_list if ".health." not in c.args[0]]


def test_a_deferred_sensors_checks_count_as_the_sensors(mocker, nsqd, nsq_default, nsq_topic):
    import asyncio

    from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger

    stats = mocker.Mock()
    mocker.patch.object(metrics, "_triggerer_stats", return_value=stats)
    nsqd.create_channel(nsq_topic, "etl")
    nsqd.http_publish(nsq_topic, b"x")

    async def first_event():
        trigger = NSQMessageTrigger(topic=nsq_topic, channel="etl", min_messages=1)
        async for event in trigger.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), 10))
    assert event.payload["status"] == "ready"
    tags = {"topic": nsq_topic, "channel": "etl"}
    assert _without_health(stats.incr) == [call("nsq.sensor.checks.http", 1, tags=tags)]
    assert _without_health(stats.gauge) == [call("nsq.sensor.depth", 1, tags=tags)]


def test_the_event_trigger_counts_its_messages(mocker, nsqd, nsq_default, nsq_topic):
    import asyncio
    from collections import Counter

    from airflow_provider_nsq.triggers.nsq_event import NSQEventTrigger

    stats = mocker.Mock()
    mocker.patch.object(metrics, "_triggerer_stats", return_value=stats)
    nsqd.create_channel(nsq_topic, "airflow")
    for body in (b"x", b"spam y"):
        nsqd.http_publish(nsq_topic, body)
    trigger = NSQEventTrigger(
        topic=nsq_topic,
        channel="airflow",
        batch_size=2,
        batch_timeout=1.0,
        min_event_interval=0,
        message_filter="tests.support.event_filters.not_spam",
        dead_letter_topic=f"dead_{nsq_topic[-8:]}",
    )

    def drained() -> bool:
        channel = nsqd.channel_stats(nsq_topic, "airflow") or {}
        return channel.get("depth") == 0 and channel.get("in_flight_count") == 0

    async def scenario() -> None:
        events = trigger.run()
        event = await asyncio.wait_for(events.__anext__(), 15)
        assert [r["body"] for r in event.payload["messages"]] == ["x"]
        pending = asyncio.ensure_future(events.__anext__())  # resumes: settles the batch
        await asyncio.to_thread(nsqd.wait_for, drained, 20)
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await events.aclose()

    asyncio.run(scenario())
    counts: Counter[str] = Counter()
    for sent in _without_health(stats.incr):
        name, count = sent.args
        assert sent.kwargs["tags"] == {"topic": nsq_topic, "channel": "airflow"}
        counts[name] += count
    assert counts == {
        "nsq.event.received": 2,
        "nsq.event.finished": 2,
        "nsq.event.dead_lettered": 1,
    }
    ((name, delay), _) = stats.timing.call_args
    assert name == "nsq.event.delay" and delay.total_seconds() > 0
