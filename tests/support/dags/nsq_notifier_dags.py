"""A DAG whose task fails, with ``NSQNotifier`` as its failure callback (as a user
writes it: topic ``alerts``, the task's id in the message), and a success callback that
sends a dict, rendered with the callback's context, to a topic from params."""

from __future__ import annotations

import datetime

from airflow.sdk import dag, task

from airflow_provider_nsq.notifications.nsq import NSQNotifier, send_nsq_notification


@dag(
    dag_id="nsq_notifier_failure",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "nsq_notifier_test"},
    default_args={"retries": 0},
)
def notifier_failure():
    @task(on_failure_callback=NSQNotifier(topic="alerts", message="{{ ti.task_id }} failed"))
    def load_orders():
        raise RuntimeError("the warehouse is down")

    @task(
        on_success_callback=send_nsq_notification(
            topic="{{ params.topic }}",
            message={"task": "{{ ti.task_id }}", "run_id": "{{ run_id }}", "state": "success"},
        )
    )
    def report():
        return "done"

    load_orders()
    report()


notifier_failure()
