"""The DAGs tests/e2e/test_production_e2e.py runs in a real Airflow: the publish
operators (one declaring its topic's asset as an outlet, and a DAG scheduled on that
asset), a failing publish, a sensor with nsqd's HTTP API, a sensor in reschedule mode
without it, an event-driven DAG whose task links to nsqadmin, and a consume task that
dead-letters a poison message.

Topics and timings come from the environment the test sets (``NSQ_PROD_*``).
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import AssetWatcher, dag, task

from airflow_provider_nsq.assets import nsq_asset
from airflow_provider_nsq.links import link_to_nsqadmin
from airflow_provider_nsq.operators.nsq import (
    NSQDeferredPublishOperator,
    NSQMultiPublishOperator,
    NSQPublishOperator,
)
from airflow_provider_nsq.operators.nsq_consume import NSQConsumeOperator
from airflow_provider_nsq.sensors.nsq import NSQSensor

PUBLISH_TOPIC = os.environ["NSQ_PROD_PUBLISH_TOPIC"]
SENSOR_TOPIC = os.environ["NSQ_PROD_SENSOR_TOPIC"]
RESCHEDULE_TOPIC = os.environ["NSQ_PROD_RESCHEDULE_TOPIC"]
EVENTS_TOPIC = os.environ["NSQ_PROD_EVENTS_TOPIC"]
RESCHEDULE_TIMEOUT_S = int(os.environ["NSQ_PROD_RESCHEDULE_TIMEOUT_S"])
CONSUME_TOPIC = os.environ["NSQ_PROD_CONSUME_TOPIC"]
#: The NSQ cluster as the connection names it: the assets' address.
NSQD = os.environ["NSQ_PROD_NSQD"]

COMMON: dict[str, Any] = {
    "schedule": None,
    "start_date": datetime.datetime(2024, 1, 1),
    "catchup": False,
    "default_args": {"retries": 0},
}


@dag(dag_id="nsq_prod_publish", **COMMON)
def publish():
    NSQPublishOperator(
        task_id="pub", topic=PUBLISH_TOPIC, message={"event": "done"}, asset_outlet=NSQD
    )
    NSQDeferredPublishOperator(task_id="dpub", topic=PUBLISH_TOPIC, message="later", delay=0)
    NSQMultiPublishOperator(task_id="mpub", topic=PUBLISH_TOPIC, messages=["a", "bb", "ccc"])


@dag(dag_id="nsq_prod_publish_error", **COMMON)
def publish_error():
    # nsq_down: a closed port on 127.0.0.1
    NSQPublishOperator(task_id="pub", topic=PUBLISH_TOPIC, message="x", nsq_conn_id="nsq_down")


@dag(
    dag_id="nsq_prod_downstream",
    schedule=[nsq_asset(PUBLISH_TOPIC, address=NSQD)],
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
)
def downstream():
    @task
    def consume(triggering_asset_events: Any = None) -> list[str]:
        return sorted(asset.uri for asset in triggering_asset_events)

    consume()


@dag(dag_id="nsq_prod_sensor", **COMMON)
def sensor():
    NSQSensor(
        task_id="wait",
        topic=SENSOR_TOPIC,
        channel="etl",
        min_messages=2,
        max_messages=10,
        window_timeout=2,
        poke_interval=1,
        timeout=60,
    )


@dag(dag_id="nsq_prod_reschedule", **COMMON)
def reschedule():
    NSQSensor(
        task_id="wait",
        topic=RESCHEDULE_TOPIC,
        channel="etl",
        nsq_conn_id="nsq_tcp_only",  # no HTTP port: every check is a window
        mode="reschedule",
        min_messages=2,
        window_timeout=1,
        # Pauses of 20 s, 40 s ...: well beyond the ~5 s (more under load) LocalExecutor
        # takes to report a finished poke; a reschedule due sooner races that report,
        # and Airflow fails the task ("task instance's state attribute is running").
        poke_interval=5,
        timeout=RESCHEDULE_TIMEOUT_S,
        soft_fail=True,
    )


events = nsq_asset(
    EVENTS_TOPIC,
    address=NSQD,
    name="nsq_prod_events",
    watchers=[
        AssetWatcher(
            name="nsq_prod_events_watcher",
            trigger=MessageQueueTrigger(
                scheme="nsq",
                topic=EVENTS_TOPIC,
                channel="airflow",
                batch_size=10,
                batch_timeout=1.0,
                min_event_interval=0,
            ),
        )
    ],
)


@dag(dag_id="nsq_prod_events", schedule=[events], start_date=datetime.datetime(2024, 1, 1))
def event_driven():
    @task(inlets=[events])
    def process(triggering_asset_events: Any = None) -> int:
        return sum(
            len(event.extra.get("payload", {}).get("messages", []))
            for event in triggering_asset_events[events]
        )

    link_to_nsqadmin(process())


def apply_or_fail(record: dict) -> None:
    """The consume task's function: the body ``poison`` always fails."""
    if record["body"] == "poison":
        raise ValueError("poison")


@dag(dag_id="nsq_prod_consume", **COMMON)
def consume():
    NSQConsumeOperator(
        task_id="apply",
        topic=CONSUME_TOPIC,
        channel="apply",
        apply_function=apply_or_fail,
        max_attempts=2,
        requeue_delay=0,
        dead_letter_topic=f"{CONSUME_TOPIC}_dead",
        idle_timeout=2,
    )


publish()
publish_error()
downstream()
sensor()
reschedule()
event_driven()
consume()
