"""The ``nsq`` scheme of the common-messaging provider: registration and dispatch."""

from __future__ import annotations

import importlib
import sys

import pytest

from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.queues.nsq import NSQMessageQueueProvider, parse_queue_uri
from airflow_provider_nsq.triggers.nsq_event import NSQEventTrigger
from tests.support.airflow_runs import airflow_cli_json
from tests.support.marks import unraisable_is_an_error

pytestmark = unraisable_is_an_error

PROVIDER = "airflow_provider_nsq.queues.nsq.NSQMessageQueueProvider"


def test_airflow_providers_queues_lists_the_nsq_provider(airflow_home):
    queues = airflow_cli_json(airflow_home, "providers", "queues")
    assert {"queue_class_names": PROVIDER} in queues


def test_message_queue_trigger_with_the_nsq_scheme_is_an_nsq_event_trigger():
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    trigger = MessageQueueTrigger(
        scheme="nsq", topic="orders", channel="airflow", nsq_conn_id="nsq_events"
    )
    classpath, kwargs = trigger.serialize()
    # What the triggerer stores and runs is the NSQ trigger itself (ack mode included).
    assert classpath == "airflow_provider_nsq.triggers.nsq_event.NSQEventTrigger"
    assert (kwargs["topic"], kwargs["channel"], kwargs["nsq_conn_id"]) == (
        "orders",
        "airflow",
        "nsq_events",
    )
    assert isinstance(trigger.trigger, NSQEventTrigger)


def test_the_deprecated_queue_uri_form_still_works():
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    with pytest.warns(DeprecationWarning):
        trigger = MessageQueueTrigger(queue="nsq://nsqd:4150/orders?channel=airflow")
    _, kwargs = trigger.serialize()
    assert (kwargs["topic"], kwargs["channel"]) == ("orders", "airflow")


def test_queue_matching_is_by_scheme_only():
    provider = NSQMessageQueueProvider()
    assert provider.scheme_matches("nsq")
    assert provider.queue_matches("nsq://nsqd:4150/orders?channel=airflow")
    assert not provider.queue_matches("kafka://broker:9092/orders")
    assert not provider.queue_matches("https://nsq.example.com/orders")


@pytest.mark.parametrize(
    "queue",
    [
        "nsq://nsqd:4150/orders",  # no channel
        "nsq://nsqd:4150/?channel=airflow",  # no topic
        "nsq://nsqd:4150/a/b?channel=airflow",
        "nsq://nsqd:4150/orders?channel=airflow&channel=other",
        "nsq://nsqd:4150/orders?channel=airflow&max_in_flight=5",
    ],
)
def test_bad_queue_uris_are_refused(queue):
    with pytest.raises(NSQValueError, match="queue"):
        parse_queue_uri(queue)


def test_uri_and_keyword_arguments_must_agree():
    provider = NSQMessageQueueProvider()
    queue = "nsq://nsqd:4150/orders?channel=airflow"
    assert provider.trigger_kwargs(queue) == {"topic": "orders", "channel": "airflow"}
    assert provider.trigger_kwargs(queue, channel="airflow") == {"topic": "orders"}
    with pytest.raises(NSQValueError, match="channel"):
        provider.trigger_kwargs(queue, channel="other")


def test_without_common_messaging_the_error_says_what_to_install(monkeypatch):
    from airflow.providers.common.compat.sdk import AirflowOptionalProviderFeatureException

    base = "airflow.providers.common.messaging.providers.base_provider"
    monkeypatch.setitem(sys.modules, base, None)  # as if the package were not installed
    monkeypatch.delitem(sys.modules, "airflow_provider_nsq.queues.nsq")
    # Airflow's ProvidersManager skips a queue class raising this, with the message logged.
    with pytest.raises(
        AirflowOptionalProviderFeatureException,
        match=r"apache-airflow-providers-common-messaging, the provider's \[messaging\] extra",
    ):
        importlib.import_module("airflow_provider_nsq.queues.nsq")
