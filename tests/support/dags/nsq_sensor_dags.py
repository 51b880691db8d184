"""DAGs the Airflow-layer tests run with ``dag.test()``: an NSQSensor (poke or
deferrable) feeding a downstream task that returns what it received, and a publish
operator upstream of one.

Topic and channel come from params, so each test run uses its own topic.
"""

from __future__ import annotations

import datetime

from airflow.sdk import dag, task

from airflow_provider_nsq.operators.nsq import NSQPublishOperator
from airflow_provider_nsq.sensors.nsq import NSQSensor


def keep(record: dict) -> bool:
    """The poke DAG's message_filter: drop bodies starting with "skip"."""
    return not record["body"].startswith("skip")


def _sensor_dag(dag_id: str, *, deferrable: bool, min_messages: int, max_messages: int):
    @dag(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime.datetime(2024, 1, 1),
        catchup=False,
        params={"topic": "nsq_sensor_test", "channel": "sensor"},
        default_args={"retries": 0},
    )
    def sensor_dag():
        messages = NSQSensor(
            task_id="wait_for_messages",
            topic="{{ params.topic }}",
            channel="{{ params.channel }}",
            min_messages=min_messages,
            max_messages=max_messages,
            window_timeout=datetime.timedelta(seconds=3),
            message_filter=keep,
            poke_interval=0.2,
            timeout=60,
            deferrable=deferrable,
        )

        @task
        def received(records: list[dict]) -> list[dict]:
            return records

        received(messages.output)

    return sensor_dag()


poke_dag = _sensor_dag("nsq_sensor_poke", deferrable=False, min_messages=2, max_messages=3)
deferrable_dag = _sensor_dag(
    "nsq_sensor_deferrable", deferrable=True, min_messages=2, max_messages=2
)


#: The issue-9 scenario: three messages wanted, one on the channel, a short timeout.
WAIT_TIMEOUT_S = 8
WAIT_WINDOW_S = 2


def _waiting_dag(dag_id: str, *, deferrable: bool):
    @dag(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime.datetime(2024, 1, 1),
        catchup=False,
        params={"topic": "nsq_sensor_test", "channel": "sensor"},
        default_args={"retries": 0},
    )
    def waiting_dag():
        messages = NSQSensor(
            task_id="wait_for_messages",
            topic="{{ params.topic }}",
            channel="{{ params.channel }}",
            min_messages=3,
            max_messages=10,
            window_timeout=datetime.timedelta(seconds=WAIT_WINDOW_S),
            poke_interval=1,
            timeout=WAIT_TIMEOUT_S,
            deferrable=deferrable,
        )

        @task
        def received(records: list[dict]) -> list[dict]:
            return records

        received(messages.output)

    return waiting_dag()


wait_poke_dag = _waiting_dag("nsq_sensor_wait_poke", deferrable=False)
wait_deferrable_dag = _waiting_dag("nsq_sensor_wait_deferrable", deferrable=True)


@dag(
    dag_id="nsq_publish_and_wait",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "nsq_sensor_test", "channel": "sensor"},
    default_args={"retries": 0},
)
def publish_and_wait_dag():
    """The README's shape: publish, wait for it on a channel, hand it downstream."""
    publish = NSQPublishOperator(
        task_id="publish",
        topic="{{ params.topic }}",
        message={"order": "{{ run_id }}"},
    )
    messages = NSQSensor(
        task_id="wait_for_messages",
        topic="{{ params.topic }}",
        channel="{{ params.channel }}",
        min_messages=1,
        window_timeout=datetime.timedelta(seconds=3),
        poke_interval=0.2,
        timeout=60,
    )

    @task
    def received(records: list[dict]) -> list[dict]:
        return records

    publish >> messages
    received(messages.output)


publish_and_wait = publish_and_wait_dag()


@dag(
    dag_id="nsq_sensor_templated",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "nsq_sensor_test", "channel": "sensor", "min": 2, "max": 3, "window": 1.5},
    default_args={"retries": 0},
)
def templated_sensor_dag():
    """The window's sizes from params, rendered when the task runs."""
    messages = NSQSensor(
        task_id="wait_for_messages",
        topic="{{ params.topic }}",
        channel="{{ params.channel }}",
        min_messages="{{ params.min }}",
        max_messages="{{ params.max }}",
        window_timeout="{{ params.window }}",
        poke_interval=0.2,
        timeout=30,
    )

    @task
    def received(records: list[dict]) -> list[dict]:
        return records

    received(messages.output)


templated_sensor = templated_sensor_dag()
