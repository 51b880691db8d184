"""``NSQNotifier``: an Airflow notifier that publishes one message to an NSQ topic, from
task and DAG callbacks (``on_failure_callback=NSQNotifier(...)``), deadline alerts and
human-in-the-loop operators (Airflow >= 3.1), as the Amazon provider's ``SqsNotifier``
does for SQS.

``message`` is rendered with the callback's context (``{{ ti.task_id }}``,
``{{ dag_run.run_id }}`` ...): text, bytes, or a dict / list sent as JSON. A publish
that fails (nsqd unreachable, the connection missing, nsqd refusing it) is logged with
the reason and never raises: a notifier runs beside the task's own outcome, and must not
hide it.

:meth:`NSQNotifier.notify` publishes through the connection's failover list of nsqds
(blocking: task and DAG callbacks run synchronously); :meth:`NSQNotifier.async_notify`
(what ``await NSQNotifier(...)`` runs: a deadline alert's ``AsyncCallback`` on the
triggerer) publishes on the event loop with the asyncio client, no thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseNotifier

from ..client.bodies import encode_body
from ..client.producer import AsyncNSQProducer
from ..hooks.producer import NSQProducerHook
from ..protocol.names import validate_topic_name

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

Message = str | bytes | dict[str, Any] | list[Any]


class NSQNotifier(BaseNotifier):
    """Publish ``message`` to ``topic`` when a callback fires.

    :param topic: the topic (templated).
    :param message: the message (templated): str (sent as UTF-8), bytes, or a dict /
        list (sent as compact JSON).
    :param nsq_conn_id: the ``nsq`` Connection (templated); publishing fails over
        along its nsqds.
    :param context: the context, for ``await NSQNotifier(...)`` (Airflow passes it to
        a deadline alert's callback); task and DAG callbacks pass theirs when they call.
    """

    template_fields: Sequence[str] = ("topic", "message", "nsq_conn_id")

    def __init__(
        self,
        *,
        topic: str,
        message: Message,
        nsq_conn_id: str = NSQProducerHook.default_conn_name,
        context: Context | None = None,
    ) -> None:
        super().__init__()
        if context is not None:
            self.context = context
        self.topic = topic
        self.message = message
        self.nsq_conn_id = nsq_conn_id

    def _body(self) -> bytes:
        validate_topic_name(self.topic)  # rendered by now
        return encode_body(self.message)

    def notify(self, context: Context) -> None:
        """Publish the rendered message (blocking); a failure is logged, never raised."""
        try:
            body = self._body()
            with NSQProducerHook(nsq_conn_id=self.nsq_conn_id) as hook:
                hook.publish(self.topic, body)
        except Exception as exc:  # a notifier must not hide the task's own outcome
            self._failed(exc)
        else:
            self.log.info("Published a notification (%s bytes) to topic %s", len(body), self.topic)

    async def async_notify(self, context: Context) -> None:
        """:meth:`notify` on the event loop (asyncio client, no thread)."""
        try:
            body = self._body()
            settings = await NSQProducerHook(nsq_conn_id=self.nsq_conn_id).aget_settings()
            async with AsyncNSQProducer(settings.nsqds, settings.client) as producer:
                await producer.publish(self.topic, body)
        except Exception as exc:  # a notifier must not hide the task's own outcome
            self._failed(exc)
        else:
            self.log.info("Published a notification (%s bytes) to topic %s", len(body), self.topic)

    def _failed(self, exc: Exception) -> None:
        self.log.error(
            "Could not publish the notification to NSQ topic %s (connection %s): %s: %s",
            self.topic,
            self.nsq_conn_id,
            type(exc).__name__,
            exc,
        )


#: The function-style name Airflow's notifiers also have
#: (``on_failure_callback=send_nsq_notification(topic=..., message=...)``).
send_nsq_notification = NSQNotifier
