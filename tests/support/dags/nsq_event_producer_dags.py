"""A small DAG for the event producer tests: two tasks, one after the other."""

from __future__ import annotations

import datetime

from airflow.sdk import dag, task


@dag(
    dag_id="nsq_event_producer_small",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    default_args={"retries": 0},
)
def small():
    @task
    def extract():
        return 1

    @task
    def load(value):
        return value + 1

    load(extract())


small()
