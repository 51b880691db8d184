"""NSQSensor: what downstream tasks receive, that the channel is empty afterwards, and
that nothing is lost when the task fails before its XCom is recorded."""

from __future__ import annotations

import datetime
import socket
import threading
import time

import pytest
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)

from airflow_provider_nsq.client import NSQConnection
from airflow_provider_nsq.client.message import decode_record_body
from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.sensors.nsq import NSQSensor
from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger
from tests.support.airflow_runs import TEST_DAGS, load_dag, run_dag
from tests.support.dags.nsq_sensor_dags import WAIT_TIMEOUT_S, WAIT_WINDOW_S
from tests.support.marks import needs_airflow, unraisable_is_an_error
from tests.support.nsqd_contents import channel_is_empty, client_config, read

pytestmark = unraisable_is_an_error

DAGS = TEST_DAGS / "nsq_sensor_dags.py"
RECORD_KEYS = {"id", "body", "body_encoding", "attempts", "timestamp", "topic", "channel", "nsqd"}


class FakeTI:
    """Stands in for the task instance where a test calls the sensor directly."""

    def __init__(self, fail: bool = False) -> None:
        self.pushed: dict = {}
        self.fail = fail

    def xcom_push(self, key, value):
        if self.fail:
            raise RuntimeError("XCom backend down")
        self.pushed[key] = value


def _sensor(**kwargs) -> NSQSensor:
    defaults = {"task_id": "wait", "topic": "events", "channel": "etl", "window_timeout": 1.0}
    return NSQSensor(**{**defaults, **kwargs})


# -- arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"channel": "bad channel"},
        {"topic": "x" * 65},
        {"min_messages": 0},
        {"min_messages": 5, "max_messages": 4},
        {"max_messages": 2501},
        {"window_timeout": 0},
        {"rejected": "drop"},
        {"rejected_requeue_delay": -1},
        {"message_filter": 42},
    ],
)
def test_bad_literal_arguments_fail_at_dag_parse(kwargs):
    with pytest.raises(NSQValueError):
        _sensor(**kwargs)


def test_channel_is_required():
    with pytest.raises(TypeError, match="channel"):
        NSQSensor(task_id="wait", topic="events")  # type: ignore[call-arg]


def test_an_ephemeral_channel_cannot_be_deferrable():
    with pytest.raises(NSQValueError, match="ephemeral"):
        _sensor(channel="etl#ephemeral", deferrable=True)
    _sensor(channel="etl#ephemeral")  # poke mode: each window sees what arrives while open


def test_templated_names_are_accepted_at_parse():
    sensor = _sensor(topic="{{ params.topic }}", channel="{{ params.channel }}")
    assert {"topic", "channel", "nsq_conn_id"} <= set(sensor.template_fields)
    assert sensor.window_timeout == 1.0


# -- deferral plumbing (no broker) -----------------------------------------------------


def test_deferrable_defers_with_timeout_and_a_serialisable_trigger(mocker):
    sensor = _sensor(deferrable=True, timeout=120, nsq_conn_id="conn_x")
    mocker.patch.object(sensor, "poke", return_value=False)
    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})
    deferred = info.value
    assert isinstance(deferred.trigger, NSQMessageTrigger)
    kwargs = deferred.trigger.serialize()[1]
    assert (kwargs["nsq_conn_id"], kwargs["min_messages"]) == ("conn_x", 1)
    assert deferred.method_name == "execute_complete"
    assert datetime.timedelta(seconds=110) < deferred.timeout <= datetime.timedelta(seconds=120)
    # One deadline for the whole wait: in the trigger, and back to the task on resume.
    assert 110 < kwargs["deadline"] - time.time() <= 120
    resumed = datetime.datetime.fromisoformat(deferred.kwargs["deadline"]).timestamp()
    assert resumed == pytest.approx(kwargs["deadline"])


def test_trigger_error_fails_the_task_or_skips_it_with_soft_fail():
    event = {"status": "error", "message": "E_UNAUTHORIZED AUTH failed for SUB"}
    with pytest.raises(AirflowException, match="E_UNAUTHORIZED"):
        _sensor(deferrable=True).resume_execution("execute_complete", {"event": event}, {})
    with pytest.raises(AirflowSkipException):
        _sensor(deferrable=True, soft_fail=True).resume_execution(
            "execute_complete", {"event": event}, {}
        )


@needs_airflow("3.1", "soft_fail after a deferral (Airflow 3.0's sensors fail instead)")
def test_trigger_timeout_is_a_sensor_timeout_or_a_skip_with_soft_fail():
    from airflow.sdk.bases.operator import TriggerFailureReason

    fail = {"error": TriggerFailureReason.TRIGGER_TIMEOUT}
    with pytest.raises(AirflowSensorTimeout):
        _sensor(deferrable=True).resume_execution("__fail__", fail, {})
    with pytest.raises(AirflowSkipException):
        _sensor(deferrable=True, soft_fail=True).resume_execution("__fail__", fail, {})


def _iso_in(seconds: float) -> str:
    return (datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)).isoformat()


def test_past_deadline_after_a_short_window_times_out(mocker):
    sensor = _sensor(deferrable=True)
    window = mocker.patch.object(sensor, "_window", return_value=False)
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete({}, event={"status": "ready"}, deadline=_iso_in(-1))
    window.assert_called_once()  # the trigger said "ready": no second check first


def test_a_resumed_task_keeps_the_first_deadline(mocker):
    sensor = _sensor(deferrable=True, timeout=3600)
    mocker.patch.object(sensor, "_window", return_value=False)
    deadline = _iso_in(30)
    with pytest.raises(TaskDeferred) as info:
        sensor.execute_complete({}, event={"status": "ready"}, deadline=deadline)
    assert info.value.kwargs["deadline"] == deadline
    assert info.value.timeout <= datetime.timedelta(seconds=30)


def test_the_deadline_comes_back_in_the_event_where_dag_test_drops_the_kwargs(mocker):
    sensor = _sensor(deferrable=True, timeout=3600)
    mocker.patch.object(sensor, "_window", return_value=False)
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete({}, event={"status": "ready", "deadline": _iso_in(-1)})


def test_the_triggers_timeout_event_is_a_sensor_timeout_or_a_skip_with_soft_fail():
    event = {"status": "timeout", "ready": 1, "deadline": _iso_in(-1)}
    with pytest.raises(AirflowSensorTimeout, match=r"1 were ready"):
        _sensor(deferrable=True).resume_execution("execute_complete", {"event": event}, {})
    with pytest.raises(AirflowSkipException):
        _sensor(deferrable=True, soft_fail=True).resume_execution(
            "execute_complete", {"event": event}, {}
        )


# -- one window against the broker ------------------------------------------------------


def test_below_min_messages_no_window_opens_and_nothing_is_redelivered(
    nsqd, nsq_default, nsq_topic
):
    nsqd.create_channel(nsq_topic, "etl")
    nsqd.http_publish(nsq_topic, b"only-one")
    sensor = _sensor(topic=nsq_topic, min_messages=2, max_messages=5)

    assert sensor.poke({}) is False
    assert sensor.poke({}) is False

    stats = nsqd.channel_stats(nsq_topic, "etl")
    assert (stats["depth"], stats["requeue_count"], stats["message_count"]) == (1, 0, 1)
    (message,) = read(nsqd, nsq_topic, "etl", count=1)
    assert (message.body, message.attempts) == (b"only-one", 1)  # never delivered before


def test_the_first_check_registers_the_channel_so_messages_wait_for_it(
    nsqd, nsq_default, nsq_topic
):
    nsqd.create_channel(nsq_topic, "another-consumer")
    sensor = _sensor(topic=nsq_topic)

    assert sensor.poke({}) is False  # the channel did not exist: now it does
    nsqd.http_publish(nsq_topic, b"published-later")

    try:
        assert nsqd.wait_for(lambda: sensor.poke({})) is True
        records = [m.body for m in sensor._held.messages]
    finally:
        sensor.hook.close()
    assert records == [b"published-later"]


def test_without_http_a_short_window_requeues_and_the_next_one_waits(
    nsqd, nsq_default_tcp_only, nsq_topic
):
    nsqd.create_channel(nsq_topic, "etl")
    nsqd.http_publish(nsq_topic, b"only-one")
    sensor = _sensor(topic=nsq_topic, min_messages=2, max_messages=5, poke_interval=60)

    assert sensor.poke({}) is False  # the window saw one message and handed it back
    assert sensor.poke({}) is False  # backing off: no second window, no redelivery

    nsqd.wait_for(lambda: (nsqd.channel_stats(nsq_topic, "etl") or {}).get("depth") == 1)
    (again,) = read(nsqd, nsq_topic, "etl", count=1)
    assert (again.body, again.attempts) == (b"only-one", 2)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_http_api_falls_back_to_a_window(nsqd, monkeypatch, nsq_topic, capsys):
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT",
        f"nsq://{nsqd.host}:{nsqd.tcp_port}?http_port={_closed_port()}&connect_timeout=2",
    )
    nsqd.http_publish(nsq_topic, b"m1")
    sensor = _sensor(topic=nsq_topic)
    try:
        assert sensor.poke({}) is True
        assert [m.body for m in sensor._held.messages] == [b"m1"]
    finally:
        sensor.hook.close()
    logged = capsys.readouterr().out  # Airflow's task logging writes through structlog
    assert "HTTP API could not be read" in logged
    assert "Connection refused" in logged


def test_rejected_messages_requeued_with_delay_and_accepted_ones_finished_after_push(
    nsqd, nsq_default, nsq_topic
):
    with NSQConnection(client_config(nsqd)) as conn:
        conn.multi_publish(nsq_topic, [b"skip-1", b"a", b"\xff\x00binary"])
    sensor = _sensor(
        topic=nsq_topic,
        max_messages=3,
        message_filter="tests.support.dags.nsq_sensor_dags.keep",
        rejected="requeue",
        rejected_requeue_delay=datetime.timedelta(minutes=10),
    )
    ti = FakeTI()
    try:
        assert sensor.poke({}) is True
        sensor._deliver({"ti": ti})  # type: ignore[typeddict-item]
    finally:
        sensor.hook.close()
    records = ti.pushed["return_value"]
    assert [decode_record_body(r) for r in records] == [b"a", b"\xff\x00binary"]
    assert [r["body_encoding"] for r in records] == ["utf-8", "base64"]
    assert all(set(r) == RECORD_KEYS and r["channel"] == "etl" for r in records)
    assert {r["nsqd"] for r in records} == {nsqd.tcp_address}  # one nsqd: named all the same
    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, "etl")["deferred_count"] == 1)
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "etl"))  # accepted ones FIN'd


def test_failed_push_requeues_the_window(nsqd, nsq_default, nsq_topic):
    nsqd.http_publish(nsq_topic, b"m1")
    sensor = _sensor(topic=nsq_topic)
    try:
        assert sensor.poke({}) is True
        with pytest.raises(RuntimeError, match="XCom backend down"):
            sensor._deliver({"ti": FakeTI(fail=True)})  # type: ignore[typeddict-item]
    finally:
        sensor.hook.close()
    (again,) = read(nsqd, nsq_topic, "etl", count=1)
    assert (again.body, again.attempts) == (b"m1", 2)


# -- whole DAG runs -----------------------------------------------------------------------


@pytest.mark.slow
def test_poke_mode_hands_accepted_messages_downstream(airflow_db, nsqd, nsq_default, nsq_topic):
    for body in (b"a", b"skip-me", b"b"):
        nsqd.http_publish(nsq_topic, body)

    result = run_dag(load_dag(DAGS, "nsq_sensor_poke"), topic=nsq_topic, channel="sensor")

    assert result.state == "success", result
    received = result.xcom["received"]
    assert sorted(r["body"] for r in received) == ["a", "b"]  # "skip-me" filtered out
    assert all(set(r) == RECORD_KEYS for r in received)
    assert {(r["topic"], r["channel"], r["attempts"]) for r in received} == {
        (nsq_topic, "sensor", 1)
    }
    assert result.xcom["wait_for_messages"] == received  # pushed once, by the sensor
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "sensor"))


def _publish_once_the_first_check_is_done(nsqd, topic: str, bodies: list[bytes]):
    """A thread that publishes ``bodies`` once the sensor's first check came back short
    (its channel exists and no window is open), so the wait happens in the trigger."""
    errors: list[BaseException] = []

    def run() -> None:
        def checked_and_idle() -> bool:
            stats = nsqd.channel_stats(topic, "sensor")
            return stats is not None and stats["client_count"] == 0

        try:
            nsqd.wait_for(checked_and_idle, timeout=60)
            with NSQConnection(client_config(nsqd)) as conn:
                conn.multi_publish(topic, bodies)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


@pytest.mark.slow
@pytest.mark.parametrize(
    ("connection", "attempts"),
    [("nsq_default", [1, 1]), ("nsq_default_tcp_only", [2, 2])],
    ids=["http-check", "tcp-peek"],
)
def test_deferrable_mode_waits_in_the_trigger(
    airflow_db, nsqd, nsq_topic, request, connection, attempts
):
    request.getfixturevalue(connection)
    publisher, errors = _publish_once_the_first_check_is_done(nsqd, nsq_topic, [b"d1", b"\xff\xfe"])
    result = run_dag(load_dag(DAGS, "nsq_sensor_deferrable"), topic=nsq_topic, channel="sensor")
    publisher.join(timeout=5)

    assert not errors
    assert result.state == "success", result
    received = result.xcom["received"]
    assert sorted(decode_record_body(r) for r in received) == [b"d1", b"\xff\xfe"]
    # The HTTP check takes nothing; a TCP peek hands what it held back once (REQ).
    assert sorted(r["attempts"] for r in received) == attempts
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "sensor"))


@pytest.mark.slow
@pytest.mark.parametrize("dag_id", ["nsq_sensor_wait_deferrable", "nsq_sensor_wait_poke"])
@pytest.mark.parametrize(
    ("connection", "most_attempts"),
    [("nsq_default", 1), ("nsq_default_tcp_only", 3)],
    ids=["http-check", "tcp-peek"],
)
def test_too_few_messages_fail_by_timeout_and_stay_on_the_channel(
    airflow_db, nsqd, nsq_topic, request, dag_id, connection, most_attempts
):
    """min_messages=3 on a channel that holds one: the run fails by the sensor's timeout
    (not later, however the wait is split), and the message waits on the channel with at
    most two redeliveries (none with the HTTP check)."""
    request.getfixturevalue(connection)
    nsqd.create_channel(nsq_topic, "sensor")
    nsqd.http_publish(nsq_topic, b"lonely")

    started = time.monotonic()
    result = run_dag(load_dag(DAGS, dag_id), topic=nsq_topic, channel="sensor")
    elapsed = time.monotonic() - started

    assert result.task_states["wait_for_messages"] == "failed", result
    # dag.test() itself takes a few seconds to start and record the run.
    assert WAIT_TIMEOUT_S <= elapsed < WAIT_TIMEOUT_S + WAIT_WINDOW_S + 15, elapsed

    def back_on_the_channel() -> bool:
        stats = nsqd.channel_stats(nsq_topic, "sensor")
        return (stats["depth"], stats["in_flight_count"]) == (1, 0)

    nsqd.wait_for(back_on_the_channel)
    (message,) = read(nsqd, nsq_topic, "sensor", count=1)
    assert message.body == b"lonely"
    assert message.attempts <= most_attempts + 1  # +1: this read's own delivery


@pytest.mark.slow
def test_failed_xcom_push_leaves_messages_for_a_rerun(
    airflow_db, nsqd, nsq_default, nsq_topic, mocker
):
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    for body in (b"x1", b"x2"):
        nsqd.http_publish(nsq_topic, body)
    dag = load_dag(DAGS, "nsq_sensor_poke")

    push = mocker.patch.object(
        RuntimeTaskInstance, "xcom_push", side_effect=RuntimeError("XCom backend down")
    )
    failed = run_dag(dag, topic=nsq_topic, channel="sensor")
    mocker.stop(push)

    assert failed.task_states["wait_for_messages"] == "failed", failed
    assert "received" not in failed.xcom

    def back_on_the_channel() -> bool:
        stats = nsqd.channel_stats(nsq_topic, "sensor")
        return (stats["depth"], stats["in_flight_count"]) == (2, 0)

    nsqd.wait_for(back_on_the_channel)

    rerun = run_dag(dag, topic=nsq_topic, channel="sensor")

    assert rerun.state == "success", rerun
    received = rerun.xcom["received"]
    assert sorted((r["body"], r["attempts"]) for r in received) == [("x1", 2), ("x2", 2)]
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "sensor"))
