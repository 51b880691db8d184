"""``NSQHook``: the provider's hook for an Airflow Connection of type ``nsq``, with every
role: publishing, consume windows, nsqd's HTTP API, the connection's settings and test.

The roles are hooks of their own, split as Apache's providers split theirs (the Kafka
provider has a producer, a consumer and an admin hook), and the provider's classes use
the role they need; ``NSQHook`` has them all, for your own tasks:

- :class:`~airflow_provider_nsq.hooks.base.NSQBaseHook`: the Connection, read into the
  client's settings (the only place that reads a Connection), its form and its Test
  button;
- :class:`~airflow_provider_nsq.hooks.producer.NSQProducerHook`: PUB, DPUB, MPUB over
  the connection's failover list of nsqds (the publish operators);
- :class:`~airflow_provider_nsq.hooks.consumer.NSQConsumerHook`: consume windows, and
  FIN, REQ, TOUCH for what they hand out (the sensor);
- :class:`~airflow_provider_nsq.hooks.admin.NSQAdminHook`: nsqd's HTTP API (a channel's
  depth: the sensor's check, and its trigger's).
"""

from __future__ import annotations

from typing import Any

from .admin import NSQAdminHook
from .base import NSQConnectionConfigError
from .consumer import NSQConsumerHook
from .producer import NSQProducerHook

__all__ = ["NSQConnectionConfigError", "NSQHook"]


class NSQHook(NSQProducerHook, NSQConsumerHook, NSQAdminHook):
    """Talk to NSQ through an Airflow Connection of type ``nsq``.

    Publishing calls share one connection, opened on first use and kept until
    :meth:`close` (reopened transparently if nsqd closed it); each :meth:`consume`
    window uses fresh connections, because a connection can subscribe only once. Close
    everything with :meth:`close` or use the hook as a context manager.

    Its methods come from its roles: the connection's settings and test
    (:class:`~airflow_provider_nsq.hooks.base.NSQBaseHook`), publishing
    (:class:`~airflow_provider_nsq.hooks.producer.NSQProducerHook`), consuming
    (:class:`~airflow_provider_nsq.hooks.consumer.NSQConsumerHook`) and nsqd's HTTP API
    (:class:`~airflow_provider_nsq.hooks.admin.NSQAdminHook`).

    A process forked from one that used the hook (a Celery worker's task process, a
    multiprocessing child) opens connections of its own on first use: it never writes
    to, reads from or closes the parent's (a CLS there would end the parent's
    subscription, a PUB would take its replies).

    :param nsq_conn_id: the Airflow Connection id (type ``nsq``).
    """

    def close(self) -> None:
        """Close every consume window's connection, then the publishing connection.

        Messages from ``ack="manual"`` windows that were not answered are REQ'd first, so
        nsqd redelivers them at once.
        """
        NSQConsumerHook.close(self)
        NSQProducerHook.close(self)

    # Airflow < 3.2 reads the connection form only from the registered class's own
    # ``__dict__`` (ProvidersManager checks ``"get_ui_field_behaviour" in
    # hook_class.__dict__``), so the base hook's methods are named here again.

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The extras' form fields for Airflow < 3.2 (see
        :meth:`NSQBaseHook.get_connection_form_widgets
        <airflow_provider_nsq.hooks.base.NSQBaseHook.get_connection_form_widgets>`)."""
        return super().get_connection_form_widgets()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hidden, relabelled and placeholder fields for Airflow < 3.2."""
        return super().get_ui_field_behaviour()
