"""The ``[nsq_event_producer]`` configuration section: its options (declared in the
provider info, so ``airflow config list`` shows them with their defaults) and the
settings read from them.

No Airflow here: the provider info imports this module, and the plugin reads the values
through Airflow's ``conf`` (``AIRFLOW__NSQ_EVENT_PRODUCER__<OPTION>`` overrides).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .protocol.errors import NSQValueError
from .protocol.names import validate_topic_name

SECTION = "nsq_event_producer"
_ADDED = "0.1.0"


def _option(kind: str, default: str, example: str | None, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "version_added": _ADDED,
        "type": kind,
        "example": example,
        "default": default,
    }


#: The section's options, as provider info declares them (Airflow's option schema).
OPTIONS: dict[str, dict[str, Any]] = {
    "dag_run_events": _option(
        "boolean",
        "False",
        "True",
        "Publish one message each time a DAG run starts running, succeeds or fails (from "
        "the scheduler).",
    ),
    "task_instance_events": _option(
        "boolean",
        "False",
        "True",
        "Publish one message each time a task instance starts running, succeeds, fails or "
        "skips itself (from the task's process).",
    ),
    "topic": _option("string", "airflow.events", "airflow.events", "The NSQ topic."),
    "nsq_conn_id": _option(
        "string",
        "nsq_default",
        "nsq_events",
        "The nsq Connection: publishing fails over along its nsqds (host:port, then "
        "nsqd_tcp_addresses).",
    ),
    "source": _option(
        "string",
        "airflow",
        "airflow-prod-eu",
        "Put in every message as 'source', so that several Airflow installations can "
        "share one topic.",
    ),
    "dag_ids": _option(
        "string",
        "",
        "orders,billing",
        "Comma-separated DAG ids whose events are published; empty: every DAG.",
    ),
    "task_ids": _option(
        "string",
        "",
        "load,report",
        "Comma-separated task ids whose task instance events are published; empty: every task.",
    ),
    "publish_timeout": _option(
        "float",
        "5.0",
        "2.0",
        "Seconds an event may wait to be published (connecting to each nsqd included); "
        "past that it is dropped and counted in the nsq.event_producer.dropped metric. "
        "Nothing in Airflow ever waits for a publish, except a process that stops: it "
        "waits up to this long for what it queued, and not at all once nsqd was found "
        "unreachable.",
    ),
    "max_queued_events": _option(
        "integer",
        "1000",
        "10000",
        "Events a process keeps waiting to be published; more are dropped (and counted) "
        "while nsqd is slow or down.",
    ),
}

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def _names(text: str) -> frozenset[str]:
    return frozenset(name.strip() for name in text.split(",") if name.strip())


@dataclass(frozen=True)
class EventProducerSettings:
    """What ``[nsq_event_producer]`` says, checked."""

    dag_run_events: bool = False
    task_instance_events: bool = False
    topic: str = "airflow.events"
    nsq_conn_id: str = "nsq_default"
    source: str = "airflow"
    dag_ids: frozenset[str] = frozenset()
    task_ids: frozenset[str] = frozenset()
    publish_timeout: float = 5.0
    max_queued_events: int = 1000

    @classmethod
    def read(cls, get: Callable[[str], str | None]) -> EventProducerSettings:
        """The settings from ``get(option)`` (the raw text, None when not set: the
        default). :class:`NSQValueError` naming the option for a bad value."""

        def text(name: str) -> str:
            value = get(name)
            return (OPTIONS[name]["default"] if value is None else str(value)).strip()

        def flag(name: str) -> bool:
            value = text(name).lower()
            if value not in _TRUE | _FALSE:
                raise NSQValueError(f"[{SECTION}] {name} must be True or False, got {value!r}")
            return value in _TRUE

        def number(name: str, kind: type[float] | type[int]) -> Any:
            try:
                value = kind(text(name))
            except ValueError:
                raise NSQValueError(
                    f"[{SECTION}] {name} must be a number, got {text(name)!r}"
                ) from None
            if value <= 0:
                raise NSQValueError(f"[{SECTION}] {name} must be > 0, got {value}")
            return value

        topic = text("topic")
        validate_topic_name(topic)
        return cls(
            dag_run_events=flag("dag_run_events"),
            task_instance_events=flag("task_instance_events"),
            topic=topic,
            nsq_conn_id=text("nsq_conn_id") or "nsq_default",
            source=text("source"),
            dag_ids=_names(text("dag_ids")),
            task_ids=_names(text("task_ids")),
            publish_timeout=float(number("publish_timeout", float)),
            max_queued_events=int(number("max_queued_events", int)),
        )

    @property
    def enabled(self) -> bool:
        return self.dag_run_events or self.task_instance_events

    def wants(self, dag_id: str, task_id: str | None = None) -> bool:
        """Whether an event of ``dag_id`` (and ``task_id``) passes the filters."""
        if self.dag_ids and dag_id not in self.dag_ids:
            return False
        return not (task_id is not None and self.task_ids and task_id not in self.task_ids)


def provider_config() -> dict[str, Any]:
    """The provider info's ``config`` entry."""
    return {
        SECTION: {
            "description": "The NSQ event producer: Airflow's DAG run and task instance state "
            "changes published to an NSQ topic, one JSON message each (docs/event-producer.md).",
            "options": OPTIONS,
        }
    }
