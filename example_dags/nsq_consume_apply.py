"""Consume order events from NSQ and apply a function to each one: FIN after it
returned, REQ (with a growing delay) when it raised, and after ``max_attempts``
deliveries the message goes to a dead-letter topic instead of coming back forever.

Needs: the provider, no extra (``pip install .`` from a checkout); an nsqd (the
embedded one will do: ``python -m airflow_provider_nsq.testing.broker``) and the
``nsq_default`` connection to it, its TCP port and its HTTP port::

    export AIRFLOW_CONN_NSQ_DEFAULT='nsq://nsqd.example.com:4150?http_port=4151'

Publish a few orders (``{"order_id": 1, "amount": 10}``) to the topic, then run the DAG:
the task returns a summary (counts) to XCom; what could not be applied is on
``<topic>_dead``, each in an envelope with the error (docs/consume.md).
"""

from __future__ import annotations

import datetime
import json
import logging

from airflow.sdk import dag

from airflow_provider_nsq.operators.nsq_consume import NSQConsumeOperator

log = logging.getLogger(__name__)


def apply_order(record: dict, *, currency: str) -> None:
    """Stand-in for real work (load into a table, call an API). Raising hands the message
    back to nsqd; returning finishes it."""
    order = json.loads(record["body"])  # raises on a body that is not JSON
    log.info("order %s: %s %s", order["order_id"], order["amount"], currency)


@dag(
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "orders", "dead_letter_topic": "orders_dead", "max_attempts": 5},
    tags=["nsq", "example"],
)
def nsq_consume_apply():
    NSQConsumeOperator(
        task_id="apply_orders",
        topic="{{ params.topic }}",
        channel="warehouse",
        apply_function=apply_order,
        apply_function_kwargs={"currency": "EUR"},
        max_messages=500,  # at most this many per run ...
        idle_timeout=datetime.timedelta(seconds=5),  # ... or until 5 s pass with nothing new
        max_attempts="{{ params.max_attempts }}",
        requeue_delay=datetime.timedelta(seconds=1),  # 1 s, 2 s, 4 s ... per delivery
        dead_letter_topic="{{ params.dead_letter_topic }}",
        execution_timeout=datetime.timedelta(minutes=10),
    )


nsq_consume_apply()
