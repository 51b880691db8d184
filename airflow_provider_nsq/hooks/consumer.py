"""``NSQConsumerHook``: consume windows through an ``nsq`` Connection, and the answers
(FIN, REQ, TOUCH) to what they hand out. The sensor's windows and the event trigger
use it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..client.message import NSQMessage
from ..client.settings.values import Delay, Duration, delay_to_ms, duration_to_seconds
from .base import NSQBaseHook

__all__ = ["NSQConsumerHook"]

if TYPE_CHECKING:
    from ..client import AckMode
    from ..client.consumer import NSQConsumer


def _consumer_class() -> type[NSQConsumer]:
    # Imported on first use: the consumer is a third of the client, and a DAG file or a
    # task that only publishes imports the hook without it.
    from ..client.consumer import NSQConsumer

    return NSQConsumer


class NSQConsumerHook(NSQBaseHook):
    """Consume from NSQ through an Airflow Connection of type ``nsq``.

    Each :meth:`consume` window reads every nsqd of the connection through a consumer of
    its own (a connection can subscribe only once); one that filled up is kept for the
    next window on the same channel. :meth:`close` closes them all, REQ'ing what
    ``ack="manual"`` windows left unanswered.

    A process forked after the hook opened windows opens connections of its own: it
    never reads from or closes the parent's (a CLS there would end the parent's
    subscription).

    :param nsq_conn_id: the Airflow Connection id (type ``nsq``).
    """

    def __init__(self, nsq_conn_id: str = NSQBaseHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(nsq_conn_id=nsq_conn_id, **kwargs)
        # The consumers of ack="manual" windows: their messages wait for an answer.
        self._manual_consumers: list[NSQConsumer] = []
        # Subscriptions a full window kept (RDY 0), by (topic, channel): the next window on
        # the same channel reads on them instead of connecting and subscribing again.
        self._subscriptions: dict[tuple[str, str], NSQConsumer] = {}
        self._consumers_pid = os.getpid()  # the process those consumers' connections are of

    def consumer(self, topic: str, channel: str) -> NSQConsumer:
        """A blocking consumer of ``topic``/``channel`` over every nsqd of the connection
        (through nsqlookupd when it names any). The caller closes it."""
        return _consumer_class()(topic, channel, **self.consumer_options())

    def close(self) -> None:
        """Close every consume window's connection.

        Messages from ``ack="manual"`` windows that were not answered are REQ'd first, so
        nsqd redelivers them at once.
        """
        self._own_consumers()
        consumers = [*self._manual_consumers, *self._subscriptions.values()]
        self._manual_consumers, self._subscriptions = [], {}
        for consumer in consumers:
            consumer.close()

    def _own_consumers(self) -> None:
        """In a process forked after this hook opened windows, forget the parent's
        consumers unused: their sockets are the parent's too. Dropped, this process's
        copies close; the parent's stay."""
        if self._consumers_pid != os.getpid():
            self._consumers_pid = os.getpid()
            self._manual_consumers, self._subscriptions = [], {}

    def consume(
        self,
        topic: str,
        channel: str,
        *,
        max_messages: int = 1,
        ack: AckMode = "fin",
        timeout: Duration = 5.0,
        requeue_delay: Delay = 0,
    ) -> list[NSQMessage]:
        """One subscribe window over every nsqd of the connection: SUB, RDY (the
        ``max_messages`` shared between them), collect up to ``max_messages`` or until
        ``timeout`` passes, then stop delivery.

        A window that filled up keeps its subscriptions (RDY 0: nothing is delivered)
        for the next window on the channel, or until :meth:`close`.

        :param topic: the topic name.
        :param channel: the channel name (created by the SUB if it does not exist).
        :param max_messages: most messages to take (at most nsqd's max RDY count, 2500,
            per nsqd).
        :param timeout: how long the window listens: seconds or a ``timedelta``.
        :param ack: ``"fin"`` FINs the messages before returning, ``"req"`` REQs them
            (attempts + 1), ``"manual"`` returns them in flight: answer them with
            :meth:`finish` / :meth:`requeue`; :meth:`close` REQs what is left.
        :param requeue_delay: the REQ delay for ``ack="req"`` (timedelta or ms).

        The nsqds are the connection's ``host:port`` (and ``nsqd_tcp_addresses``), or
        those its nsqlookupds list for the topic (``lookupd_http_addresses``): one
        :class:`~airflow_provider_nsq.client.consumer.NSQConsumer` reads them all at
        once, answers each message on the nsqd that delivered it, and logs and skips an
        nsqd that cannot be reached.
        """
        seconds = duration_to_seconds(timeout, "timeout")
        delay_ms = delay_to_ms(requeue_delay, "requeue_delay")
        self._own_consumers()
        consumer = self._subscriptions.pop((topic, channel), None) or self.consumer(topic, channel)
        try:
            messages = consumer.consume(
                max_messages=max_messages, timeout=seconds, ack=ack, requeue_delay_ms=delay_ms
            )
            nsqds = len(consumer.connections)
        except BaseException:
            consumer.close()
            raise
        if ack == "manual":
            self._manual_consumers.append(consumer)  # close() REQs what is left unanswered
        elif consumer.subscribed:
            self._subscriptions[(topic, channel)] = consumer
        else:
            consumer.close()
        # debug, not info: a task may run many windows; the sensor logs what it took
        self.log.debug(
            "Consume window on %s/%s over %s nsqd(s): %s message(s) in %gs (ack=%s)",
            *(topic, channel, nsqds, len(messages), seconds, ack),
        )
        return messages

    # Batch aliases of the messages' own finish(), requeue(delay_ms) and touch(), as
    # NSQConsumer's are (messages, then delay_ms; a timedelta is accepted too): one write
    # per nsqd, so many messages are answered as fast as one.

    def finish(self, *messages: NSQMessage) -> None:
        """``message.finish()`` for each message (from ``ack="manual"`` windows), one
        write per nsqd."""
        _consumer_class().finish(*messages)

    def requeue(self, *messages: NSQMessage, delay_ms: Delay = 0) -> None:
        """``message.requeue(delay_ms)`` for each message (from ``ack="manual"``
        windows; redelivered after ``delay_ms``, milliseconds or a timedelta, with
        attempts + 1), one write per nsqd."""
        _consumer_class().requeue(*messages, delay_ms=delay_to_ms(delay_ms, "requeue delay"))

    def touch(self, *messages: NSQMessage) -> None:
        """``message.touch()`` for each message (from ``ack="manual"`` windows: restarts
        its msg_timeout), one write per nsqd."""
        _consumer_class().touch(*messages)
