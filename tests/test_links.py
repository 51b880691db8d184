"""The nsqadmin links: the URL of a topic's (and channel's) page, which task gets which,
and that a link that cannot be made is empty instead of an error. In a real Airflow,
through the API server and in a browser: tests/e2e/test_production_e2e.py."""

from __future__ import annotations

import datetime

import pytest
from airflow.sdk import AssetWatcher, dag, task

from airflow_provider_nsq.links import (
    NSQAdminChannelLink,
    NSQAdminTopicLink,
    link_to_nsqadmin,
    nsqadmin_page,
    watched_channels,
)
from airflow_provider_nsq.operators.nsq import NSQDeferredPublishOperator, NSQPublishOperator
from airflow_provider_nsq.sensors.nsq import NSQSensor
from airflow_provider_nsq.triggers.nsq_event import NSQEventTrigger

ADMIN = "https://nsqadmin.example.com:4171/nsq"


@pytest.fixture
def admin_conn(monkeypatch) -> str:
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_ADMIN",
        "nsq://nsqd:4150?nsqadmin_url=https%3A%2F%2Fnsqadmin.example.com%3A4171%2Fnsq%2F",
    )
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_PLAIN", "nsq://nsqd:4150")
    return "nsq_admin"


def test_pages_follow_nsqadmins_routes_under_its_base_path():
    assert nsqadmin_page(ADMIN + "/", "orders") == f"{ADMIN}/topics/orders"
    assert nsqadmin_page(ADMIN, "orders", "etl") == f"{ADMIN}/topics/orders/etl"
    # '#ephemeral' would be a fragment unescaped
    assert nsqadmin_page(ADMIN, "orders", "tmp#ephemeral").endswith("/orders/tmp%23ephemeral")


def test_publish_operators_link_their_topic_and_the_sensor_its_channel(admin_conn):
    pub = NSQPublishOperator(task_id="pub", topic="orders", message="x", nsq_conn_id=admin_conn)
    dpub = NSQDeferredPublishOperator(
        task_id="dpub", topic="orders", message="x", delay=5, nsq_conn_id=admin_conn
    )
    sensor = NSQSensor(task_id="wait", topic="orders", channel="etl", nsq_conn_id=admin_conn)
    for op in (pub, dpub):
        assert [link.name for link in op.operator_extra_links] == ["nsqadmin: topic"]
        assert NSQAdminTopicLink().get_link(op, ti_key=None) == f"{ADMIN}/topics/orders"
    assert [link.name for link in sensor.operator_extra_links] == ["nsqadmin: channel"]
    assert NSQAdminChannelLink().get_link(sensor, ti_key=None) == f"{ADMIN}/topics/orders/etl"


def test_no_link_without_nsqadmin_url_or_a_readable_connection_or_a_rendered_topic(
    admin_conn, caplog
):
    plain = NSQPublishOperator(task_id="a", topic="orders", message="x", nsq_conn_id="nsq_plain")
    missing = NSQPublishOperator(task_id="b", topic="orders", message="x", nsq_conn_id="nsq_gone")
    unrendered = NSQPublishOperator(
        task_id="c", topic="{{ params.t }}", message="x", nsq_conn_id=admin_conn
    )
    for op in (plain, missing, unrendered):
        assert NSQAdminTopicLink().get_link(op, ti_key=None) == ""  # never raises
    assert "nsq_gone" in caplog.text


def _event_dag(admin_conn: str, trigger):
    from airflow_provider_nsq.assets import nsq_asset

    orders = nsq_asset(
        "orders",
        address="nsqd:4150",
        name="orders",
        watchers=[AssetWatcher(name="orders_watcher", trigger=trigger)],
    )

    @dag(schedule=[orders], start_date=datetime.datetime(2024, 1, 1))
    def event_driven():
        @task
        def process() -> None:
            pass

        link_to_nsqadmin(link_to_nsqadmin(process()))  # twice: one link

    return event_driven()


@pytest.mark.parametrize("via", ["MessageQueueTrigger", "NSQEventTrigger"])
def test_a_task_of_an_event_driven_dag_links_to_the_watched_channel(admin_conn, via):
    kwargs = {"topic": "orders", "channel": "airflow", "nsq_conn_id": admin_conn}
    if via == "MessageQueueTrigger":
        messaging = pytest.importorskip(
            "airflow.providers.common.messaging.triggers.msg_queue",
            reason="needs the messaging extra",
        )
        trigger = messaging.MessageQueueTrigger(scheme="nsq", **kwargs)
    else:
        trigger = NSQEventTrigger(**kwargs)
    event_dag = _event_dag(admin_conn, trigger)
    assert list(watched_channels(event_dag)) == [(admin_conn, "orders", "airflow")]
    process = event_dag.get_task("process")
    assert [link.name for link in process.operator_extra_links] == ["nsqadmin: channel"]
    assert NSQAdminChannelLink().get_link(process, ti_key=None) == f"{ADMIN}/topics/orders/airflow"


def test_the_links_are_registered_with_airflow():
    from airflow.providers_manager import ProvidersManager

    names = ProvidersManager().extra_links_class_names
    assert {
        "airflow_provider_nsq.links.NSQAdminTopicLink",
        "airflow_provider_nsq.links.NSQAdminChannelLink",
    } <= set(names)
