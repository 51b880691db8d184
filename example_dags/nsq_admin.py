"""Set up a topic and its channel before a pipeline runs, and tidy up after: the admin
operators act on every nsqd of the topic (through nsqlookupd when the connection names
one, as nsqadmin does), or on the one ``nsqd`` names, and each returns what happened on
each nsqd to XCom.

Needs: the provider (no extra) and the ``nsq_default`` connection with nsqd's HTTP port
(or ``lookupd_http_addresses``)::

    export AIRFLOW_CONN_NSQ_DEFAULT='nsq://nsqd.example.com:4150?http_port=4151'

Run it with ``params.retire=true`` to delete the channel (and its messages) at the end.
"""

from __future__ import annotations

import datetime

from airflow.sdk import dag, task

from airflow_provider_nsq.operators.nsq_admin import (
    NSQCreateChannelOperator,
    NSQCreateTopicOperator,
    NSQDeleteChannelOperator,
    NSQEmptyChannelOperator,
    NSQPauseChannelOperator,
    NSQUnpauseChannelOperator,
)


@dag(
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "orders", "channel": "warehouse", "retire": False},
    tags=["nsq", "example"],
)
def nsq_admin():
    topic, channel = "{{ params.topic }}", "{{ params.channel }}"
    create_topic = NSQCreateTopicOperator(task_id="create_topic", topic=topic)
    # From now on every message published to the topic waits on the channel.
    create_channel = NSQCreateChannelOperator(
        task_id="create_channel", topic=topic, channel=channel
    )
    # Hold deliveries while the warehouse is loaded by someone else ...
    pause = NSQPauseChannelOperator(task_id="pause", topic=topic, channel=channel)

    @task
    def maintenance(paused: dict) -> None:
        print("paused on", sorted(paused["nsqds"]))  # {"host:http_port": "paused", ...}

    # ... then deliver again.
    unpause = NSQUnpauseChannelOperator(task_id="unpause", topic=topic, channel=channel)

    @task.short_circuit
    def retiring(params: dict | None = None) -> bool:
        return bool(params and params["retire"])

    # Drop what waits, then the channel itself, only when asked to.
    empty = NSQEmptyChannelOperator(task_id="empty", topic=topic, channel=channel)
    delete = NSQDeleteChannelOperator(task_id="delete", topic=topic, channel=channel)

    create_topic >> create_channel >> pause
    maintenance(pause.output) >> unpause
    unpause >> retiring() >> empty >> delete


nsq_admin()
