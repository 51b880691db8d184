"""Event-driven: messages on an NSQ topic become asset events, and asset events start
this DAG; no sensor holds a worker slot while nothing happens.

Needs: the provider's ``[messaging]`` extra (Airflow's common.messaging provider:
``pip install ".[messaging]"`` from a checkout), Airflow 3.3 for a message to be
FINished only after its event is stored (3.0-3.2 are weaker, docs/event-driven.md), a
running triggerer (``airflow triggerer``, which holds the subscription), an nsqd and the
``nsq_default`` connection to it (below).

The asset is watched through the provider-neutral ``MessageQueueTrigger`` with the
``nsq`` scheme (the ``[messaging]`` extra). The triggerer keeps
one subscription on ``orders``/``airflow`` and groups what arrives: one asset event
carries up to ``batch_size`` messages collected for up to ``batch_timeout`` seconds, so a
burst becomes one event (one database row) and one DAG run. On Airflow >= 3.3 a message
is FINished only after its event is stored (docs/event-driven.md).

Each run gets the events stored since the previous run in ``triggering_asset_events``;
each event's ``extra["payload"]["messages"]`` lists its messages (``body``,
``body_encoding``, ``id``, ``attempts``, ``timestamp``, ``topic``, ``channel``,
``nsqd``). The run processes every message of every event it got. Delivery is
at-least-once, so it drops repeats of an ``(nsqd, id)`` it has already seen in the same
run (use a table keyed by it to de-duplicate across runs), then publishes one result per
message to ``order_results``.

The asset is the topic's, ``nsq://host:port/orders``, where ``host:port`` is the NSQ
cluster's address as the connection names it (its first nsqlookupd, else its nsqd),
written in this file: a DAG file's top-level code reads no connection, so the DAG parses
where ``nsq_default`` is not defined (the triggerer and the workers read it when they
run). ``process`` declares the asset as its inlet, its OpenLineage input, and links to
the channel's page in nsqadmin when the connection has an ``nsqadmin_url``
(docs/operations.md).

Set up the ``nsq_default`` connection first, for example::

    export AIRFLOW_CONN_NSQ_DEFAULT='nsq://nsqd.example.com:4150?http_port=4151'

The cluster's address and the topic names can be changed with ``NSQ_CLUSTER``,
``NSQ_EVENTS_TOPIC`` and ``NSQ_RESULTS_TOPIC`` in the environment of the DAG processor
and workers (the end-to-end test does).
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import AssetWatcher, dag, task

from airflow_provider_nsq.assets import nsq_asset
from airflow_provider_nsq.client.message import decode_record_body
from airflow_provider_nsq.links import link_to_nsqadmin
from airflow_provider_nsq.operators.nsq import NSQMultiPublishOperator

# The address nsq_default names (nsq://nsqd.example.com:4150 above): the asset's URI.
NSQ_CLUSTER = os.environ.get("NSQ_CLUSTER", "nsqd.example.com:4150")
EVENTS_TOPIC = os.environ.get("NSQ_EVENTS_TOPIC", "orders")
RESULTS_TOPIC = os.environ.get("NSQ_RESULTS_TOPIC", "order_results")

orders = nsq_asset(
    EVENTS_TOPIC,
    address=NSQ_CLUSTER,
    name="nsq_orders",
    watchers=[
        AssetWatcher(
            name="nsq_orders_watcher",
            trigger=MessageQueueTrigger(
                scheme="nsq",
                topic=EVENTS_TOPIC,
                # A durable channel: messages published while no triggerer runs wait on it.
                channel="airflow",
                # One event per burst: up to 1000 messages, collected for up to 2 s after
                # the first; events at least min_event_interval (5 s) apart. The defaults.
                batch_size=1000,
                batch_timeout=2.0,
            ),
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
    @task(inlets=[orders])
    def process(triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """One result per message of this run (stand-in for real work)."""
        seen: set[tuple[str, str]] = set()
        results = []
        for event in triggering_asset_events[orders]:
            # An asset event created by hand (to release waiting ones) has no messages.
            for record in event.extra.get("payload", {}).get("messages", []):
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

    results = link_to_nsqadmin(process())
    NSQMultiPublishOperator(task_id="publish_results", topic=RESULTS_TOPIC, messages=results)


nsq_event_driven()
