"""``NSQEventTrigger``: event-driven DAGs from an NSQ channel, one asset event per batch
of messages.

Used through ``MessageQueueTrigger(scheme="nsq", ...)`` in an ``AssetWatcher`` (see
:mod:`airflow_provider_nsq.queues.nsq`) or directly. Messages taken off the channel are
grouped by :class:`~airflow_provider_nsq.triggers.event_batches.EventBatcher`: one
``TriggerEvent`` carries up to ``batch_size`` messages collected for up to
``batch_timeout`` seconds, and events are spaced ``min_event_interval`` apart (Airflow
3.3's scheduler leaves an event stored while a run is queued to a later run). Its
payload lists the messages' JSON-safe records
(:func:`~airflow_provider_nsq.client.message.message_record` plus ``nsqd``) with counts;
with ``batch_size=1`` the payload is the one message's record.

On Airflow >= 3.3 the trigger runs in the triggerer's shared-stream **ack mode**
(``airflow/triggers/shared_stream.py``): all triggers on one (connection, topic, channel)
share one consumer, :class:`NSQEventStreamProducer`, and the messages of a batch are
FINished only in :meth:`~NSQEventStreamProducer.advance`, which Airflow calls after the
asset events derived from the batch are stored in the metadata database. Until then the
producer TOUCHes them (also while the batch is still collecting) so nsqd does not
redeliver them early. A subscriber that failed (ack timeout, overflow) or a broadcast
nobody took gets the whole batch REQ'd; a message every filter rejected is FINished,
after a publish to ``dead_letter_topic`` when one is set. A triggerer that dies leaves
its messages in flight: nsqd redelivers them after its msg_timeout, to the next
triggerer; the trigger asks nsqd for a short one (10 s, unless the connection sets
``msg_timeout_ms``: :meth:`~airflow_provider_nsq.hooks.nsq.NSQHook.held_consumer_options`), so that a dead
triggerer's batch is back about when Airflow has moved its triggers. At-least-once:
duplicates, never losses. While it runs, the stream reports its health
(:mod:`~airflow_provider_nsq.triggers.health`).

On Airflow 3.0-3.2 (no ack mode) :meth:`NSQEventTrigger.run` drives the same producer
itself and settles each batch right after its events are handed to the triggerer, before
they are stored: a triggerer crash in between loses that batch. Weaker; it says so in a
warning when it starts, and docs/compatibility.md says so.

Both read through the consumer,
:class:`~airflow_provider_nsq.client.consumer.AsyncNSQConsumer`: every nsqd of the
connection (found through nsqlookupd when it names any, re-asked every
``lookupd_poll_interval``), one ``max_in_flight`` budget split across them, dropped
nsqds reconnected with backoff, and FIN/REQ/TOUCH on the connection that delivered the
message. The payload's ``nsqd`` is that nsqd's address.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncGenerator, AsyncIterator, Hashable
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from ..client.consumer import DEFAULT_LOOKUPD_POLL_INTERVAL_S
from ..client.message import MessageFilter, import_callable
from ..client.settings.values import Delay, delay_to_ms, duration_to_seconds
from ..hooks.nsq import NSQHook
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT
from ..protocol.errors import NSQValueError
from ..protocol.names import validate_channel_name, validate_topic_name
from ..protocol.value_checks import check_int
from .ack_mode import ACK_MODE, reject_shared_stream_event
from .event_batches import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TIMEOUT_S,
    DEFAULT_MIN_EVENT_INTERVAL_S,
    MessageBatch,
    batch_payload,
    check_batch_size,
    hold_seconds,
)
from .event_stream import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_REQUEUE_DELAY_MS,
    NSQEventStreamProducer,
)
from .loop_generators import LoopGenerator

# NSQEventStreamProducer and ACK_MODE are imported from here too: the queue provider,
# Airflow 3.3's shared-stream machinery (through create_shared_stream_producer) and DAGs.
__all__ = [
    "ACK_MODE",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_REQUEUE_DELAY_MS",
    "NSQEventStreamProducer",
    "NSQEventTrigger",
]


class NSQEventTrigger(BaseEventTrigger):
    """Fire asset events from an NSQ channel, one per batch of messages: for
    event-driven DAGs (assets).

    Messages are grouped: one event carries up to ``batch_size`` messages, collected for
    up to ``batch_timeout`` seconds after the first, and an event is handed over no
    sooner than ``min_event_interval`` after the previous one was stored (so that the
    scheduler has turned the previous one into a DAG run; see docs/event-driven.md).
    The payload is ``{"messages": [record, ...], "count": n, "redelivered": r,
    "filtered": f}``: the records this trigger's filter accepted, in delivery order;
    how many of them were delivered before (``attempts`` > 1); how many messages of the
    batch the filter rejected. Each record is the message as a JSON-safe dict: ``body``
    (text; base64 text when ``body_encoding == "base64"``), ``body_encoding``, ``id``,
    ``attempts``, ``timestamp`` (ns since the epoch, set by nsqd at publish),
    ``topic``, ``channel``, ``nsqd`` (``host:port`` of the nsqd that delivered it).
    With ``batch_size=1`` every message is its own event and the payload is its
    record. Delivery is at-least-once: a DAG may see a message twice (same ``nsqd``
    and ``id``, higher ``attempts``).

    It reads from every nsqd of the connection: those nsqlookupd lists for the topic
    when the connection has ``lookupd_http_addresses`` (asked again every
    ``lookupd_poll_interval``: nsqds that start carrying the topic are joined, those that
    stop are left once their messages are answered), else the connection's ``host:port``
    and its ``nsqd_tcp_addresses``. An nsqd that drops is reconnected with backoff; the
    others go on meanwhile.

    On Airflow >= 3.3 the messages of a batch are FINished only after Airflow stored
    the event (see the module docstring); triggers with the same connection, topic and
    channel share one subscription, whose ``max_in_flight``, ``requeue_delay``,
    ``dead_letter_topic``, ``lookupd_poll_interval``, ``batch_size``,
    ``batch_timeout`` and ``min_event_interval`` are those of the first trigger to start
    (each trigger's payload shape follows its own ``batch_size``).

    :param topic: the topic name.
    :param channel: the channel name; a durable channel keeps messages while no
        triggerer is running.
    :param nsq_conn_id: the ``nsq`` Connection to use.
    :param message_filter: dotted path to a ``callable(record) -> bool``, called for
        each message; messages it rejects are left out of the event (and, when no other
        trigger on the channel takes them, go to ``dead_letter_topic``, or are dropped).
        A batch it rejects entirely fires no event. A filter that raises keeps the
        message (the error is logged).
    :param batch_size: at most this many messages per event (default 1000, at most
        2500); 1 fires one event per message, whose payload is the message's record.
    :param batch_timeout: how long a batch collects messages after its first one:
        ``timedelta`` or seconds (default 2 s, at most 300 s); a full batch goes at once.
    :param min_event_interval: how long after the previous event was stored the next
        one may be handed over: ``timedelta`` or seconds, at most 300 s (default 5 s
        when ``batch_size`` > 1, 0 when it is 1); 0 hands batches over as soon as they
        are complete. Messages wait in flight meanwhile, and fill the batch.
    :param max_in_flight: messages held unanswered at once across all nsqds (the RDY
        counts, split between them; at most 2500). At least ``batch_size``; by default
        100, or ``batch_size`` when larger. No nsqd is given more than its
        --max-rdy-count.
    :param requeue_delay: how long nsqd waits before redelivering a message whose event
        could not be stored: ``timedelta`` or milliseconds (default 5 s).
    :param dead_letter_topic: where messages that every trigger's filter rejected are
        published (on the nsqd that delivered them) before they are FINished.
    :param lookupd_poll_interval: how often nsqlookupd is asked again for the topic's
        nsqds: ``timedelta`` or seconds (default 60 s; only used when the connection
        has ``lookupd_http_addresses``).
    """

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        nsq_conn_id: str = NSQHook.default_conn_name,
        message_filter: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_timeout: float | datetime.timedelta = DEFAULT_BATCH_TIMEOUT_S,
        min_event_interval: float | datetime.timedelta | None = None,
        max_in_flight: int | None = None,
        requeue_delay: Delay = DEFAULT_REQUEUE_DELAY_MS,
        dead_letter_topic: str | None = None,
        lookupd_poll_interval: float | datetime.timedelta = DEFAULT_LOOKUPD_POLL_INTERVAL_S,
    ) -> None:
        super().__init__()
        validate_topic_name(topic)
        validate_channel_name(channel)
        if message_filter is not None and not isinstance(message_filter, str):
            raise NSQValueError(
                "message_filter must be a dotted path (module.function) so the trigger can "
                f"be serialised, got {message_filter!r}"
            )
        batch_size = check_batch_size(batch_size)
        if max_in_flight is None:
            max_in_flight = max(DEFAULT_MAX_IN_FLIGHT, batch_size)
        max_in_flight = check_int(
            max_in_flight, "max_in_flight", minimum=1, maximum=DEFAULT_MAX_RDY_COUNT
        )
        if max_in_flight < batch_size:
            raise NSQValueError(
                f"max_in_flight ({max_in_flight}) must be at least batch_size ({batch_size}): "
                "a batch only holds messages in flight at once"
            )
        if min_event_interval is None:
            min_event_interval = DEFAULT_MIN_EVENT_INTERVAL_S if batch_size > 1 else 0.0
        if dead_letter_topic is not None:
            validate_topic_name(dead_letter_topic)
            if dead_letter_topic == topic:
                raise NSQValueError(
                    f"dead_letter_topic must differ from topic ({topic!r}): rejected "
                    "messages would come straight back"
                )
        self.topic = topic
        self.channel = channel
        self.nsq_conn_id = nsq_conn_id
        self.message_filter = message_filter
        self.batch_size = batch_size
        self.batch_timeout = hold_seconds(batch_timeout, "batch_timeout")
        self.min_event_interval = hold_seconds(min_event_interval, "min_event_interval")
        self.max_in_flight = max_in_flight
        self.requeue_delay = delay_to_ms(requeue_delay, "requeue_delay")
        self.dead_letter_topic = dead_letter_topic
        self.lookupd_poll_interval = duration_to_seconds(
            lookupd_poll_interval, "lookupd_poll_interval"
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topic": self.topic,
                "channel": self.channel,
                "nsq_conn_id": self.nsq_conn_id,
                "message_filter": self.message_filter,
                "batch_size": self.batch_size,
                "batch_timeout": self.batch_timeout,
                "min_event_interval": self.min_event_interval,
                "max_in_flight": self.max_in_flight,
                "requeue_delay": self.requeue_delay,
                "dead_letter_topic": self.dead_letter_topic,
                "lookupd_poll_interval": self.lookupd_poll_interval,
            },
        )

    # -- the user's filter, and the events of a batch ------------------------------------

    def _load_filter(self) -> MessageFilter | None:
        if self.message_filter is None:
            return None
        return import_callable(self.message_filter)

    def _accepts(self, keep: MessageFilter | None, record: dict[str, Any]) -> bool:
        if keep is None:
            return True
        try:
            return bool(keep(dict(record)))
        except Exception:
            # Dropping a message we could not judge would lose it: deliver it instead.
            self.log.exception(
                "message_filter %s raised on message %s; firing an event for it anyway",
                self.message_filter,
                record.get("id"),
            )
            return True

    def _events(self, keep: MessageFilter | None, batch: MessageBatch) -> list[TriggerEvent]:
        """This trigger's events for a batch (none when its filter rejects all of it),
        after marking on the batch the messages it accepted."""
        taken = [i for i, record in enumerate(batch.records) if self._accepts(keep, record)]
        batch.accept(taken)
        records = [batch.records[i] for i in taken]
        if self.batch_size == 1:
            return [TriggerEvent(record) for record in records]
        if not records:
            return []
        return [TriggerEvent(batch_payload(records, filtered=len(batch) - len(records)))]

    # -- Airflow >= 3.3: shared stream, ack mode ------------------------------------------

    def shared_stream_key(self) -> Hashable | None:
        """One subscription per (connection, topic, channel) in a triggerer: two
        subscriptions on one channel would split its messages between them."""
        if not ACK_MODE:
            return None
        return ("nsq", self.nsq_conn_id, self.topic, self.channel)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> NSQEventStreamProducer:
        return NSQEventStreamProducer(**kwargs)

    async def filter_shared_stream(
        self, shared_stream: AsyncIterator[Any]
    ) -> AsyncIterator[TriggerEvent]:
        keep = self._load_filter()
        async for batch in shared_stream:
            events = self._events(keep, batch)
            if not events:
                reject_shared_stream_event()
            for event in events:
                yield event

    # -- Airflow 3.0-3.2: settle right after the events are handed over -------------------

    def run(self) -> AsyncIterator[TriggerEvent]:
        """The pre-3.3 path (also what a direct ``run()`` does): the same producer and
        batches, but each batch is settled (FIN) right after its events are yielded,
        which is before the triggerer stored them.

        The subscription lives in a generator the event loop closes (CLS, REQ what was
        taken and not answered) however the caller lets go: cancelled, ``aclose()``, or
        dropped unfinished (:class:`~.loop_generators.LoopGenerator`).
        """
        return LoopGenerator(self._settled_events)

    async def _settled_events(self) -> AsyncGenerator[TriggerEvent, None]:
        if not ACK_MODE:
            self.log.warning(
                "This Airflow has no shared-stream ack mode (it needs Airflow >= 3.3): each "
                "batch of %s/%s is FINished once its event is handed to the triggerer, "
                "before the event is stored, so a triggerer that dies in between loses it",
                self.topic,
                self.channel,
            )
        keep = self._load_filter()
        producer = NSQEventStreamProducer(**self.serialize()[1])
        stream = producer.open_stream()
        try:
            async for batch, _ in stream:
                events = self._events(keep, batch)
                for event in events:
                    yield event
                stored = len(events) > 0
                await producer.settle(batch, acked=int(stored), rejected=int(not stored), failed=0)
        finally:
            # Also on cancellation: RDY 0, CLS, REQ what was taken and not answered.
            await stream.aclose()
            await producer.aclose()
