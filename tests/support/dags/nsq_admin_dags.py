"""A DAG that administers a topic and a channel with the admin operators, each step's
per-nsqd result in XCom; topic, channel and nsqd come from params (templated)."""

from __future__ import annotations

import datetime

from airflow.sdk import chain, dag

from airflow_provider_nsq.operators.nsq_admin import (
    NSQCreateChannelOperator,
    NSQCreateTopicOperator,
    NSQDeleteChannelOperator,
    NSQDeleteTopicOperator,
    NSQEmptyChannelOperator,
    NSQEmptyTopicOperator,
    NSQPauseChannelOperator,
    NSQPauseTopicOperator,
    NSQUnpauseChannelOperator,
    NSQUnpauseTopicOperator,
)


@dag(
    dag_id="nsq_admin_lifecycle",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "nsq_admin_test", "channel": "etl", "nsqd": ""},
    default_args={"retries": 0},
)
def admin_lifecycle():
    topic, channel, nsqd = "{{ params.topic }}", "{{ params.channel }}", "{{ params.nsqd }}"
    on_topic = {"topic": topic, "nsqd": nsqd}
    on_channel = {**on_topic, "channel": channel}
    chain(
        NSQCreateTopicOperator(task_id="create_topic", **on_topic),
        NSQCreateChannelOperator(task_id="create_channel", **on_channel),
        NSQCreateChannelOperator(task_id="create_channel_again", **on_channel),
        NSQPauseTopicOperator(task_id="pause_topic", **on_topic),
        NSQEmptyTopicOperator(task_id="empty_topic", **on_topic),
        NSQUnpauseTopicOperator(task_id="unpause_topic", **on_topic),
        NSQPauseChannelOperator(task_id="pause_channel", **on_channel),
        NSQUnpauseChannelOperator(task_id="unpause_channel", **on_channel),
        NSQEmptyChannelOperator(task_id="empty_channel", **on_channel),
        NSQDeleteChannelOperator(task_id="delete_channel", **on_channel),
        NSQDeleteTopicOperator(task_id="delete_topic", **on_topic),
        NSQDeleteTopicOperator(task_id="delete_topic_again", **on_topic),
    )


@dag(
    dag_id="nsq_admin_strict",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "nsq_admin_test"},
    default_args={"retries": 0},
)
def admin_strict():
    NSQCreateTopicOperator(task_id="create", topic="{{ params.topic }}", fail_if_exists=True)


admin_lifecycle()
admin_strict()
