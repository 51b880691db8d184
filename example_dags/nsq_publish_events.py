"""Publish pipeline events to NSQ: one event (PUB), a delayed follow-up (DPUB) and a
batch built by an upstream task (MPUB).

Needs: the provider, no extra (``pip install .`` from a checkout); an nsqd (the
embedded one will do: ``python -m airflow_provider_nsq.testing.broker``) and the
``nsq_default`` connection to it, its TCP port and its HTTP port::

    export AIRFLOW_CONN_NSQ_DEFAULT='nsq://nsqd.example.com:4150?http_port=4151'

Consumers on the topic then see, per run: ``{"event": "started", ...}`` at once, one
``{"event": "row_count", ...}`` per table, and ``{"event": "check_results", ...}`` after
``check_delay_ms`` milliseconds.
"""

from __future__ import annotations

import datetime

from airflow.sdk import dag, task

from airflow_provider_nsq.operators.nsq import (
    NSQDeferredPublishOperator,
    NSQMultiPublishOperator,
    NSQPublishOperator,
)


@dag(
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "pipeline_events", "check_delay_ms": 60_000},
    tags=["nsq", "example"],
)
def nsq_publish_events():
    started = NSQPublishOperator(
        task_id="publish_started",
        topic="{{ params.topic }}",
        message={"event": "started", "run_id": "{{ run_id }}"},
    )

    # Delivered by nsqd check_delay_ms after it is published (DPUB, at most 1 h).
    check_later = NSQDeferredPublishOperator(
        task_id="publish_check_results",
        topic="{{ params.topic }}",
        message={"event": "check_results", "run_id": "{{ run_id }}"},
        delay="{{ params.check_delay_ms }}",
    )

    @task
    def row_counts() -> list[dict]:
        # Stand-in for real work: one event per table loaded by this run.
        return [
            {"event": "row_count", "table": table, "rows": rows}
            for table, rows in (("orders", 1200), ("customers", 85), ("refunds", 7))
        ]

    # messages= takes the upstream task's output; it is resolved when the task runs.
    batch = NSQMultiPublishOperator(
        task_id="publish_row_counts",
        topic="{{ params.topic }}",
        messages=row_counts(),
    )

    started >> [check_later, batch]


nsq_publish_events()
