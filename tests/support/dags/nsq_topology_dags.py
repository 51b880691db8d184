"""DAGs for the topology tests: an NSQSensor reading a topic spread over several nsqds
(the connection names nsqlookupd or several nsqds), feeding a task that returns what it
received. Topic, channel and the counts come from params."""

from __future__ import annotations

import datetime

from airflow.sdk import dag, task

from airflow_provider_nsq.sensors.nsq import NSQSensor


def _topology_dag(dag_id: str, *, deferrable: bool):
    @dag(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime.datetime(2024, 1, 1),
        catchup=False,
        params={"topic": "nsq_topology_test", "channel": "sensor"},
        default_args={"retries": 0},
    )
    def topology_dag():
        messages = NSQSensor(
            task_id="wait_for_messages",
            topic="{{ params.topic }}",
            channel="{{ params.channel }}",
            min_messages=6,
            max_messages=50,
            window_timeout=datetime.timedelta(seconds=3),
            poke_interval=0.2,
            timeout=60,
            deferrable=deferrable,
        )

        @task
        def received(records: list[dict]) -> list[dict]:
            return records

        received(messages.output)

    return topology_dag()


poke_dag = _topology_dag("nsq_topology_poke", deferrable=False)
deferrable_dag = _topology_dag("nsq_topology_deferrable", deferrable=True)
