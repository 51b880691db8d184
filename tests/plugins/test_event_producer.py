"""The event producer's listener against a real nsqd: one JSON message per state change,
in order; the filters; off by default; and an nsqd that is down, slow or missing never
blocks a hook, the drops counted in ``nsq.event_producer.dropped``. Then Airflow itself:
the plugin is registered, ``[nsq_event_producer]`` is a config section, and a
``dag.test()`` run with nsqd stopped takes as long as one without the plugin.

The whole of a real Airflow run (scheduler, task processes) is
test_event_producer_e2e.py.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
import types

import pytest

from airflow_provider_nsq import metrics
from airflow_provider_nsq.client import NSQConsumer
from airflow_provider_nsq.event_producer_config import EventProducerSettings
from airflow_provider_nsq.plugins import nsq_event_producer
from airflow_provider_nsq.plugins.nsq_event_producer import NSQEventProducerPlugin, listener
from airflow_provider_nsq.protocol.errors import NSQValueError
from tests.support.airflow_runs import TEST_DAGS, load_dag, run_dag
from tests.support.net import closed_port
from tests.support.nsqd_contents import client_config

UTC = datetime.UTC
WHEN = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def dag_run(dag_id: str = "orders", run_id: str = "manual__1"):
    return types.SimpleNamespace(
        dag_id=dag_id, run_id=run_id, logical_date=WHEN, start_date=WHEN, end_date=None
    )


def task_instance(task_id: str = "load", dag_id: str = "orders", try_number: int = 1):
    return types.SimpleNamespace(
        dag_id=dag_id,
        run_id="manual__1",
        task_id=task_id,
        map_index=-1,
        try_number=try_number,
        logical_date=WHEN,
        start_date=WHEN,
        end_date=None,
    )


@pytest.fixture
def configure(monkeypatch):
    """``configure(topic, **options)``: ``[nsq_event_producer]`` through the environment,
    for a listener that reads it afresh (each process reads it once)."""

    def apply(topic: str, **options) -> None:
        for name, value in {"topic": topic, **options}.items():
            monkeypatch.setenv(f"AIRFLOW__NSQ_EVENT_PRODUCER__{name.upper()}", str(value))
        listener._reset()

    yield apply
    listener.flush()
    listener._reset()


@pytest.fixture
def counted(mocker):
    """The metrics the producer sends, as ``{(name, kind, reason): total}``."""
    totals: dict[tuple[str, str, str | None], int] = {}

    def incr(self, name, count=1, **tags):
        key = (name, tags.get("kind"), tags.get("reason"))
        totals[key] = totals.get(key, 0) + count

    mocker.patch.object(metrics.Emitter, "incr", incr)
    return totals


def _channel(nsqd, topic: str) -> str:
    channel = f"read_{os.urandom(3).hex()}"
    nsqd.create_channel(topic, channel)
    return channel


def _events(nsqd, topic: str, channel: str, count: int, timeout: float = 5.0) -> list[dict]:
    with NSQConsumer(topic, channel, config=client_config(nsqd)) as consumer:
        messages = consumer.consume(max_messages=count, timeout=timeout)
    return [json.loads(m.body) for m in messages]


def test_each_state_change_is_one_message_in_order(nsqd, nsq_default, nsq_topic, configure):
    configure(nsq_topic, dag_run_events=True, task_instance_events=True, source="eu-1")
    channel = _channel(nsqd, nsq_topic)
    listener.on_dag_run_running(dag_run=dag_run(), msg="started")
    listener.on_task_instance_running(previous_state=None, task_instance=task_instance())
    listener.on_task_instance_failed(
        previous_state="running", task_instance=task_instance(), error=RuntimeError("x")
    )
    listener.on_task_instance_running(
        previous_state=None, task_instance=task_instance(try_number=2)
    )
    listener.on_task_instance_success(
        previous_state="running", task_instance=task_instance(try_number=2)
    )
    listener.on_task_instance_skipped(previous_state="running", task_instance=task_instance("b"))
    listener.on_dag_run_success(dag_run=dag_run(), msg="success")
    listener.flush()
    events = _events(nsqd, nsq_topic, channel, 10)
    assert [(e["kind"], e.get("task_id"), e["state"], e["try_number"]) for e in events] == [
        ("dag_run", None, "running", None),
        ("task_instance", "load", "running", 1),
        ("task_instance", "load", "failed", 1),
        ("task_instance", "load", "running", 2),
        ("task_instance", "load", "success", 2),
        ("task_instance", "b", "skipped", 1),
        ("dag_run", None, "success", None),
    ]
    assert events[1] == {
        "kind": "task_instance",
        "state": "running",
        "dag_id": "orders",
        "run_id": "manual__1",
        "task_id": "load",
        "map_index": -1,
        "try_number": 1,
        "logical_date": "2026-01-02T03:04:05+00:00",
        "start_date": "2026-01-02T03:04:05+00:00",
        "end_date": None,
        "source": "eu-1",
    }
    assert events[0]["map_index"] is None and events[0]["source"] == "eu-1"


def test_the_filters_choose_dags_and_tasks(nsqd, nsq_default, nsq_topic, configure):
    configure(
        nsq_topic,
        dag_run_events=True,
        task_instance_events=True,
        dag_ids="orders, billing",
        task_ids="load",
    )
    channel = _channel(nsqd, nsq_topic)
    listener.on_dag_run_running(dag_run=dag_run("other"), msg="")
    listener.on_task_instance_running(previous_state=None, task_instance=task_instance("report"))
    listener.on_task_instance_running(
        previous_state=None, task_instance=task_instance("load", dag_id="other")
    )
    listener.on_task_instance_running(previous_state=None, task_instance=task_instance("load"))
    listener.on_dag_run_success(dag_run=dag_run("billing"), msg="")
    listener.flush()
    events = _events(nsqd, nsq_topic, channel, 5, timeout=2)
    assert [(e["dag_id"], e["task_id"]) for e in events] == [("orders", "load"), ("billing", None)]


def test_each_kind_is_off_by_default(nsqd, nsq_default, nsq_topic, configure):
    configure(nsq_topic)
    listener.on_dag_run_running(dag_run=dag_run(), msg="")
    listener.on_task_instance_running(previous_state=None, task_instance=task_instance())
    assert listener._publisher is None  # not even the connection was read
    configure(nsq_topic, task_instance_events=True)
    channel = _channel(nsqd, nsq_topic)
    listener.on_dag_run_running(dag_run=dag_run(), msg="")
    listener.on_task_instance_running(previous_state=None, task_instance=task_instance())
    listener.flush()
    assert [e["kind"] for e in _events(nsqd, nsq_topic, channel, 2, 2)] == ["task_instance"]


def test_an_unreachable_nsqd_never_blocks_and_the_drops_are_counted(
    monkeypatch, nsq_topic, configure, counted
):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://127.0.0.1:{closed_port()}")
    configure(nsq_topic, dag_run_events=True, task_instance_events=True, publish_timeout=1)
    started = time.monotonic()
    for _ in range(20):
        listener.on_task_instance_running(previous_state=None, task_instance=task_instance())
    listener.on_dag_run_failed(dag_run=dag_run(), msg="")
    hooks = time.monotonic() - started
    listener.flush()  # nsqd was found down: no waiting
    flushed = time.monotonic() - started
    assert hooks < 0.5 and flushed < 1.0, (hooks, flushed)
    dropped = {k: v for k, v in counted.items() if k[0] == "nsq.event_producer.dropped"}
    assert sum(v for (_, kind, _), v in dropped.items() if kind == "task_instance") == 20
    assert sum(v for (_, kind, _), v in dropped.items() if kind == "dag_run") == 1
    assert {reason for (_, _, reason) in dropped} <= {"unreachable", "not_sent"}


def test_a_silent_nsqd_fills_the_queue_and_what_does_not_fit_is_dropped(
    monkeypatch, nsq_topic, configure, counted
):
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://127.0.0.1:{silent.getsockname()[1]}")
        configure(nsq_topic, task_instance_events=True, publish_timeout=1, max_queued_events=3)
        started = time.monotonic()
        for _ in range(10):
            listener.on_task_instance_running(previous_state=None, task_instance=task_instance())
        assert time.monotonic() - started < 0.5
        listener.flush()  # at most publish_timeout
        assert time.monotonic() - started < 2.5
    dropped = {r: v for (n, _, r), v in counted.items() if n == "nsq.event_producer.dropped"}
    assert dropped["queue_full"] == 7
    assert sum(dropped.values()) == 10


def test_publishing_fails_over_along_the_connections_nsqds(
    nsqd, monkeypatch, nsq_topic, configure, counted
):
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT",
        f"nsq://127.0.0.1:{closed_port()}?nsqd_tcp_addresses={nsqd.tcp_address}",
    )
    configure(nsq_topic, dag_run_events=True)
    channel = _channel(nsqd, nsq_topic)
    listener.on_dag_run_success(dag_run=dag_run(), msg="")
    listener.flush()
    assert [e["state"] for e in _events(nsqd, nsq_topic, channel, 1)] == ["success"]
    assert counted == {("nsq.event_producer.published", "dag_run", None): 1}


def test_a_missing_connection_drops_and_counts_without_failing(
    monkeypatch, nsq_topic, configure, counted
):
    configure(nsq_topic, dag_run_events=True, nsq_conn_id="no_such_connection")
    listener.on_dag_run_success(dag_run=dag_run(), msg="")
    listener.on_dag_run_success(dag_run=dag_run(), msg="")  # not read again for 30 s
    assert counted == {("nsq.event_producer.dropped", "dag_run", "no_connection"): 2}


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("dag_run_events", "maybe", "dag_run_events must be True or False"),
        ("publish_timeout", "soon", "publish_timeout must be a number"),
        ("max_queued_events", "0", "max_queued_events must be > 0"),
        ("topic", "bad topic", "'bad topic'"),
    ],
)
def test_a_bad_option_is_named(option, value, named):
    with pytest.raises(NSQValueError, match=named):
        EventProducerSettings.read(lambda name: value if name == option else None)


def test_airflow_registers_the_plugin_and_the_config_section(airflow_home, monkeypatch):
    from airflow.providers.common.compat.sdk import conf

    from airflow_provider_nsq import get_provider_info

    info = get_provider_info()
    (plugin,) = info["plugins"]
    assert plugin["plugin-class"].endswith(".NSQEventProducerPlugin")
    assert NSQEventProducerPlugin.listeners == [listener]
    options = info["config"]["nsq_event_producer"]["options"]
    assert options["dag_run_events"]["default"] == "False"
    assert options["task_instance_events"]["default"] == "False"
    monkeypatch.setenv("AIRFLOW__NSQ_EVENT_PRODUCER__SOURCE", "eu-1")
    assert conf.get("nsq_event_producer", "source") == "eu-1"


DAGS = TEST_DAGS / "nsq_event_producer_dags.py"


@pytest.mark.usefixtures("airflow_db")
def test_a_dag_test_run_with_nsqd_stopped_takes_as_long_and_counts_the_drops(
    monkeypatch, nsq_topic, configure, counted
):
    """``dag.test()`` fires the task instance hooks and the DAG run's end; with the
    plugin on and nsqd down (a closed port), the run succeeds as fast as without it."""
    dag = load_dag(DAGS, "nsq_event_producer_small")
    run_dag(dag)  # warm up (imports, first parse)
    started = time.monotonic()
    assert run_dag(dag).state == "success"
    without = time.monotonic() - started

    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://127.0.0.1:{closed_port()}")
    configure(nsq_topic, dag_run_events=True, task_instance_events=True)
    monkeypatch.setattr(nsq_event_producer, "listener", listener)
    from airflow.listeners.listener import get_listener_manager as core_listeners
    from airflow.providers.common.compat.sdk import get_listener_manager as task_listeners

    for manager in {id(m): m for m in (core_listeners(), task_listeners())}.values():
        manager.add_listener(listener)
    started = time.monotonic()
    run = run_dag(dag)
    with_plugin = time.monotonic() - started
    assert run.state == "success"
    print(f"\ndag.test(): {without:.2f}s without the producer, {with_plugin:.2f}s with nsqd down")
    assert with_plugin < without + 3.0, (with_plugin, without)
    listener.flush()  # the run's own event waits in this process (no task ends after it)
    dropped = {kind: v for (n, kind, _), v in counted.items() if n == "nsq.event_producer.dropped"}
    # Two tasks, each running then success; the run's success (dag.test() fires no
    # "running" for the run: only the scheduler does).
    assert dropped == {"task_instance": 4, "dag_run": 1}
