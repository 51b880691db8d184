"""NSQSensor: what downstream tasks receive, that the channel is empty afterwards, and
that nothing is lost when the task fails before its XCom is recorded."""

from __future__ import annotations

import datetime
import threading

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)

from airflow_provider_nsq.client import NSQConnection
from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.sensors.nsq import NSQSensor, decode_record_body
from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger

from .conftest import TEST_DAGS, channel_is_empty, client_config, load_dag, read, run_dag

DAGS = TEST_DAGS / "nsq_sensor_dags.py"
RECORD_KEYS = {"id", "body", "body_encoding", "attempts", "timestamp", "topic", "channel"}


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
    defaults = {"task_id": "wait", "topic": "events", "channel": "etl", "window": 1.0}
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
        {"window": 0},
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


def test_templated_names_are_accepted_at_parse():
    sensor = _sensor(topic="{{ params.topic }}", channel="{{ params.channel }}")
    assert {"topic", "channel", "nsq_conn_id"} <= set(sensor.template_fields)
    assert sensor.window == 1.0


# -- deferral plumbing (no broker) -----------------------------------------------------


def test_deferrable_defers_with_timeout_and_a_serialisable_trigger(mocker):
    sensor = _sensor(deferrable=True, timeout=120, nsq_conn_id="conn_x")
    mocker.patch.object(sensor, "poke", return_value=False)
    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})
    deferred = info.value
    assert isinstance(deferred.trigger, NSQMessageTrigger)
    assert deferred.trigger.serialize()[1]["nsq_conn_id"] == "conn_x"
    assert deferred.method_name == "execute_complete"
    assert datetime.timedelta(seconds=110) < deferred.timeout <= datetime.timedelta(seconds=120)
    assert "deadline" in deferred.kwargs


def test_trigger_error_fails_the_task_or_skips_it_with_soft_fail():
    event = {"status": "error", "message": "E_UNAUTHORIZED AUTH failed for SUB"}
    with pytest.raises(AirflowException, match="E_UNAUTHORIZED"):
        _sensor(deferrable=True).resume_execution("execute_complete", {"event": event}, {})
    with pytest.raises(AirflowSkipException):
        _sensor(deferrable=True, soft_fail=True).resume_execution(
            "execute_complete", {"event": event}, {}
        )


def test_trigger_timeout_is_a_sensor_timeout_or_a_skip_with_soft_fail():
    from airflow.sdk.bases.operator import TriggerFailureReason

    fail = {"error": TriggerFailureReason.TRIGGER_TIMEOUT}
    with pytest.raises(AirflowSensorTimeout):
        _sensor(deferrable=True).resume_execution("__fail__", fail, {})
    with pytest.raises(AirflowSkipException):
        _sensor(deferrable=True, soft_fail=True).resume_execution("__fail__", fail, {})


def test_past_deadline_after_a_short_window_times_out(mocker):
    sensor = _sensor(deferrable=True)
    mocker.patch.object(sensor, "poke", return_value=False)
    past = (
        datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    ).isoformat()
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete({}, event={"status": "message"}, deadline=past)


# -- one window against the broker ------------------------------------------------------


def test_short_window_requeues_at_once_and_keeps_waiting(nsqd, nsq_default, nsq_topic):
    nsqd.http_publish(nsq_topic, b"only-one")
    sensor = _sensor(topic=nsq_topic, min_messages=2, max_messages=5)
    assert sensor.poke({}) is False
    nsqd.wait_for(lambda: (nsqd.channel_stats(nsq_topic, "etl") or {}).get("depth") == 1)
    (again,) = read(nsqd, nsq_topic, "etl", count=1)
    assert (again.body, again.attempts) == (b"only-one", 2)


def test_rejected_messages_requeued_with_delay_and_accepted_ones_finished_after_push(
    nsqd, nsq_default, nsq_topic
):
    with NSQConnection(client_config(nsqd)) as conn:
        conn.multi_publish(nsq_topic, [b"skip-1", b"a", b"\xff\x00binary"])
    sensor = _sensor(
        topic=nsq_topic,
        max_messages=3,
        message_filter="tests.dags.nsq_sensor_dags.keep",
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


@pytest.mark.slow
def test_deferrable_mode_waits_in_the_trigger(airflow_db, nsqd, nsq_default, nsq_topic):
    errors: list[BaseException] = []

    def publish_once_the_trigger_waits() -> None:
        # The trigger subscribes with RDY 1; the poke windows use RDY max_messages (2).
        def trigger_subscribed() -> bool:
            stats = nsqd.channel_stats(nsq_topic, "sensor") or {}
            return any(c.get("ready_count") == 1 for c in stats.get("clients", []))

        try:
            nsqd.wait_for(trigger_subscribed, timeout=60)
            with NSQConnection(client_config(nsqd)) as conn:
                conn.multi_publish(nsq_topic, [b"d1", b"\xff\xfe"])
        except BaseException as exc:
            errors.append(exc)

    publisher = threading.Thread(target=publish_once_the_trigger_waits, daemon=True)
    publisher.start()
    result = run_dag(load_dag(DAGS, "nsq_sensor_deferrable"), topic=nsq_topic, channel="sensor")
    publisher.join(timeout=5)

    assert not errors
    assert result.state == "success", result
    received = result.xcom["received"]
    assert sorted(decode_record_body(r) for r in received) == [b"d1", b"\xff\xfe"]
    # The trigger peeked at one message and put it back (REQ): attempts 2 for that one.
    assert sorted(r["attempts"] for r in received) == [1, 2]
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "sensor"))


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
