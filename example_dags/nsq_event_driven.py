"""Event-driven: every message on an NSQ topic becomes an asset event, and asset events
start this DAG; no sensor holds a worker slot while nothing happens.

The asset is watched through the provider-neutral ``MessageQueueTrigger`` with the
``nsq`` scheme (``pip install 'airflow-provider-nsq[messaging]'``). The triggerer keeps
one subscription on ``orders``/``airflow`` and, on Airflow >= 3.3, FINishes a message only
after its asset event is stored (docs/event-driven.md). Each run gets the events stored
since the previous run in ``triggering_asset_events``; their ``extra["payload"]`` is the
message: ``body``, ``body_encoding``, ``id``, ``attempts``, ``timestamp``, ``topic``,
``channel``, ``nsqd``. Delivery is at-least-once, so the run drops repeats of an
``(nsqd, id)`` it has already seen in the same batch (use a table keyed by it to
de-duplicate across runs), then publishes one result per message to ``order_results``.

Set up the ``nsq_default`` connection first, for example::

    export AIRFLOW_CONN_NSQ_DEFAULT='nsq://nsqd.example.com:4150'

The topic names can be changed with ``NSQ_EVENTS_TOPIC`` / ``NSQ_RESULTS_TOPIC`` in the
environment of the DAG processor and workers (the end-to-end test does).
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import Asset, AssetWatcher, dag, task

from airflow_provider_nsq.client.records import decode_record_body
from airflow_provider_nsq.operators.nsq import NSQMultiPublishOperator

EVENTS_TOPIC = os.environ.get("NSQ_EVENTS_TOPIC", "orders")
RESULTS_TOPIC = os.environ.get("NSQ_RESULTS_TOPIC", "order_results")

orders = Asset(
    "nsq_orders",
    watchers=[
        AssetWatcher(
            name="nsq_orders_watcher",
            # A durable channel: messages published while no triggerer runs wait on it.
            trigger=MessageQueueTrigger(scheme="nsq", topic=EVENTS_TOPIC, channel="airflow"),
        )
    ],
)


@dag(
    schedule=[orders],
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    tags=["nsq", "example", "event-driven"],
)
def nsq_event_driven():
    @task
    def process(triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """One result per message of this run (stand-in for real work)."""
        seen: set[tuple[str, str]] = set()
        results = []
        for event in triggering_asset_events[orders]:
            record = event.extra["payload"]
            key = (record["nsqd"], record["id"])
            if key in seen:  # a redelivery of a message this run already has
                continue
            seen.add(key)
            results.append(
                {
                    "nsqd": record["nsqd"],
                    "id": record["id"],
                    "attempts": record["attempts"],
                    "bytes": len(decode_record_body(record)),
                }
            )
        return results

    NSQMultiPublishOperator(task_id="publish_results", topic=RESULTS_TOPIC, messages=process())


nsq_event_driven()
