"""DAGs (and the apply functions they name by dotted path) for the NSQConsumeOperator
tests: every templated field from params, and a task whose function outlives its
``execution_timeout``.

Topic and channel come from params, so each test run uses its own topic.
"""

from __future__ import annotations

import datetime
import threading

from airflow.sdk import dag, get_current_context

from airflow_provider_nsq.operators.nsq_consume import NSQConsumeOperator

#: Set by the tests to let slow_apply return (it also returns by itself after 60 s).
RELEASE = threading.Event()


def tag_body(prefix: str, record: dict, *, suffix: str = "") -> str:
    """``prefix`` + body + ``suffix``: shows where the arguments went; then ``@`` and
    the task id, read from the task's context on the function's own thread."""
    return f"{prefix}{record['body']}{suffix}@{get_current_context()['ti'].task_id}"


def slow_apply(record: dict) -> None:
    """Outlives any short execution_timeout."""
    RELEASE.wait(60)


@dag(
    dag_id="nsq_consume_templated",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={
        "topic": "nsq_consume_test",
        "channel": "apply",
        "dead": "nsq_consume_test_dead",
        "max": "2",
        "idle": "1.5",
    },
    default_args={"retries": 0},
)
def templated_dag():
    NSQConsumeOperator(
        task_id="consume",
        topic="{{ params.topic }}",
        channel="{{ params.channel }}",
        apply_function="tests.support.dags.nsq_consume_dags.tag_body",
        apply_function_args=["{{ params.channel }}:"],
        apply_function_kwargs={"suffix": ":{{ run_id }}"},
        max_messages="{{ params.max }}",
        idle_timeout="{{ params.idle }}",
        dead_letter_topic="{{ params.dead }}",
        return_apply_function_results=True,
    )


@dag(
    dag_id="nsq_consume_timeout",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "nsq_consume_test", "channel": "apply"},
    default_args={"retries": 0},
)
def timeout_dag():
    NSQConsumeOperator(
        task_id="consume",
        topic="{{ params.topic }}",
        channel="{{ params.channel }}",
        apply_function="tests.support.dags.nsq_consume_dags.slow_apply",
        max_batch_size=5,
        execution_timeout=datetime.timedelta(seconds=3),
    )


templated = templated_dag()
timeout = timeout_dag()
