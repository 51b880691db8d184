"""The NSQ event producer: Airflow's DAG run and task instance state changes, one JSON
message each, on an NSQ topic, as the Kafka provider's event producer puts them on Kafka.

An Airflow plugin (:class:`NSQEventProducerPlugin`, registered through the provider
info's ``plugins``) whose listener (:data:`listener`) Airflow calls:

- DAG runs, in the scheduler: ``on_dag_run_running``, ``on_dag_run_success``,
  ``on_dag_run_failed`` (``[nsq_event_producer] dag_run_events``);
- task instances, in the task's process: ``on_task_instance_running``,
  ``on_task_instance_success``, ``on_task_instance_failed`` and, on Airflow >= 3.1,
  ``on_task_instance_skipped`` (``task_instance_events``); a task that will be retried
  reports ``failed`` with the try that failed.

Each message is a JSON object: ``kind`` (``dag_run`` / ``task_instance``), ``state``,
``dag_id``, ``run_id``, ``task_id`` and ``map_index`` (null for a DAG run),
``try_number``, ``logical_date``, ``start_date``, ``end_date`` (ISO 8601, or null) and
``source``. Off unless configured (``[nsq_event_producer]``,
:mod:`~airflow_provider_nsq.event_producer_config`).

Nothing here slows Airflow down or fails it: a hook builds the message and queues it
(:class:`~.event_publisher.EventPublisher`: bounded, a background thread, a timeout,
failover along the connection's nsqds); every error is logged and counted in
``nsq.event_producer.dropped``. The first event of a process reads the configuration
and the connection (once; a connection that cannot be read is tried again after 30 s,
its events dropped meanwhile). A process that stops (a task's, the scheduler's) waits up
to ``publish_timeout`` for what it queued, and not at all once nsqd was found
unreachable.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowPlugin, conf, hookimpl

from ..event_producer_config import SECTION, EventProducerSettings
from ..metrics import emitter

if TYPE_CHECKING:
    from .event_publisher import EventPublisher

log = logging.getLogger(__name__)

#: Seconds before a connection (or configuration) that could not be read is read again.
RETRY_READ_S = 30.0
_TASK_METRICS = emitter("task")
_SCHEDULER_METRICS = emitter("scheduler")


def _iso(value: Any) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else None


def _state(value: Any) -> str:
    return str(getattr(value, "value", value))


def dag_run_event(dag_run: Any, state: str, source: str) -> dict[str, Any]:
    """The message of a DAG run's state change."""
    return {
        "kind": "dag_run",
        "state": state,
        "dag_id": dag_run.dag_id,
        "run_id": dag_run.run_id,
        "task_id": None,
        "map_index": None,
        "try_number": None,
        "logical_date": _iso(getattr(dag_run, "logical_date", None)),
        "start_date": _iso(getattr(dag_run, "start_date", None)),
        "end_date": _iso(getattr(dag_run, "end_date", None)),
        "source": source,
    }


def _logical_date(task_instance: Any) -> Any:
    value = getattr(task_instance, "logical_date", None)  # the API server's TaskInstance
    if value is None and hasattr(task_instance, "get_template_context"):
        try:  # the task's own (cached by then); a DAG run without one has None
            value = task_instance.get_template_context().get("logical_date")
        except Exception:
            value = None
    return value


def task_instance_event(task_instance: Any, state: str, source: str) -> dict[str, Any]:
    """The message of a task instance's state change."""
    map_index = getattr(task_instance, "map_index", -1)
    return {
        "kind": "task_instance",
        "state": state,
        "dag_id": task_instance.dag_id,
        "run_id": task_instance.run_id,
        "task_id": task_instance.task_id,
        "map_index": map_index if isinstance(map_index, int) else -1,
        "try_number": getattr(task_instance, "try_number", None),
        "logical_date": _iso(_logical_date(task_instance)),
        "start_date": _iso(getattr(task_instance, "start_date", None)),
        "end_date": _iso(getattr(task_instance, "end_date", None)),
        "source": source,
    }


def _count_published(kind: str, count: int) -> None:
    metrics = _TASK_METRICS if kind == "task_instance" else _SCHEDULER_METRICS
    metrics.incr("nsq.event_producer.published", count, kind=kind)


def _count_dropped(kind: str, reason: str, count: int) -> None:
    metrics = _TASK_METRICS if kind == "task_instance" else _SCHEDULER_METRICS
    metrics.incr("nsq.event_producer.dropped", count, kind=kind, reason=reason)


class NSQEventListener:
    """The listener: builds each message and queues it; one publisher per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # A forked child (a LocalExecutor worker, a task process) has none of the
        # parent's threads: it starts its own publisher.
        self._lock = threading.Lock()
        self._settings: EventProducerSettings | None = None
        self._publisher: EventPublisher | None = None
        self._read_at = 0.0  # when the configuration and connection were last read

    @property
    def settings(self) -> EventProducerSettings:
        """``[nsq_event_producer]``, read once per process (all off when it is bad)."""
        if self._settings is None:
            try:
                self._settings = EventProducerSettings.read(
                    lambda option: conf.get(SECTION, option, fallback=None)
                )
            except Exception as exc:
                log.error("[%s] is not usable, no event is published: %s", SECTION, exc)
                self._settings = EventProducerSettings()
        return self._settings

    def _publisher_for(self, settings: EventProducerSettings) -> EventPublisher | None:
        with self._lock:
            if self._publisher is not None:
                return self._publisher
            now = time.monotonic()
            if self._read_at and now - self._read_at < RETRY_READ_S:
                return None
            self._read_at = now
            # Imported on first use: Airflow loads the plugin in every process, and a
            # producer that is off must cost nothing there.
            from ..hooks.base import NSQBaseHook
            from .event_publisher import EventPublisher

            try:
                connection = NSQBaseHook(nsq_conn_id=settings.nsq_conn_id).get_settings()
            except Exception as exc:
                log.warning(
                    "NSQ event producer: connection %r cannot be read (%s); its events are "
                    "dropped for %gs, then it is read again",
                    settings.nsq_conn_id,
                    exc,
                    RETRY_READ_S,
                )
                return None
            self._publisher = EventPublisher(
                settings.topic,
                connection.nsqds,
                connection.client,
                max_queued=settings.max_queued_events,
                timeout=settings.publish_timeout,
                on_published=_count_published,
                on_dropped=_count_dropped,
            )
            return self._publisher

    def _submit(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        try:
            publisher = self._publisher_for(self.settings)
            if publisher is None:
                _count_dropped(kind, "no_connection", 1)
                return
            publisher.submit(kind, json.dumps(event, separators=(",", ":")).encode())
        except Exception:  # never fail the scheduler or a task
            log.exception("NSQ event producer: could not queue a %s event", kind)
            _count_dropped(kind, "error", 1)

    def _dag_run(self, dag_run: Any, state: str) -> None:
        settings = self.settings
        if settings.dag_run_events and settings.wants(dag_run.dag_id):
            self._submit(dag_run_event(dag_run, state, settings.source))

    def _task_instance(self, task_instance: Any, state: str) -> None:
        settings = self.settings
        if settings.task_instance_events and settings.wants(
            task_instance.dag_id, task_instance.task_id
        ):
            self._submit(task_instance_event(task_instance, state, settings.source))

    # -- Airflow's listener hooks (argument names as Airflow's hook specs have them) ----

    @hookimpl
    def on_dag_run_running(self, dag_run: Any, msg: str) -> None:
        self._dag_run(dag_run, "running")

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        self._dag_run(dag_run, "success")

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        self._dag_run(dag_run, "failed")

    @hookimpl
    def on_task_instance_running(self, previous_state: Any, task_instance: Any) -> None:
        self._task_instance(task_instance, "running")

    @hookimpl
    def on_task_instance_success(self, previous_state: Any, task_instance: Any) -> None:
        self._task_instance(task_instance, "success")

    @hookimpl
    def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any) -> None:
        self._task_instance(task_instance, "failed")

    @hookimpl
    def on_task_instance_skipped(self, previous_state: Any, task_instance: Any) -> None:
        # Airflow >= 3.1 calls it; before, the hook has no spec and is never called.
        self._task_instance(task_instance, "skipped")

    @hookimpl
    def before_stopping(self, component: Any) -> None:
        """The process stops: wait (bounded) for what it queued."""
        publisher = self._publisher
        if publisher is not None:
            try:
                publisher.flush()
            except Exception:
                log.exception("NSQ event producer: could not flush")

    def flush(self) -> None:
        """Wait (bounded) for what this process queued; drop and count the rest."""
        self.before_stopping(component=None)


#: The one listener of a process.
listener = NSQEventListener()


class NSQEventProducerPlugin(AirflowPlugin):
    """Registers :data:`listener` (the provider info lists this plugin)."""

    name = "nsq_event_producer"
    listeners = [listener]
