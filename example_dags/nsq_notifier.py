"""Tell the rest of the company, on NSQ, when a task fails or a DAG run succeeds:
``NSQNotifier`` in callbacks, the message rendered with the callback's context.

Needs: the provider (no extra) and the ``nsq_default`` connection::

    export AIRFLOW_CONN_NSQ_DEFAULT='nsq://nsqd.example.com:4150'

Subscribe to ``alerts`` (any consumer, e.g. ``nsq_tail --topic alerts``) and run the DAG:
``load_orders`` fails and one message, ``load_orders failed``, arrives; the run's
summary goes to ``pipeline.events`` as JSON.
"""

from __future__ import annotations

import datetime

from airflow.sdk import dag, task

from airflow_provider_nsq.notifications.nsq import NSQNotifier


@dag(
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    default_args={
        "retries": 0,
        # Every task of the DAG: one message naming the task that failed.
        "on_failure_callback": NSQNotifier(topic="alerts", message="{{ ti.task_id }} failed"),
    },
    # The DAG run: a JSON message (a dict is sent as JSON, each value rendered).
    on_success_callback=NSQNotifier(
        topic="pipeline.events",
        message={"dag_id": "{{ dag.dag_id }}", "run_id": "{{ run_id }}", "state": "success"},
    ),
    tags=["nsq", "example"],
)
def nsq_notifier():
    @task
    def load_orders():
        raise RuntimeError("the warehouse is down")

    @task
    def report():
        return "done"

    load_orders()
    report()


nsq_notifier()
