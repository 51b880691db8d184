"""An NSQSensor whose nsqd cannot be reached waits for it, in every mode, until its
timeout (nsqd may be restarting): the deferrable sensor defers instead of failing and its
trigger tries nsqd again with the reconnect backoff; poke and reschedule modes try at
their pokes. The wait is quiet: one warning when the trouble starts, a reminder at a
bounded rate with the tries so far and the next wait (never "0.0s"), one line when nsqd
answers again; the trigger's last line says what it saw, and the timeout says nsqd was
unreachable. nsqd is a closed port on 127.0.0.1 that starts listening later, or never."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from airflow.exceptions import AirflowRescheduleException
from airflow.providers.common.compat.sdk import AirflowSensorTimeout, TaskDeferred

from airflow_provider_nsq.client import NSQConsumer
from airflow_provider_nsq.client.message import decode_record_body
from airflow_provider_nsq.protocol.errors import NSQConnectionError
from airflow_provider_nsq.sensors.nsq import NSQSensor
from airflow_provider_nsq.triggers import nsq as triggers_nsq
from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger
from tests.support.airflow_runs import TEST_DAGS, load_dag, run_dag
from tests.support.marks import unraisable_is_an_error
from tests.support.nsqd_contents import channel_is_empty

pytestmark = unraisable_is_an_error


def _closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (yet): connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RescheduledTI:
    """The task instance of a rescheduled try: when its first poke started."""

    def __init__(self, first_poke: datetime.datetime | None) -> None:
        self.first_poke = first_poke

    def get_first_reschedule_date(self, context: Any) -> datetime.datetime | None:
        return self.first_poke


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


@contextlib.contextmanager
def log_lines(caplog) -> Iterator[list[tuple[str, str]]]:
    """``(level, message)`` of what the sensor and the trigger log meanwhile: through
    logging (caplog: Airflow before 3.1) and through structlog (Airflow 3.1 and later,
    for operators and triggers alike), each message with its arguments filled in."""
    lines: list[tuple[str, str]] = []
    caplog.set_level(logging.INFO)
    before = len(caplog.records)  # caplog keeps a test's records: only this block's
    with structlog.testing.capture_logs() as captured:
        yield lines
    for entry in captured:
        args = entry.get("positional_args") or ()
        lines.append((entry["log_level"], entry["event"] % args if args else entry["event"]))
    lines += [(r.levelname.lower(), r.getMessage()) for r in caplog.records[before:]]


def _about_nsqd(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(level, text) for level, text in lines if "nsqd" in text]


def _no_chatter(lines: list[tuple[str, str]]) -> None:
    """None of what made a wait noisy: a fallback announced before nsqd turned out to be
    down, "deferring" after it, a wait of 0.0s."""
    for _, text in lines:
        assert "instead" not in text and "deferring" not in text, text
        assert "0.0s" not in text, text


def test_poke_mode_warns_once_then_reminds_at_a_bounded_rate(unreachable_nsqd, caplog, monkeypatch):
    monkeypatch.setattr(triggers_nsq, "REMINDER_INTERVAL_S", 1.0)
    sensor = NSQSensor(
        task_id="wait", topic="events", channel="etl", poke_interval=0.2, timeout=3.5
    )

    with log_lines(caplog) as lines, pytest.raises(AirflowSensorTimeout) as timeout:
        sensor.execute({})

    said = _about_nsqd(lines)
    first, *reminders = said
    assert first[0] == "warning", said
    assert first[1].startswith("nsqd cannot be reached for events/etl: ")
    assert f"127.0.0.1:{unreachable_nsqd}" in first[1] and "Connection refused" in first[1]
    assert first[1].endswith("; the next try in 0.2s")
    # About 15 tries in 3.5 s, a reminder at most every second, each with the count so
    # far and the next wait.
    assert sensor.unreachable_report.tries >= 8, said
    assert 1 <= len(reminders) <= 4, said
    counts = [int(re.search(r": (\d+) tries failed in ", text)[1]) for _, text in reminders]
    assert counts == sorted(counts) and counts[0] >= 2, said
    assert all(text.endswith("the next try in 0.2s") for _, text in reminders), said
    _no_chatter(lines)
    # The timeout says what the wait saw: nsqd refused, how often, the last error.
    assert "nsqd could not be reached for events/etl" in str(timeout.value)
    assert "Connection refused" in str(timeout.value)


def test_poke_mode_says_once_when_nsqd_answers_again(unreachable_nsqd, nsqd_factory, caplog):
    sensor = NSQSensor(task_id="wait", topic="events", channel="etl", poke_interval=5)
    with log_lines(caplog) as lines:
        assert sensor.poke({}) is False
        assert sensor.poke({}) is False  # the second failure: no line
        nsqd_factory(tcp_port=unreachable_nsqd)
        try:
            assert sensor.poke({}) is False  # reached: an empty window
            assert sensor.poke({}) is False
        finally:
            sensor.hook.close()

    said = [text for _, text in _about_nsqd(lines)]
    assert sum("cannot be reached" in text for text in said) == 1, said
    (answered,) = [text for text in said if "answered again" in text]
    assert answered.startswith("nsqd answered again for events/etl, after 2 failed tries in")
    _no_chatter(lines)


def test_reschedule_mode_says_one_line_per_poke_and_backs_off(unreachable_nsqd, caplog):
    first_poke = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=20)
    context = {"ti": RescheduledTI(first_poke), "task_reschedule_count": 3}
    sensor = NSQSensor(
        task_id="wait",
        topic="events",
        channel="etl",
        poke_interval=1,
        timeout=600,
        mode="reschedule",
    )

    before = datetime.datetime.now(datetime.UTC)
    with log_lines(caplog) as lines, pytest.raises(AirflowRescheduleException) as info:
        sensor.execute(context)

    # The 4th poke of this wait: the reconnect backoff's 4th wait (8 s), not poke_interval.
    wait = (info.value.reschedule_date - before).total_seconds()
    assert 8 <= wait <= 10, wait
    ((level, text),) = _about_nsqd(lines)
    assert level == "warning"
    assert text.startswith("nsqd cannot be reached for events/etl: ")
    assert f"127.0.0.1:{unreachable_nsqd}" in text and "Connection refused" in text
    assert text.endswith("; rescheduled: the next try in 8.0s (poke 4 of this wait)"), text
    _no_chatter(lines)


def test_deferrable_mode_warns_once_on_the_worker_and_the_trigger_goes_on_quietly(
    monkeypatch, caplog
):
    """The issue-40 scenario: nsqd refuses its TCP and its HTTP port. The worker's check
    says one line and defers; the trigger continues the count (no second warning),
    reminds at a bounded rate, and its last line says in words what it saw."""
    monkeypatch.setattr(triggers_nsq, "REMINDER_INTERVAL_S", 1.5)
    tcp, http = _closed_port(), _closed_port()
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://127.0.0.1:{tcp}?http_port={http}&connect_timeout=2"
    )
    sensor = NSQSensor(task_id="wait", topic="events", channel="etl", deferrable=True, timeout=4.5)

    with log_lines(caplog) as worker, pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    ((level, text),) = _about_nsqd(worker)
    assert level == "warning"
    assert text.startswith("nsqd cannot be reached for events/etl: ")
    assert f"127.0.0.1:{tcp}" in text and "Connection refused" in text
    assert text.endswith(
        "waiting in the triggerer, which tries again with backoff until the sensor's timeout"
    )
    _no_chatter(worker)

    trigger = deferred.value.trigger
    assert trigger.unreachable["tries"] == 1  # the worker's try: the trigger goes on from it
    with log_lines(caplog) as lines:
        event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), 30))

    assert event.payload["status"] == "timeout"
    assert "Connection refused" in event.payload["unreachable"]
    said = [text for _, text in _about_nsqd(lines)]
    assert not any(text.startswith("nsqd cannot be reached") for text in said), said
    *reminders, last = said
    assert len(reminders) <= 4, said  # at most one per 1.5 s of a 4.5 s wait
    for text in reminders:
        assert re.search(rf": \d+ tries failed in [\d.]+s \(the last: .*127.0.0.1:{tcp}", text)
        assert re.search(r"; (the next try in \d+\.\ds|no further try before the deadline)$", text)
    assert re.fullmatch(
        r"The deadline passed: nsqd could not be reached for events/etl: \d+ tries failed "
        r"in [\d.]+s \(the last: .*Connection refused.*\)",
        last,
    ), last
    _no_chatter(lines)

    with pytest.raises(AirflowSensorTimeout, match="nsqd could not be reached at the last try"):
        sensor.execute_complete({}, event.payload)


def test_the_trigger_says_when_nsqd_answers_again(nsqd, nsq_default, nsq_topic, caplog):
    nsqd.create_channel(nsq_topic, "etl")
    nsqd.http_publish(nsq_topic, b"m1")
    earlier = {"tries": 3, "since": time.time() - 12, "said": time.time() - 12, "last": "x"}
    trigger = NSQMessageTrigger(
        topic=nsq_topic, channel="etl", deadline=time.time() + 30, unreachable=earlier
    )
    assert type(trigger)(**trigger.serialize()[1]).serialize() == trigger.serialize()

    with log_lines(caplog) as lines:
        event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), 20))

    assert event.payload["status"] == "ready"
    said = [text for _, text in _about_nsqd(lines)]
    assert any(
        re.fullmatch(rf"nsqd answered again for {nsq_topic}/etl, after 3 failed tries in 1\ds", t)
        for t in said
    ), said


def test_the_trigger_names_what_it_saw_at_the_deadline(nsqd, nsq_default, nsq_topic, caplog):
    nsqd.create_channel(nsq_topic, "etl")
    trigger = NSQMessageTrigger(
        topic=nsq_topic, channel="etl", min_messages=2, deadline=time.time() + 1.5
    )
    with log_lines(caplog) as lines:
        event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), 20))

    assert event.payload == {**event.payload, "status": "timeout", "ready": 0}
    last = [text for _, text in lines if text.startswith("The deadline passed")]
    assert last == [
        f"The deadline passed: {nsq_topic}/etl held 0 ready message(s) at the last check, 2 needed"
    ]


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
