"""The DAGs tests/e2e/test_celery_e2e.py runs on an Airflow with CeleryExecutor and
two workers: the publish operators feeding a consume task, a sensor in reschedule mode,
a consume task that the test kills with its worker, and tasks whose nsqd cannot be
reached.

Topics, the sink folder and timings come from the environment the test sets
(``NSQ_CELERY_*``), the worker-kill DAG's topic from its run's conf.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

from airflow.sdk import dag

from airflow_provider_nsq.operators.nsq import (
    NSQDeferredPublishOperator,
    NSQMultiPublishOperator,
    NSQPublishOperator,
)
from airflow_provider_nsq.operators.nsq_consume import NSQConsumeOperator
from airflow_provider_nsq.sensors.nsq import NSQSensor

FLOW_TOPIC = os.environ["NSQ_CELERY_FLOW_TOPIC"]
SENSOR_TOPIC = os.environ["NSQ_CELERY_SENSOR_TOPIC"]
SINK = Path(os.environ["NSQ_CELERY_SINK_DIR"])
FLOW_BATCH = int(os.environ["NSQ_CELERY_FLOW_BATCH"])
SENSOR_MESSAGES = int(os.environ["NSQ_CELERY_SENSOR_MESSAGES"])
KILL_MESSAGES = int(os.environ["NSQ_CELERY_KILL_MESSAGES"])
APPLY_SECONDS = float(os.environ["NSQ_CELERY_APPLY_SECONDS"])

COMMON: dict[str, Any] = {
    "schedule": None,
    "start_date": datetime.datetime(2024, 1, 1),
    "catchup": False,
}


def apply_and_record(record: dict[str, Any], seconds: float = 0.0) -> None:
    """The consume tasks' function: append the message to its topic's sink file (one
    JSON line: what a database write would be), naming the worker, then take
    ``seconds``. A line whose message was not FINished (its worker died between the
    two) is a duplicate when the message is applied again."""
    line = {
        "body": record["body"],
        "attempts": record["attempts"],
        "worker": os.environ.get("NSQ_TEST_COMPONENT"),
    }
    with open(SINK / f"{record['topic']}.jsonl", "a") as sink:
        sink.write(json.dumps(line) + "\n")
    if seconds:
        time.sleep(seconds)


@dag(dag_id="nsq_celery_flow", default_args={"retries": 0}, **COMMON)
def flow():
    NSQPublishOperator(task_id="pub", topic=FLOW_TOPIC, message={"n": "pub"})
    NSQDeferredPublishOperator(task_id="dpub", topic=FLOW_TOPIC, message={"n": "dpub"}, delay=1000)
    NSQMultiPublishOperator(
        task_id="mpub", topic=FLOW_TOPIC, messages=[{"n": f"mpub-{i}"} for i in range(FLOW_BATCH)]
    )
    # At the same time (the channel exists: nothing published is missed): every message
    # the three publish, the deferred one a second later, then the end.
    NSQConsumeOperator(
        task_id="apply",
        topic=FLOW_TOPIC,
        channel="apply",
        apply_function=apply_and_record,
        max_messages=FLOW_BATCH + 2,
        idle_timeout=30,
    )


@dag(dag_id="nsq_celery_sensor", default_args={"retries": 0}, **COMMON)
def sensor():
    # nsqd's HTTP API: each poke reads the channel's depth and takes nothing until
    # enough wait; each reschedule is a new Celery task, on whichever worker takes it.
    # poke_interval well above the executor's turnaround (a Celery worker reported a
    # finished poke up to 6 s after it ended here): a reschedule due sooner races that
    # report, and Airflow 3.3.2 fails the task (docs/operations.md).
    NSQSensor(
        task_id="wait",
        topic=SENSOR_TOPIC,
        channel="etl",
        mode="reschedule",
        min_messages=SENSOR_MESSAGES,
        max_messages=SENSOR_MESSAGES,
        poke_interval=12,
        timeout=180,
    )


@dag(
    dag_id="nsq_celery_kill",
    default_args={"retries": 1, "retry_delay": datetime.timedelta(seconds=1)},
    **COMMON,
)
def kill():
    # A topic per run (the test kills a worker in each): from the run's conf.
    NSQConsumeOperator(
        task_id="apply",
        topic="{{ dag_run.conf['topic'] }}",
        channel="apply",
        apply_function=apply_and_record,
        apply_function_kwargs={"seconds": APPLY_SECONDS},
        max_messages=KILL_MESSAGES,
        max_batch_size=100,
        idle_timeout=2,
    )


@dag(dag_id="nsq_celery_unreachable", default_args={"retries": 0}, **COMMON)
def unreachable():
    # nsq_down: two closed ports on 127.0.0.1 (host:port, then nsqd_tcp_addresses)
    NSQPublishOperator(task_id="pub", topic=FLOW_TOPIC, message="x", nsq_conn_id="nsq_down")
    NSQConsumeOperator(
        task_id="apply",
        topic=FLOW_TOPIC,
        channel="down",
        apply_function=apply_and_record,
        nsq_conn_id="nsq_down",
        idle_timeout=2,
    )


flow()
sensor()
kill()
unreachable()
