"""The DAGs tests/e2e/test_high_availability_e2e.py runs on an Airflow with two
schedulers and two triggerers: an event-driven DAG on a watched asset, and deferrable
sensors (one checking nsqd's HTTP API, one peeking over TCP, one that times out).

Topics and timings come from the environment the test sets (``NSQ_HA_*``).
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import AssetWatcher, dag, task

from airflow_provider_nsq.assets import nsq_asset
from airflow_provider_nsq.sensors.nsq import NSQSensor

#: The NSQ cluster as the connection names it: the asset's address.
NSQD = os.environ["NSQ_HA_NSQD"]
EVENTS_TOPIC = os.environ["NSQ_HA_EVENTS_TOPIC"]
SENSOR_TOPIC = os.environ["NSQ_HA_SENSOR_TOPIC"]
PEEK_TOPIC = os.environ["NSQ_HA_PEEK_TOPIC"]
QUIET_TOPIC = os.environ["NSQ_HA_QUIET_TOPIC"]
BATCH_SIZE = int(os.environ["NSQ_HA_BATCH_SIZE"])
SENSOR_MESSAGES = int(os.environ["NSQ_HA_SENSOR_MESSAGES"])
SENSOR_TIMEOUT_S = int(os.environ["NSQ_HA_SENSOR_TIMEOUT_S"])
QUIET_TIMEOUT_S = int(os.environ["NSQ_HA_QUIET_TIMEOUT_S"])

#: A task killed with its scheduler (LocalExecutor runs it there) is tried again.
RETRIES = {"retries": 2, "retry_delay": datetime.timedelta(seconds=2)}

events = nsq_asset(
    EVENTS_TOPIC,
    address=NSQD,
    name="nsq_ha_events",
    watchers=[
        AssetWatcher(
            name="nsq_ha_events_watcher",
            trigger=MessageQueueTrigger(
                scheme="nsq",
                topic=EVENTS_TOPIC,
                channel="airflow",
                # A burst becomes several events (each its own DAG run), the default
                # 5 s apart: the connection sets no msg_timeout_ms, so the trigger asks
                # nsqd for its own short one.
                batch_size=BATCH_SIZE,
            ),
        )
    ],
)


@dag(
    dag_id="nsq_ha_events",
    schedule=[events],
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    default_args=RETRIES,
)
def event_driven():
    @task(inlets=[events])
    def process(triggering_asset_events: Any = None) -> int:
        return sum(
            len(event.extra.get("payload", {}).get("messages", []))
            for event in triggering_asset_events[events]
        )

    process()


def _sensor_dag(dag_id: str, **sensor: Any):
    @dag(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime.datetime(2024, 1, 1),
        catchup=False,
        default_args=RETRIES,
    )
    def sensor_dag():
        NSQSensor(task_id="wait", channel="etl", deferrable=True, poke_interval=2, **sensor)

    return sensor_dag()


# nsqd's HTTP API: the checks take nothing.
_sensor_dag(
    "nsq_ha_sensor",
    topic=SENSOR_TOPIC,
    min_messages=SENSOR_MESSAGES,
    max_messages=SENSOR_MESSAGES,
    timeout=SENSOR_TIMEOUT_S,
)
# No HTTP API: each check is a TCP peek that holds what it sees (TOUCHed) until it has
# min_messages or the peek ends.
_sensor_dag(
    "nsq_ha_peek",
    topic=PEEK_TOPIC,
    nsq_conn_id="nsq_tcp_only",
    min_messages=SENSOR_MESSAGES,
    max_messages=SENSOR_MESSAGES,
    timeout=SENSOR_TIMEOUT_S,
)
# Nothing is ever published: it times out, and soft_fail makes that "skipped".
_sensor_dag(
    "nsq_ha_quiet",
    topic=QUIET_TOPIC,
    min_messages=1,
    timeout=QUIET_TIMEOUT_S,
    soft_fail=True,
)

event_driven()
