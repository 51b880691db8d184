"""A deferrable NSQSensor whose nsqd cannot be reached: it defers instead of failing, its
trigger tries nsqd again with the reconnect backoff until the sensor's timeout (nsqd may
be restarting), every retry it announces comes, and the timeout says nsqd was
unreachable. nsqd is a closed port on 127.0.0.1 that starts listening later, or never."""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import threading
import time
from typing import Any

import pytest
import structlog
from airflow.providers.common.compat.sdk import AirflowSensorTimeout, TaskDeferred

from airflow_provider_nsq.client import NSQConsumer
from airflow_provider_nsq.client.message import decode_record_body
from airflow_provider_nsq.protocol.errors import NSQConnectionError
from airflow_provider_nsq.sensors.nsq import NSQSensor
from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger

from .conftest import TEST_DAGS, channel_is_empty, load_dag, run_dag, unraisable_is_an_error

pytestmark = unraisable_is_an_error


def _closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (yet): connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unreachable_nsqd(monkeypatch) -> int:
    """``nsq_default`` pointing at a closed port (no HTTP API: the trigger peeks over
    TCP); the port."""
    port = _closed_port()
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://127.0.0.1:{port}?connect_timeout=2")
    return port


def test_the_first_check_defers_instead_of_failing(unreachable_nsqd):
    sensor = NSQSensor(task_id="wait", topic="events", channel="etl", deferrable=True, timeout=90)

    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})

    trigger = deferred.value.trigger
    assert isinstance(trigger, NSQMessageTrigger)
    assert 80 < trigger.deadline - time.time() <= 90  # the sensor's timeout still bounds it


def test_a_resumed_task_whose_nsqd_went_away_defers_again_within_its_deadline(unreachable_nsqd):
    sensor = NSQSensor(task_id="wait", topic="events", channel="etl", deferrable=True)
    deadline = time.time() + 60
    ready = {"status": "ready", "ready": 1, "deadline": None}

    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute_complete(
            {}, ready, deadline=datetime.datetime.fromtimestamp(deadline, datetime.UTC).isoformat()
        )
    assert deferred.value.trigger.deadline == pytest.approx(deadline, abs=1e-3)

    past = datetime.datetime.fromtimestamp(time.time() - 1, datetime.UTC).isoformat()
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete({}, ready, deadline=past)


def test_the_trigger_retries_until_the_deadline_and_every_retry_it_logs_comes(
    unreachable_nsqd, caplog
):
    deadline = time.time() + 3
    trigger = NSQMessageTrigger(topic="events", channel="etl", deadline=deadline)

    # A trigger logs through structlog from Airflow 3.1, through logging before.
    caplog.set_level(logging.INFO)
    with structlog.testing.capture_logs() as captured:
        event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), 20))
    logs = [{"event": e["event"]} for e in captured]
    logs += [{"event": r.getMessage()} for r in caplog.records]

    assert event.payload["status"] == "timeout"
    assert "Connection refused" in event.payload["unreachable"]
    assert time.time() >= deadline
    failed = [e["event"] for e in logs if e["event"].startswith("nsqd cannot be reached")]
    # Tried more than once; each failure but the last announced the next check (which
    # came: it is the next failure), the last one that none would come before the deadline.
    assert len(failed) >= 2, logs
    assert all("; next check in " in line for line in failed[:-1]), failed
    assert "; no next check: the deadline is in " in failed[-1], failed


def test_a_timeout_after_unreachable_checks_says_so():
    event = {
        "status": "timeout",
        "ready": None,
        "unreachable": "could not connect to nsqd at 127.0.0.1:1: Connection refused",
        "deadline": "2020-01-01T00:00:00+00:00",
    }
    sensor = NSQSensor(task_id="wait", topic="events", channel="etl", deferrable=True)
    with pytest.raises(AirflowSensorTimeout, match="nsqd could not be reached at the last try: "):
        sensor.execute_complete({}, event)


@pytest.mark.slow
def test_a_deferrable_sensor_waits_for_nsqd_to_come_up(
    airflow_db, nsqd_factory, nsq_topic, unreachable_nsqd, monkeypatch
):
    """The issue-26 scenario: nsqd is down when the sensor first checks; it comes up (on
    the same port) after that check failed, and the run succeeds with its messages."""
    first_failure = threading.Event()
    started: list = []
    errors: list[BaseException] = []

    # The sensor's first check is a consume window at the worker: note when it fails
    # (the consumer raises the error naming each nsqd; it logs no retry of its own).
    real_consume = NSQConsumer.consume

    def consume_noting_failures(self: NSQConsumer, *args: Any, **kwargs: Any) -> Any:
        try:
            return real_consume(self, *args, **kwargs)
        except NSQConnectionError as exc:
            if "Connection refused" in str(exc):
                first_failure.set()
            raise

    monkeypatch.setattr(NSQConsumer, "consume", consume_noting_failures)

    def start_nsqd_once_a_check_failed() -> None:
        try:
            assert first_failure.wait(60), "the sensor never tried the closed port"
            server = nsqd_factory(tcp_port=unreachable_nsqd)
            started.append(server)
            server.create_channel(nsq_topic, "sensor")
            for body in (b"late-1", b"late-2"):
                server.http_publish(nsq_topic, body)
        except BaseException as exc:
            errors.append(exc)

    starter = threading.Thread(target=start_nsqd_once_a_check_failed, daemon=True)
    starter.start()
    try:
        result = run_dag(
            load_dag(TEST_DAGS / "nsq_sensor_dags.py", "nsq_sensor_deferrable"),
            topic=nsq_topic,
            channel="sensor",
        )
    finally:
        starter.join(timeout=60)

    assert not errors, errors
    assert result.state == "success", result
    assert sorted(decode_record_body(r) for r in result.xcom["received"]) == [b"late-1", b"late-2"]
    (server,) = started
    server.wait_for(lambda: channel_is_empty(server, nsq_topic, "sensor"))
