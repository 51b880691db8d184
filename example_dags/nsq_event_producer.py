"""Airflow's own events out to NSQ: with the event producer turned on, every state change
of this DAG's runs and tasks is one JSON message on a topic; another system (or another
Airflow) starts its work when ``publish_report`` succeeds.

The DAG itself needs nothing: the event producer is configured in Airflow's
configuration (``[nsq_event_producer]``), for the scheduler and the workers::

    export AIRFLOW__NSQ_EVENT_PRODUCER__DAG_RUN_EVENTS=True
    export AIRFLOW__NSQ_EVENT_PRODUCER__TASK_INSTANCE_EVENTS=True
    export AIRFLOW__NSQ_EVENT_PRODUCER__TOPIC=airflow.events
    export AIRFLOW__NSQ_EVENT_PRODUCER__DAG_IDS=nsq_event_producer
    export AIRFLOW_CONN_NSQ_DEFAULT='nsq://nsqd.example.com:4150'

Each message: ``{"kind": "task_instance", "state": "success", "dag_id":
"nsq_event_producer", "run_id": ..., "task_id": "publish_report", "map_index": -1,
"try_number": 1, "logical_date": ..., "start_date": ..., "end_date": ..., "source":
"airflow"}`` (docs/event-producer.md).
"""

from __future__ import annotations

import datetime

from airflow.sdk import dag, task


@dag(
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    tags=["nsq", "example"],
)
def nsq_event_producer():
    @task
    def build_report() -> dict:
        return {"rows": 42}

    @task
    def publish_report(report: dict) -> None:
        print("report ready:", report)  # its success is the event others wait for

    publish_report(build_report())


nsq_event_producer()
