"""The provider's metrics, sent through Airflow's ``Stats``: StatsD, Datadog or
OpenTelemetry, whichever ``[metrics]`` turns on, with nothing to configure here.

Every name starts with :data:`PREFIX` (after Airflow's own ``[metrics] statsd_prefix`` /
``otel_prefix``, ``airflow`` by default) and is listed in :data:`METRICS`, which
docs/metrics.md documents one by one. What varies with the call (topic, channel, DAG,
task) goes in tags, as in Airflow's own metrics: StatsD shows tags only with
``statsd_influxdb_enabled`` or Datadog; OpenTelemetry keeps them as attributes. The
publish kind (PUB, DPUB, MPUB) and the way a sensor checked (HTTP or TCP) are part of
the name.

Which ``Stats`` a process configured differs (Airflow 3.2 and 3.3 keep two copies of
it): task processes configure the task SDK's (common-compat's ``Stats``), the triggerer
Airflow core's (``airflow.observability.stats``); Airflow 3.0 and 3.1 have one, built
from ``[metrics]`` on first use. :func:`emitter` picks the one for where the code runs.

Tag values keep letters, digits, ``_``, ``.`` and ``-``; any other character becomes
``_`` (:func:`tag_value`): Airflow's StatsD logger drops a metric whose tags hold
others, such as the ``:`` of an nsqd's ``host:port``.

Sending a metric never fails the caller: an error is logged at debug level and dropped.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: Internal to the provider: no public names (the API reference lists this module under
#: Internals; other modules of the provider import from it).
__all__: list[str] = []

log = logging.getLogger(__name__)

PREFIX = "nsq"

MetricType = Literal["counter", "gauge", "timer"]
PublishKind = Literal["pub", "dpub", "mpub"]
Where = Literal["task", "triggerer", "scheduler"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric: its full name (with :data:`PREFIX`), type and meaning."""

    name: str
    type: MetricType
    description: str
    tags: tuple[str, ...]


_TASK_TAGS = ("dag_id", "task_id", "topic")
_SENSOR_TAGS = (*_TASK_TAGS, "channel")
_EVENT_TAGS = ("topic", "channel")
_CONSUME_TAGS = _SENSOR_TAGS


def _publish_metrics(kind: PublishKind, command: str) -> list[Metric]:
    return [
        Metric(
            f"{PREFIX}.publish.{kind}.messages",
            "counter",
            f"Messages nsqd accepted ({command}), once nsqd answered OK.",
            _TASK_TAGS,
        ),
        Metric(
            f"{PREFIX}.publish.{kind}.bytes",
            "counter",
            f"Body bytes of those messages ({command}).",
            _TASK_TAGS,
        ),
        Metric(
            f"{PREFIX}.publish.{kind}.errors",
            "counter",
            f"{command} tasks whose publish failed (nsqd refused it, or could not be reached).",
            (*_TASK_TAGS, "error"),
        ),
    ]


def _health_metrics(kind: str, what: str, contact: str, tags: tuple[str, ...]) -> list[Metric]:
    """A trigger's health (triggers/health.py), reported every 10 s while it runs."""
    per_nsqd = (*tags, "nsqd") if kind == "event" else tags
    return [
        Metric(
            f"{PREFIX}.{kind}.health.reports",
            "counter",
            f"Health reports of {what}, one every 10 s while it runs: a rate of 0 means it "
            "runs nowhere (its triggerer died and no other took it over, or it ended).",
            tags,
        ),
        Metric(f"{PREFIX}.{kind}.health.last_contact", "gauge", contact, per_nsqd),
        Metric(
            f"{PREFIX}.{kind}.health.connections",
            "gauge",
            f"Connections to nsqd that {what} has up.",
            tags,
        ),
        Metric(
            f"{PREFIX}.{kind}.health.held",
            "gauge",
            f"Messages {what} holds: delivered, not yet FINished or REQ'd.",
            tags,
        ),
    ]


#: Every metric the provider sends, by name.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        *_publish_metrics("pub", "NSQPublishOperator, PUB"),
        *_publish_metrics("dpub", "NSQDeferredPublishOperator, DPUB"),
        *_publish_metrics("mpub", "NSQMultiPublishOperator, MPUB"),
        Metric(
            f"{PREFIX}.sensor.checks.http",
            "counter",
            "Sensor checks that read the channel's depth from nsqd's HTTP API (/stats): "
            "nothing is taken.",
            _SENSOR_TAGS,
        ),
        Metric(
            f"{PREFIX}.sensor.checks.tcp",
            "counter",
            "Sensor checks that were a window (no HTTP API): each short one redelivers "
            "what it saw.",
            _SENSOR_TAGS,
        ),
        Metric(
            f"{PREFIX}.sensor.depth",
            "gauge",
            "Messages ready on the channel at the last HTTP check (summed over nsqds).",
            _SENSOR_TAGS,
        ),
        Metric(
            f"{PREFIX}.sensor.window.taken",
            "counter",
            "Messages sensor windows took off the channel.",
            _SENSOR_TAGS,
        ),
        Metric(
            f"{PREFIX}.sensor.window.requeued",
            "counter",
            "Messages sensor windows handed back (REQ): a short window, over "
            "max_xcom_bytes, rejected with rejected='requeue', or a failed XCom push.",
            _SENSOR_TAGS,
        ),
        Metric(
            f"{PREFIX}.sensor.window.filtered",
            "counter",
            "Messages the message_filter rejected and the window FINished (rejected='finish').",
            _SENSOR_TAGS,
        ),
        Metric(
            f"{PREFIX}.sensor.window.delivered",
            "counter",
            "Messages pushed to XCom, then FINished.",
            _SENSOR_TAGS,
        ),
        Metric(
            f"{PREFIX}.sensor.window.xcom_bytes",
            "gauge",
            "Size of the last XCom value a window pushed (the JSON the database stores).",
            _SENSOR_TAGS,
        ),
        Metric(
            f"{PREFIX}.consume.applied",
            "counter",
            "NSQConsumeOperator: messages FINished after the apply function returned.",
            _CONSUME_TAGS,
        ),
        Metric(
            f"{PREFIX}.consume.requeued",
            "counter",
            "NSQConsumeOperator: messages REQ'd (with backoff) after the function raised.",
            _CONSUME_TAGS,
        ),
        Metric(
            f"{PREFIX}.consume.dead_lettered",
            "counter",
            "NSQConsumeOperator: messages that failed max_attempts deliveries, published to "
            "dead_letter_topic, then FINished.",
            _CONSUME_TAGS,
        ),
        Metric(
            f"{PREFIX}.consume.dead_letter_failed",
            "counter",
            "NSQConsumeOperator: dead-letter publishes that failed: the message was REQ'd "
            "and the task failed.",
            _CONSUME_TAGS,
        ),
        Metric(
            f"{PREFIX}.consume.exhausted",
            "counter",
            "NSQConsumeOperator: messages that failed max_attempts deliveries with no "
            "dead_letter_topic: REQ'd, and the task failed.",
            _CONSUME_TAGS,
        ),
        Metric(
            f"{PREFIX}.consume.apply_duration",
            "timer",
            "NSQConsumeOperator: milliseconds one call of the apply function took: the "
            "mean of the calls since the last report, sent at most once a second and when "
            "the task ends.",
            _CONSUME_TAGS,
        ),
        Metric(
            f"{PREFIX}.consume.delay",
            "timer",
            "NSQConsumeOperator: milliseconds from publish (nsqd's timestamp of the oldest "
            "message FINished since the last report, at most once a second) to its FIN.",
            _CONSUME_TAGS,
        ),
        Metric(
            f"{PREFIX}.event.received",
            "counter",
            "Messages the event trigger took off the channel (redeliveries included).",
            _EVENT_TAGS,
        ),
        Metric(
            f"{PREFIX}.event.finished",
            "counter",
            "Messages FINished: their asset event was stored (Airflow >= 3.3; before, "
            "handed to the triggerer), or every filter rejected them.",
            _EVENT_TAGS,
        ),
        Metric(
            f"{PREFIX}.event.requeued",
            "counter",
            "Messages REQ'd: their event could not be stored, or a dead-letter publish failed.",
            _EVENT_TAGS,
        ),
        Metric(
            f"{PREFIX}.event.dead_lettered",
            "counter",
            "Messages every filter rejected, published to dead_letter_topic.",
            _EVENT_TAGS,
        ),
        Metric(
            f"{PREFIX}.event.delay",
            "timer",
            "Milliseconds from publish (nsqd's timestamp of the batch's oldest message) "
            "to its asset event stored.",
            _EVENT_TAGS,
        ),
        *_health_metrics(
            "event",
            "an event trigger's subscription",
            "Seconds since the event trigger last heard from this nsqd (0 while its "
            "connection is up).",
            _EVENT_TAGS,
        ),
        Metric(
            f"{PREFIX}.event_producer.published",
            "counter",
            "Event producer: DAG run and task instance events nsqd accepted.",
            ("kind",),
        ),
        Metric(
            f"{PREFIX}.event_producer.dropped",
            "counter",
            "Event producer: events that were not published (no nsqd took them within "
            "publish_timeout, the queue was full, the connection could not be read ...).",
            ("kind", "reason"),
        ),
        *_health_metrics(
            "sensor",
            "a deferred sensor's trigger",
            "Seconds since nsqd last answered one of the deferred sensor's checks.",
            _EVENT_TAGS,
        ),
    ]
}


def _task_stats() -> Any:
    from airflow.providers.common.compat.sdk import Stats

    return Stats


def _triggerer_stats() -> Any:
    try:
        # Airflow >= 3.2: core's own Stats, the copy the triggerer configures.
        from airflow.observability import stats
    except ImportError:  # Airflow 3.0, 3.1: one Stats for every process
        return _task_stats()
    return stats.Stats


#: What Airflow's StatsD logger lets through in a tag value (it checks the name and the
#: InfluxDB-style tags as one stat name): anything else makes it drop the metric.
_UNSAFE_IN_TAGS = re.compile(r"[^A-Za-z0-9_.-]")


def tag_value(value: Any) -> str:
    """``value`` as a tag every metrics backend takes: characters other than letters,
    digits, ``_``, ``.`` and ``-`` become ``_`` (an nsqd ``127.0.0.1:4150`` is
    ``127.0.0.1_4150``, a channel ``tail#ephemeral`` is ``tail_ephemeral``)."""
    return _UNSAFE_IN_TAGS.sub("_", str(value))


def _clean_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    """The tags with a value, each as :func:`tag_value` writes it."""
    return {k: tag_value(v) for k, v in tags.items() if v is not None and v != ""}


class Emitter:
    """Sends the provider's metrics from one place (a task, or the triggerer), with the
    tags it was made with on each (:meth:`tagged`) besides those of the call.

    :param where: where the code runs: ``"task"`` or ``"triggerer"``.
    :param tags: tags every metric it sends carries.
    """

    def __init__(self, where: Where, **tags: Any) -> None:
        self.where = where
        self.tags = _clean_tags(tags)

    def tagged(self, **tags: Any) -> Emitter:
        """An emitter for the same place whose metrics all carry ``tags`` too (their
        values cleaned once, here)."""
        return Emitter(self.where, **self.tags, **tags)

    def _send(self, method: str, name: str, value: Any, tags: Mapping[str, Any]) -> None:
        if name not in METRICS:  # a programming error, not a runtime condition
            raise KeyError(f"{name} is not in metrics.METRICS (and docs/metrics.md)")
        try:
            # The scheduler configures the same Stats as the triggerer (Airflow core's).
            stats = _task_stats() if self.where == "task" else _triggerer_stats()
            clean = {**self.tags, **_clean_tags(tags)} if tags else self.tags
            getattr(stats, method)(name, value, tags=clean)
        except Exception as exc:  # metrics must never fail a task or a trigger
            log.debug("Could not send metric %s (%s)", name, exc)

    def incr(self, name: str, count: int = 1, **tags: Any) -> None:
        """Add ``count`` to counter ``name`` (nothing for 0)."""
        if count:
            self._send("incr", name, count, tags)

    def gauge(self, name: str, value: float, **tags: Any) -> None:
        """Set gauge ``name``."""
        self._send("gauge", name, value, tags)

    def timing(self, name: str, seconds: float, **tags: Any) -> None:
        """Record ``seconds`` in timer ``name`` (sent as a timedelta: milliseconds)."""
        self._send("timing", name, datetime.timedelta(seconds=max(seconds, 0.0)), tags)


def emitter(where: Where) -> Emitter:
    """The emitter for code running in a task process, the triggerer or the scheduler."""
    return Emitter(where)


def task_tags(context: Mapping[str, Any] | None, **tags: Any) -> dict[str, Any]:
    """``dag_id`` and ``task_id`` from a task's context, plus ``tags``."""
    ti = (context or {}).get("ti")
    return {
        "dag_id": getattr(ti, "dag_id", None),
        "task_id": getattr(ti, "task_id", None),
        **tags,
    }


def task_emitter(context: Mapping[str, Any] | None, **tags: Any) -> Emitter:
    """The emitter of a task: its metrics carry its ``dag_id`` and ``task_id`` (from
    ``context``) and ``tags``."""
    return Emitter("task", **task_tags(context, **tags))
