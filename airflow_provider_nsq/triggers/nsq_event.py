"""``NSQEventTrigger``: event-driven DAGs from an NSQ channel, one asset event per batch
of messages.

Used through ``MessageQueueTrigger(scheme="nsq", ...)`` in an ``AssetWatcher`` (see
:mod:`airflow_provider_nsq.queues.nsq`) or directly. Messages taken off the channel are
grouped by :class:`~airflow_provider_nsq.triggers.event_batches.EventBatcher`: one
``TriggerEvent`` carries up to ``batch_size`` messages collected for up to
``batch_timeout`` seconds, and events are spaced ``min_event_interval`` apart (Airflow
3.3's scheduler leaves an event stored while a run is queued to a later run). Its
payload lists the messages' JSON-safe records
(:func:`~airflow_provider_nsq.client.records.message_record` plus ``nsqd``) with counts;
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
``msg_timeout_ms``: :mod:`~airflow_provider_nsq.triggers.failover`), so that a dead
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

import asyncio
import datetime
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Hashable, Sequence
from functools import partial
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from ..client import AsyncNSQConnection, AsyncNSQConsumer, ClientConfig, NSQMessage
from ..client.backoff import reconnect_backoff
from ..client.consumer import DEFAULT_LOOKUPD_POLL_INTERVAL_S, UNREACHABLE
from ..client.message import answer_or_log
from ..client.records import MessageFilter, import_callable, message_record
from ..client.settings.values import Delay, delay_to_ms, duration_to_seconds
from ..hooks.nsq import NSQHook
from ..metrics import emitter
from ..protocol.commands import check_delay_ms
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT
from ..protocol.errors import NSQError, NSQTLSError, NSQValueError
from ..protocol.names import validate_channel_name, validate_topic_name
from ..protocol.value_checks import check_int
from .event_batches import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TIMEOUT_S,
    DEFAULT_MIN_EVENT_INTERVAL_S,
    EventBatcher,
    MessageBatch,
    batch_payload,
    check_batch_size,
    hold_seconds,
)
from .failover import trigger_consumer_options
from .health import TriggerHealth

try:
    from airflow.triggers.shared_stream import (
        AdvanceItem,
        SharedStreamProducer,
        reject_shared_stream_event,
    )

    #: True on Airflow >= 3.3: the triggerer FINs through the shared-stream ack channel.
    ACK_MODE = True
except ImportError:  # pragma: no cover - Airflow 3.0-3.2
    ACK_MODE = False
    SharedStreamProducer = object  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)
_METRICS = emitter("triggerer")

#: ``max_in_flight`` when not given: this, or ``batch_size`` when larger (a batch can only
#: hold messages in flight).
DEFAULT_MAX_IN_FLIGHT = 100
DEFAULT_REQUEUE_DELAY_MS = 5_000


async def _start_consumer(
    options: dict[str, Any],
    topic: str,
    channel: str,
    max_in_flight: int,
    lookupd_poll_interval: float,
) -> AsyncNSQConsumer:
    """A started :class:`AsyncNSQConsumer` with ``options`` (the connection's, for a
    trigger: :func:`~.failover.trigger_consumer_options`) over every nsqd of the
    connection: found through its nsqlookupds when it names any, else its nsqd list
    (``host:port``, then ``nsqd_tcp_addresses``).

    While no nsqd (or no nsqlookupd) can be reached it keeps trying, with the consumer's
    backoff: a triggerer that starts before nsqd must not fail its assets. What retrying
    cannot fix (nsqd refused the subscription or AUTH, a bad setting) is raised. Once
    started, the consumer itself reconnects dropped nsqds and re-asks nsqlookupd every
    ``lookupd_poll_interval`` seconds.
    """
    backoff = reconnect_backoff()
    while True:
        consumer = AsyncNSQConsumer(
            topic, channel, lookupd_poll_interval=lookupd_poll_interval, **options
        )
        try:
            await consumer.start(max_in_flight)
        except NSQTLSError:
            await consumer.close()
            raise  # every nsqd refused the TLS handshake: retrying will not fix it
        except UNREACHABLE as exc:
            await consumer.close()
            wait = backoff.next()
            log.warning("Cannot read %s/%s yet (%s); retrying in %gs", topic, channel, exc, wait)
            await asyncio.sleep(wait)
            continue
        except BaseException:
            await consumer.close()  # also on cancellation
            raise
        break
    _report_start(consumer, max_in_flight, options["lookupd_http_addresses"])
    return consumer


def _report_start(consumer: AsyncNSQConsumer, max_in_flight: int, lookupds: list[str]) -> None:
    """Log where a started consumer reads from, and warn when the nsqds cannot hold
    ``max_in_flight``."""
    topic, channel = consumer.topic, consumer.channel
    connections = consumer.connections
    capacity = sum(c.max_rdy_count for c in connections.values())
    if connections and max_in_flight > capacity:
        # The consumer never sends an nsqd a RDY above its limit (nsqd would drop the
        # connection): fewer messages are in flight than asked for.
        log.warning(
            "max_in_flight=%s exceeds nsqd's max RDY count (%s over %s nsqd(s), "
            "--max-rdy-count): at most %s messages of %s/%s are in flight at once",
            max_in_flight,
            capacity,
            len(connections),
            capacity,
            topic,
            channel,
        )
    log.info(
        "Reading %s/%s from %s (max in flight %s): %s",
        topic,
        channel,
        f"nsqlookupd {', '.join(lookupds)}" if lookupds else "the connection's nsqd(s)",
        max_in_flight,
        ", ".join(connections) or "no nsqd has the topic yet",
    )


class _DeadLetters:
    """Publishes rejected messages to ``topic`` on the nsqd that delivered them (known
    to be up, and NSQ's way: publish where the data is), one connection of its own per
    nsqd, one message at a time."""

    def __init__(self, config: ClientConfig, topic: str) -> None:
        self.topic = topic
        self.config = config
        self._conns: dict[str, AsyncNSQConnection] = {}

    def _connection(self, nsqd: str) -> AsyncNSQConnection:
        conn = self._conns.get(nsqd)
        if conn is None:
            conn = self._conns[nsqd] = AsyncNSQConnection(self.config.for_nsqd(nsqd))
        return conn

    async def publish(self, message: NSQMessage, nsqd: str) -> bool:
        """True once nsqd accepted the copy; False (logged) when it did not."""
        try:
            await self._connection(nsqd).publish(self.topic, message.body)
        except NSQError as exc:
            log.warning(
                "Could not publish message %s from %s to the dead-letter topic %s (%s); "
                "requeueing it instead",
                message.id,
                nsqd,
                self.topic,
                exc,
            )
            return False
        return True

    async def close(self) -> None:
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            await conn.close()


class NSQEventStreamProducer(SharedStreamProducer):
    """The broker side of one NSQ stream: in ack mode (Airflow >= 3.3) the shared
    stream's producer, before that what :meth:`NSQEventTrigger.run` drives itself.

    Owns the subscription for one (connection, topic, channel): one
    :class:`~airflow_provider_nsq.client.consumer.AsyncNSQConsumer` over every nsqd of
    the connection (discovered through nsqlookupd when the connection names any), with
    one ``max_in_flight`` budget split across them. Yields one raw event per batch of
    messages (:class:`~airflow_provider_nsq.triggers.event_batches.MessageBatch`, from
    an :class:`~airflow_provider_nsq.triggers.event_batches.EventBatcher`); answers
    nsqd only in :meth:`settle` (through :meth:`advance` in ack mode), after Airflow
    stored every event derived from the batch, on the nsqd that delivered each message.
    Meanwhile the consumer TOUCHes the messages it holds (collecting or waiting for
    the store; ``touch_held()``), so nsqd does not redeliver them early.

    Keyword arguments are :class:`NSQEventTrigger`'s (``message_filter`` is per trigger
    and ignored here).
    """

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        nsq_conn_id: str = NSQHook.default_conn_name,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        requeue_delay: int = DEFAULT_REQUEUE_DELAY_MS,
        dead_letter_topic: str | None = None,
        lookupd_poll_interval: float = DEFAULT_LOOKUPD_POLL_INTERVAL_S,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_timeout: float = DEFAULT_BATCH_TIMEOUT_S,
        min_event_interval: float = DEFAULT_MIN_EVENT_INTERVAL_S,
        **_: Any,
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.nsq_conn_id = nsq_conn_id
        self.max_in_flight = max_in_flight
        self.requeue_delay_ms = requeue_delay
        self.dead_letter_topic = dead_letter_topic
        self.lookupd_poll_interval = lookupd_poll_interval
        self.batcher = EventBatcher(
            batch_size=batch_size,
            batch_timeout=batch_timeout,
            min_event_interval=min_event_interval,
            to_record=self._record,
        )
        self.consumer: AsyncNSQConsumer | None = None
        self.health: TriggerHealth | None = None
        self._dead_letters: _DeadLetters | None = None
        self._toucher: asyncio.Task[None] | None = None

    def _record(self, message: NSQMessage) -> dict[str, Any]:
        return message_record(message, self.topic, self.channel)

    def _tags(self) -> dict[str, str]:
        return {"topic": self.topic, "channel": self.channel}

    async def open_stream(self) -> AsyncGenerator[tuple[MessageBatch, MessageBatch], None]:
        hook = NSQHook(nsq_conn_id=self.nsq_conn_id)
        config = await hook.aget_client_config()
        check_delay_ms(self.requeue_delay_ms, config.max_req_timeout_ms, what="requeue_delay")
        if self.dead_letter_topic:
            self._dead_letters = _DeadLetters(config, self.dead_letter_topic)
        # A short msg_timeout of its own: what a dead triggerer held comes back soon.
        options = trigger_consumer_options(hook)
        self.health = TriggerHealth(
            "event",
            _METRICS,
            nsqds=() if options["lookupd_http_addresses"] else options["nsqd_tcp_addresses"],
            **self._tags(),
        )
        self.consumer = await _start_consumer(
            options, self.topic, self.channel, self.max_in_flight, self.lookupd_poll_interval
        )
        self._toucher = asyncio.create_task(self._keep_held_alive())
        while True:
            # What the consumer delivers stays held (and TOUCHed) until it is answered.
            batch = await self.batcher.next_batch(self._read)
            _METRICS.incr("nsq.event.received", len(batch.messages), **self._tags())
            # The batch is both the raw event (its records, and the marks each trigger's
            # filter leaves on it) and what settling it needs.
            yield batch, batch

    async def _read(self, timeout: float) -> list[NSQMessage]:
        """The consumer's deliveries within ``timeout`` seconds."""
        assert self.consumer is not None
        return await self.consumer.read(timeout)

    def get_advance_lane(self, broker_payload: MessageBatch) -> Hashable:
        # FIN is per message (no cumulative offset): one lane per batch, so a batch still
        # waiting for a slow subscriber never holds back the FIN of later ones.
        return broker_payload.number

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        """Settle each resolved batch (see :meth:`settle`). Never raises."""
        for item in batch:
            outcome = item.outcome
            await self.settle(
                item.broker_payload,
                acked=outcome.acked,
                rejected=outcome.rejected,
                failed=outcome.failed,
            )

    async def settle(self, batch: MessageBatch, *, acked: int, rejected: int, failed: int) -> None:
        """Answer nsqd for every message of a batch, on the nsqd that delivered it, given
        how many triggers stored events of it (``acked``), rejected all of it, or failed:

        - a trigger failed (ack timeout, overflow), or no trigger was online: REQ every
          message after ``requeue_delay``, so they come back;
        - otherwise a message some trigger's filter accepted (and so stored): FIN;
        - a message every trigger's filter rejected: publish it to ``dead_letter_topic``
          (when set), then FIN; if that publish fails, REQ it instead.

        Never raises: a FIN/REQ that cannot be sent (connection gone) leaves the message
        to nsqd's msg_timeout, which redelivers it.
        """
        self.batcher.settled(batch, stored=acked > 0)
        consumer = self.consumer
        if consumer is None:
            return
        done = not failed and (acked > 0 or rejected > 0)
        if acked > 0 and batch.messages:
            # Publish (nsqd's timestamp) to the asset event stored, for the oldest message.
            oldest_ns = min(m.timestamp for m in batch.messages)
            _METRICS.timing("nsq.event.delay", time.time() - oldest_ns / 1e9, **self._tags())
        answered = {"finished": 0, "requeued": 0, "dead_lettered": 0}
        for index, message in enumerate(batch.messages):
            finish = done
            if done and not batch.accepted(index) and self._dead_letters is not None:
                finish = await self._dead_letters.publish(message, message.nsqd or "")
                answered["dead_lettered"] += int(finish)
            if finish:
                answer_or_log(message, "FIN", partial(consumer.finish, message))
            else:
                requeue = partial(consumer.requeue, message, delay_ms=self.requeue_delay_ms)
                answer_or_log(message, "REQ", requeue)
            answered["finished" if finish else "requeued"] += 1
        for what, count in answered.items():
            _METRICS.incr(f"nsq.event.{what}", count, **self._tags())

    async def _keep_held_alive(self) -> None:
        """TOUCH what the stream holds (collecting, or waiting for the store) as the
        consumer decides (``touch_held()``: a third of msg_timeout after delivery
        or the last TOUCH), and report the stream's health
        (:mod:`~airflow_provider_nsq.triggers.health`), until cancelled."""
        while self.consumer is not None:
            _, next_in = self.consumer.touch_held()
            if self.health is not None:
                if self.health.seconds_to_report() == 0:
                    self.health.report(self.consumer)
                next_in = min(next_in, self.health.seconds_to_report())
            await asyncio.sleep(next_in)

    async def aclose(self) -> None:
        """Stop touching; REQ what is still unanswered (redelivered at once); close."""
        toucher, self._toucher = self._toucher, None
        if toucher is not None:
            toucher.cancel()
            try:
                await toucher
            except asyncio.CancelledError:
                pass
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            await consumer.close()  # CLS (RDY 0), REQ every unanswered message, close
        dead_letters, self._dead_letters = self._dead_letters, None
        if dead_letters is not None:
            await dead_letters.close()


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

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """The pre-3.3 path (also what a direct ``run()`` does): the same producer and
        batches, but each batch is settled (FIN) right after its events are yielded,
        which is before the triggerer stored them."""
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
