"""``NSQMessageQueueProvider``: the ``nsq`` scheme of Airflow's common-messaging provider.

With it, an asset can be watched with the provider-neutral trigger::

    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
    from airflow.sdk import AssetWatcher

    from airflow_provider_nsq.assets import nsq_asset

    trigger = MessageQueueTrigger(scheme="nsq", topic="orders", channel="airflow")
    watcher = AssetWatcher(name="orders", trigger=trigger)
    orders = nsq_asset("orders", address="nsqd:4150", name="orders", watchers=[watcher])

Keyword arguments are :class:`~airflow_provider_nsq.triggers.nsq_event.NSQEventTrigger`'s.
The deprecated ``queue=`` form takes ``nsq://host:port/topic?channel=name`` (the
connection, ``nsq_conn_id``, still decides which nsqd is used). Needs
``apache-airflow-providers-common-messaging``: the provider's ``[messaging]`` extra.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from airflow.providers.common.compat.sdk import AirflowOptionalProviderFeatureException

from ..protocol.errors import NSQValueError
from ..triggers.nsq_event import NSQEventTrigger

try:
    from airflow.providers.common.messaging.providers.base_provider import (
        BaseMessageQueueProvider,
    )
except ImportError as exc:  # Airflow lists the provider's queues without failing
    raise AirflowOptionalProviderFeatureException(
        "the NSQ message-queue scheme needs apache-airflow-providers-common-messaging, "
        f"the provider's [messaging] extra ({exc})"
    ) from exc

__all__ = ["NSQMessageQueueProvider"]

SCHEME = "nsq"


def parse_queue_uri(queue: str) -> dict[str, str]:
    """``nsq://host:port/topic?channel=name`` -> ``{"topic": ..., "channel": ...}``.

    :param queue: the queue URI; the host part is not used (the connection says where
        nsqd is), a topic and a ``channel`` query parameter are required.
    """
    parts = urlsplit(queue)
    if parts.scheme != SCHEME:
        raise NSQValueError(f"queue {queue!r} is not an nsq:// URI")
    topic = parts.path.strip("/")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"channel"})
    if unknown:
        raise NSQValueError(
            f"queue {queue!r}: unknown parameter(s) {', '.join(unknown)}; only channel is "
            "read from the URI, pass the rest as keyword arguments"
        )
    channels = query.get("channel", [])
    if not topic or "/" in topic or len(channels) != 1 or not channels[0]:
        raise NSQValueError(f"queue {queue!r} must look like nsq://host:port/topic?channel=name")
    return {"topic": topic, "channel": channels[0]}


class NSQMessageQueueProvider(BaseMessageQueueProvider):
    """Lets ``MessageQueueTrigger(scheme="nsq", ...)`` build an
    :class:`~airflow_provider_nsq.triggers.nsq_event.NSQEventTrigger`.

    Scheme form (recommended): ``MessageQueueTrigger(scheme="nsq", topic=..., channel=...,
    nsq_conn_id=..., message_filter=..., batch_size=..., batch_timeout=...,
    min_event_interval=..., max_in_flight=..., requeue_delay=..., dead_letter_topic=...,
    lookupd_poll_interval=...)``. Queue form (deprecated by common-messaging):
    ``MessageQueueTrigger(queue="nsq://nsqd:4150/topic?channel=name", ...)``.
    """

    scheme = SCHEME

    def queue_matches(self, queue: str) -> bool:
        return urlsplit(queue).scheme == SCHEME

    def trigger_class(self) -> type[NSQEventTrigger]:
        return NSQEventTrigger

    def trigger_kwargs(self, queue: str, **kwargs: Any) -> dict[str, Any]:
        """The topic and channel from the URI, unless given as keyword arguments too (they
        must then agree)."""
        parsed = parse_queue_uri(queue)
        for name, value in parsed.items():
            if name in kwargs and kwargs[name] != value:
                raise NSQValueError(
                    f"queue {queue!r} says {name}={value!r} but {name}={kwargs[name]!r} was "
                    "passed too"
                )
        return {name: value for name, value in parsed.items() if name not in kwargs}
