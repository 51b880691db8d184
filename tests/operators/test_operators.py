"""Publish operators: argument checks at DAG parse time, and what a consumer reads from
nsqd after the example DAG ran (PUB, DPUB after its delay, MPUB from an upstream task)."""

from __future__ import annotations

import datetime
import json
import math
import time

import pytest

from airflow_provider_nsq.operators.nsq import (
    NSQDeferredPublishOperator,
    NSQMultiPublishOperator,
    NSQPublishOperator,
)
from airflow_provider_nsq.protocol.errors import NSQValueError
from tests.support.airflow_runs import EXAMPLE_DAGS, load_dag, run_dag
from tests.support.nsqd_contents import read


def _json_refusal(value: object) -> str:
    """What this Python's json says of a value it refuses (3.13 adds the value)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"json wrote {value!r}")


@pytest.mark.parametrize(
    "make",
    [
        lambda: NSQPublishOperator(task_id="t", topic="bad topic!", message="m"),
        lambda: NSQPublishOperator(task_id="t", topic="x" * 65, message="m"),
        lambda: NSQPublishOperator(task_id="t", topic="events", message=""),
        lambda: NSQPublishOperator(task_id="t", topic="events", message=object()),
        lambda: NSQDeferredPublishOperator(task_id="t", topic="events", message="m", delay=-1),
        lambda: NSQDeferredPublishOperator(task_id="t", topic="events", message="m", delay=2.5),
        lambda: NSQDeferredPublishOperator(
            task_id="t", topic="events", message="m", delay=datetime.timedelta(microseconds=10)
        ),
        lambda: NSQMultiPublishOperator(task_id="t", topic="events", messages=[]),
        lambda: NSQMultiPublishOperator(task_id="t", topic="events", messages="one"),
        lambda: NSQMultiPublishOperator(task_id="t", topic="events", messages=["a", b""]),
    ],
)
def test_literal_bad_arguments_fail_at_dag_parse(make):
    with pytest.raises(NSQValueError):
        make()


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (
            lambda: NSQPublishOperator(task_id="t", topic="events", message={"at": object()}),
            "message is not JSON-serialisable: Object of type object is not JSON serializable",
        ),
        (
            lambda: NSQMultiPublishOperator(task_id="t", topic="e", messages=["a", {1j: 1}]),
            "messages[1] is not JSON-serialisable: keys must be str, int, float, bool or None, "
            "not complex",
        ),
        (
            lambda: NSQPublishOperator(task_id="t", topic="events", message=[math.nan]),
            f"message cannot be written as JSON: {_json_refusal(math.nan)} "
            "(JSON has no NaN or Infinity)",
        ),
    ],
)
def test_a_bad_literal_message_is_named_once(make, error):
    with pytest.raises(NSQValueError) as info:
        make()
    assert str(info.value) == error


def test_templated_arguments_are_checked_at_execute_without_network():
    # Parsing never touches the network or the connection: this one does not exist.
    pub = NSQPublishOperator(
        task_id="pub", topic="{{ params.topic }}", message="m", nsq_conn_id="nowhere"
    )
    dpub = NSQDeferredPublishOperator(
        task_id="dpub", topic="events", message="m", delay="{{ params.delay }}"
    )
    mpub = NSQMultiPublishOperator(task_id="mpub", topic="events", messages="{{ params.m }}")
    assert {"topic", "message", "nsq_conn_id"} <= set(pub.template_fields)
    assert "delay" in dpub.template_fields

    pub.topic = "bad topic!"  # as rendered
    with pytest.raises(NSQValueError, match="invalid topic name 'bad topic!'"):
        pub.execute({})
    dpub.delay = "-5"
    with pytest.raises(NSQValueError, match="delay"):
        dpub.execute({})
    mpub.messages = "not a list"
    with pytest.raises(NSQValueError, match="expected a list"):
        mpub.execute({})


@pytest.mark.slow
def test_example_dag_publishes_pub_dpub_and_mpub(airflow_db, nsqd, nsq_default, nsq_topic):
    delay_ms = 4000
    nsqd.create_channel(nsq_topic, "reader")
    dag = load_dag(EXAMPLE_DAGS / "nsq_publish_events.py", "nsq_publish_events")

    result = run_dag(dag, topic=nsq_topic, check_delay_ms=delay_ms)

    assert result.state == "success", result
    started_body = json.dumps({"event": "started", "run_id": result.run_id}, separators=(",", ":"))
    assert result.xcom["publish_started"] == {
        "topic": nsq_topic,
        "messages": 1,
        "bytes": len(started_body),
    }
    assert result.xcom["publish_row_counts"]["messages"] == 3
    assert result.xcom["publish_check_results"]["delay_ms"] == delay_ms

    # Everything but the deferred message is there at once.
    now = read(nsqd, nsq_topic, "reader", count=4, timeout=5.0)
    events = [json.loads(m.body) for m in now]
    assert sorted(e["event"] for e in events) == ["row_count", "row_count", "row_count", "started"]
    assert {e["table"] for e in events if e["event"] == "row_count"} == {
        "orders",
        "customers",
        "refunds",
    }
    started = next(e for e in events if e["event"] == "started")
    assert started["run_id"] == result.run_id  # the template was rendered

    # The DPUB message arrives, no earlier than its delay after it was published.
    later = read(nsqd, nsq_topic, "reader", count=1, timeout=delay_ms / 1000 + 8)
    received_ns = time.time_ns()
    assert [json.loads(m.body)["event"] for m in later] == ["check_results"]
    assert received_ns - later[0].timestamp >= delay_ms * 1_000_000
