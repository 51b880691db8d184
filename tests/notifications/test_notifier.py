"""NSQNotifier: in a DAG run whose task fails, ``on_failure_callback=NSQNotifier(topic=
"alerts", message="{{ ti.task_id }} failed")`` puts one message on ``alerts`` naming the
task; a dict message goes as JSON; a publish that fails is logged with the reason and
raises nothing; ``async_notify`` (and ``await NSQNotifier(...)`` where Airflow has it)
publishes on the event loop."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import types

import pytest

from airflow_provider_nsq.client import NSQConnection, NSQConsumer
from airflow_provider_nsq.notifications.nsq import NSQNotifier, send_nsq_notification
from tests.support.airflow_runs import TEST_DAGS, load_dag, run_dag
from tests.support.marks import AIRFLOW_VERSION
from tests.support.net import closed_port
from tests.support.nsqd_contents import client_config

DAGS = TEST_DAGS / "nsq_notifier_dags.py"
# A callback's context has its DAG; Airflow 3.0's notifier reads it to pick the template
# environment (None: the default one).
CONTEXT = {
    "dag": None,
    "ti": types.SimpleNamespace(task_id="load", dag_id="orders"),
    "run_id": "manual__1",
}


def _channel(nsqd, topic: str) -> str:
    """A channel of its own on ``topic`` (which may be shared with other runs): only
    what is published from now on."""
    channel = f"check_{os.urandom(4).hex()}"
    nsqd.create_channel(topic, channel)
    return channel


def _bodies(nsqd, topic: str, channel: str, count: int, timeout: float = 5.0) -> list[bytes]:
    with NSQConsumer(topic, channel, config=client_config(nsqd)) as consumer:
        return [m.body for m in consumer.consume(max_messages=count, timeout=timeout)]


@pytest.mark.usefixtures("airflow_db")
def test_a_failing_task_puts_one_message_on_alerts_naming_it(nsqd, nsq_default, nsq_topic):
    alerts = _channel(nsqd, "alerts")
    reports = _channel(nsqd, nsq_topic)
    run = run_dag(load_dag(DAGS, "nsq_notifier_failure"), topic=nsq_topic)
    assert run.task_states == {"load_orders": "failed", "report": "success"}  # not hidden
    assert _bodies(nsqd, "alerts", alerts, 2, timeout=2) == [b"load_orders failed"]
    (report,) = _bodies(nsqd, nsq_topic, reports, 2, timeout=2)
    assert json.loads(report) == {"task": "report", "run_id": run.run_id, "state": "success"}
    nsqd.http("POST", "/channel/delete", {"topic": "alerts", "channel": alerts})


def test_called_as_airflow_calls_it_the_message_is_rendered_with_the_context(
    nsqd, nsq_default, nsq_topic
):
    channel = _channel(nsqd, nsq_topic)
    notifier = send_nsq_notification(
        topic=nsq_topic, message={"failed": "{{ ti.dag_id }}.{{ ti.task_id }}"}
    )
    notifier(dict(CONTEXT))  # BaseNotifier.__call__: render, then notify
    assert _bodies(nsqd, nsq_topic, channel, 1) == [b'{"failed":"orders.load"}']


def test_bytes_go_as_they_are(nsqd, nsq_default, nsq_topic):
    channel = _channel(nsqd, nsq_topic)
    NSQNotifier(topic=nsq_topic, message=b"\xff\x00raw")(dict(CONTEXT))
    assert _bodies(nsqd, nsq_topic, channel, 1) == [b"\xff\x00raw"]


def _logged(capfd, caplog) -> str:
    """What was logged: Airflow's own loggers write to the output, not to logging."""
    out, err = capfd.readouterr()
    return out + err + caplog.text


def test_a_failed_publish_is_logged_with_the_reason_and_raises_nothing(monkeypatch, capfd, caplog):
    port = closed_port()
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DOWN", f"nsq://127.0.0.1:{port}")
    notifier = NSQNotifier(
        topic="alerts", message="{{ ti.task_id }} failed", nsq_conn_id="nsq_down"
    )
    with caplog.at_level(logging.ERROR):
        notifier(dict(CONTEXT))  # no exception
    logged = _logged(capfd, caplog)
    assert "Could not publish the notification to NSQ topic alerts" in logged
    assert f"NSQConnectionError: could not connect to nsqd at 127.0.0.1:{port}" in logged


def test_a_missing_connection_is_logged_too(capfd, caplog):
    notifier = NSQNotifier(topic="alerts", message="x", nsq_conn_id="no_such_connection")
    with caplog.at_level(logging.ERROR):
        notifier(dict(CONTEXT))
    assert "no_such_connection` isn't defined" in _logged(capfd, caplog)


def test_async_notify_publishes_with_the_asyncio_client(nsqd, nsq_default, nsq_topic, mocker):
    channel = _channel(nsqd, nsq_topic)
    notifier = NSQNotifier(topic=nsq_topic, message="late: {{ ti.task_id }}")
    notifier.render_template_fields(dict(CONTEXT))
    # Not the blocking client (in a thread or not): the event loop's own.
    blocking = mocker.patch.object(NSQConnection, "connect", side_effect=AssertionError)
    asyncio.run(notifier.async_notify(dict(CONTEXT)))
    blocking.assert_not_called()
    assert _bodies(nsqd, nsq_topic, channel, 1) == [b"late: load"]


@pytest.mark.skipif(
    AIRFLOW_VERSION.release < (3, 1),
    reason=f"an awaitable notifier (deadline alerts) needs Airflow >= 3.1; this is {AIRFLOW_VERSION}",
)
def test_awaited_as_a_deadline_alert_awaits_it(nsqd, nsq_default, nsq_topic):
    from airflow.sdk.definitions.callback import AsyncCallback

    AsyncCallback(NSQNotifier, kwargs={"topic": nsq_topic, "message": "x"})  # accepted
    channel = _channel(nsqd, nsq_topic)

    async def main() -> None:
        await NSQNotifier(topic=nsq_topic, message="deadline {{ ti.task_id }}", context=CONTEXT)

    asyncio.run(main())
    assert _bodies(nsqd, nsq_topic, channel, 1) == [b"deadline load"]


def test_an_unreachable_nsqd_fails_over_along_the_connection(nsqd, monkeypatch, nsq_topic):
    dead = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{dead}?nsqd_tcp_addresses={nsqd.tcp_address}"
    )
    channel = _channel(nsqd, nsq_topic)
    NSQNotifier(topic=nsq_topic, message="via the second")(dict(CONTEXT))
    asyncio.run(NSQNotifier(topic=nsq_topic, message="async too").async_notify(dict(CONTEXT)))
    assert _bodies(nsqd, nsq_topic, channel, 2) == [b"via the second", b"async too"]
