"""``NSQEventTrigger``: event-driven DAGs from an NSQ channel, one asset event per batch
of messages; and its stream producer, :class:`NSQEventStreamProducer`.

Used through ``MessageQueueTrigger(scheme="nsq", ...)`` in an ``AssetWatcher`` (see
:mod:`airflow_provider_nsq.queues.nsq`) or directly. A message read off the channel
goes, in this module, from the consumer into a batch (:class:`EventBatcher`), from the
batch into the trigger's events, and back to nsqd as a FIN or REQ once the batch is
settled.

Batches: one ``TriggerEvent`` carries up to ``batch_size`` messages, collected for up to
``batch_timeout`` seconds after the first one arrived, so a burst becomes a few database
rows instead of one per message. ``min_event_interval`` spaces the events out: a batch is
handed over only once the previous batch has been settled (its event stored, or given
up) and at least that many seconds have passed since the previous event was stored.
Meanwhile its messages stay in flight (TOUCHed) and later messages keep filling it up to
``batch_size``. The reason is Airflow's scheduler up to 3.3: storing an asset event
queues a run of each DAG scheduled on the asset only when none is queued yet, and the
run it then creates takes the events stored up to that queue entry. An event stored
while the entry waits belongs to no run until a *later* event queues the next one.
Events at least ``min_event_interval`` apart each find the previous entry already turned
into a run, as long as the scheduler creates it within that interval
(docs/event-driven.md says when it does not).

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
``msg_timeout_ms``:
:meth:`~airflow_provider_nsq.hooks.base.NSQBaseHook.held_consumer_options`), so that a
dead triggerer's batch is back about when Airflow has moved its triggers. At-least-once:
duplicates, never losses. While it runs, the stream reports its health
(:mod:`~airflow_provider_nsq.triggers.health`).

On Airflow 3.0-3.2 (no ack mode; this module imports there all the same, with
:data:`ACK_MODE` False) :meth:`NSQEventTrigger.run` drives the same producer itself and
settles each batch right after its events are handed to the triggerer, before they are
stored: a triggerer crash in between loses that batch. Weaker; it says so in a warning
when it starts, and docs/compatibility.md says so.

Both read through the consumer,
:class:`~airflow_provider_nsq.client.consumer.AsyncNSQConsumer`, held by an
:class:`~airflow_provider_nsq.client.holding.holder.AsyncMessageHolder` (which TOUCHes
what it holds and publishes the dead letters): every nsqd of the connection (found
through nsqlookupd when it names any, re-asked every ``lookupd_poll_interval``), one
``max_in_flight`` budget split across them, dropped nsqds reconnected with backoff, and
FIN/REQ/TOUCH on the connection that delivered the message. The payload's ``nsqd`` is
that nsqd's address.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterable,
    Sequence,
)
from typing import Any, TypeVar

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from ..client import AsyncNSQConsumer, NSQMessage
from ..client.backoff import reconnect_backoff
from ..client.consumer import DEFAULT_LOOKUPD_POLL_INTERVAL_S, UNREACHABLE
from ..client.holding.asyncio_dead_letters import AsyncDeadLetterPublisher
from ..client.holding.holder import AsyncMessageHolder
from ..client.message import MessageFilter, import_callable, message_records
from ..client.settings.values import Delay, delay_to_ms, duration_to_seconds, parse_seconds
from ..hooks.consumer import NSQConsumerHook
from ..metrics import emitter
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT
from ..protocol.errors import NSQError, NSQTLSError, NSQValueError
from ..protocol.names import validate_channel_name, validate_topic_name
from ..protocol.value_checks import check_delay_ms, check_int, is_number
from .health import HealthReports, TriggerHealth

try:
    from airflow.triggers.shared_stream import (
        AdvanceItem,
        SharedStreamProducer,
        reject_shared_stream_event,
    )

    #: True on Airflow >= 3.3: the triggerer FINs through the shared-stream ack channel.
    ACK_MODE = True
except ImportError:  # Airflow 3.0-3.2 (tests/triggers/test_event_trigger.py imports it so)
    ACK_MODE = False
    SharedStreamProducer = object  # type: ignore[assignment,misc]
    # Before 3.3 nothing calls these (shared_stream_key() is None there, so the
    # triggerer never filters a stream); they exist so this module imports.
    AdvanceItem = Any  # type: ignore[assignment,misc]

    def reject_shared_stream_event() -> None:
        """No shared stream before Airflow 3.3: nothing to reject."""


__all__ = ["ACK_MODE", "NSQEventStreamProducer", "NSQEventTrigger"]

log = logging.getLogger(__name__)
_METRICS = emitter("triggerer")
T = TypeVar("T")

#: Messages per event by default: a burst of up to a thousand becomes one event, and a
#: busy topic (100 messages/s) one event per ``DEFAULT_MIN_EVENT_INTERVAL_S`` and the
#: store (about 6 s): batches of ~600 keep up with it.
DEFAULT_BATCH_SIZE = 1000
#: How long a batch collects after its first message: a burst published by one client
#: reaches the trigger within a fraction of a second (docs/event-driven.md, "Measured").
DEFAULT_BATCH_TIMEOUT_S = 2.0
#: Spacing between two events of one trigger when batching: several times how long the
#: scheduler takes to turn a queued asset event into a DAG run (about a second here).
DEFAULT_MIN_EVENT_INTERVAL_S = 5.0
#: Upper bound of ``batch_timeout`` and ``min_event_interval``: a held message is TOUCHed,
#: but nsqd ends its life --max-msg-timeout (15 min by default) after delivery anyway.
MAX_HOLD_S = 300.0
#: How often a batch waiting for the previous one to be settled looks again.
SETTLE_POLL_S = 0.2
#: How long one read waits when nothing is being collected (the consumer keeps its
#: connections alive, re-polls nsqlookupd and reconnects inside the read).
IDLE_READ_S = 30.0
#: ``max_in_flight`` when not given: this, or ``batch_size`` when larger (a batch can only
#: hold messages in flight).
DEFAULT_MAX_IN_FLIGHT = 100
DEFAULT_REQUEUE_DELAY_MS = 5_000


def check_batch_size(batch_size: object) -> int:
    """``batch_size`` as an int 1-2500 (nsqd's default --max-rdy-count: a batch can only
    hold messages in flight at once)."""
    return check_int(batch_size, "batch_size", minimum=1, maximum=DEFAULT_MAX_RDY_COUNT)


def hold_seconds(value: object, what: str) -> float:
    """A hold (``batch_timeout``, ``min_event_interval``) as float seconds, 0-300: a number
    of seconds or a ``timedelta``."""
    if (is_number(value) and value == 0) or value == datetime.timedelta(0):
        return 0.0
    try:
        seconds = parse_seconds(value)
    except NSQValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_HOLD_S:
        raise NSQValueError(
            f"{what} must be 0-{MAX_HOLD_S:g} seconds (a number or a timedelta; nsqd's "
            f"--max-msg-timeout ends a held message's life), got {value!r}"
        )
    return seconds


# -- batches --------------------------------------------------------------------------------


class MessageBatch:
    """Messages that become one asset event, with their JSON-safe records.

    ``number`` orders the batches of one stream. Triggers sharing a stream mark the
    records their ``message_filter`` accepted (:meth:`accept`); a message no trigger
    accepted is one every filter rejected (dead-lettered, then FINished).
    """

    __slots__ = ("_accepted", "messages", "number", "opened_at", "records")

    def __init__(self, number: int, opened_at: float) -> None:
        self.number = number
        self.opened_at = opened_at
        self.messages: list[NSQMessage] = []
        self.records: list[dict[str, Any]] = []
        self._accepted: set[int] = set()

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        return f"<MessageBatch #{self.number}: {len(self)} message(s)>"

    def accept(self, indexes: Iterable[int]) -> None:
        """Record that a trigger's filter accepted the messages at ``indexes``."""
        self._accepted.update(indexes)

    def accepted(self, index: int) -> bool:
        """True when some trigger's filter accepted the message at ``index``."""
        return index in self._accepted


def batch_payload(records: list[dict[str, Any]], *, filtered: int) -> dict[str, Any]:
    """The event payload of a batch (``batch_size`` > 1).

    :param records: the records of the batch this trigger accepted, in delivery order.
    :param filtered: how many messages of the batch the trigger's filter rejected.
    """
    return {
        "messages": records,
        "count": len(records),
        "redelivered": sum(1 for r in records if r["attempts"] > 1),
        "filtered": filtered,
    }


class EventBatcher:
    """Collects delivered messages of ``topic``/``channel`` into :class:`MessageBatch`
    es and decides when the next one is handed over (see the module docstring): the
    Airflow 3.3 ack-mode producer settles a batch when Airflow confirms its events stored
    (or gives up), the pre-3.3 ``run()`` right after handing the event to the triggerer.

    :param topic: the messages' topic, in their records.
    :param channel: the messages' channel, in their records.
    :param batch_size: at most this many messages per batch.
    :param batch_timeout: seconds a batch collects after its first message (0: what has
        arrived by then).
    :param min_event_interval: seconds between the previous event being stored and the
        next batch being handed over; 0 hands batches over as soon as they are complete,
        without waiting for the previous one to be settled.
    :param clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        batch_size: int,
        batch_timeout: float,
        min_event_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.batch_size = check_batch_size(batch_size)
        self.batch_timeout = hold_seconds(batch_timeout, "batch_timeout")
        self.min_event_interval = hold_seconds(min_event_interval, "min_event_interval")
        self._clock = clock
        self._collecting: deque[MessageBatch] = deque()
        self._numbers = 0
        self._unsettled = 0
        self._last_stored: float | None = None

    def add(self, messages: Sequence[NSQMessage]) -> None:
        """Add delivered messages: to the newest batch until it is full, then to a new one
        (their records made a batch's share at a time)."""
        start = 0
        while start < len(messages):
            batch = self._collecting[-1] if self._collecting else None
            if batch is None or len(batch) >= self.batch_size:
                self._numbers += 1
                batch = MessageBatch(self._numbers, self._clock())
                self._collecting.append(batch)
            taken = messages[start : start + self.batch_size - len(batch)]
            batch.messages += taken
            batch.records += message_records(taken, self.topic, self.channel)
            start += len(taken)

    def held(self) -> list[NSQMessage]:
        """Messages collected and not handed over yet (their holder keeps them alive)."""
        return [m for batch in self._collecting for m in batch.messages]

    def wait(self) -> float | None:
        """Seconds until the oldest batch may be handed over: 0 when now; None when there
        is nothing to hand over."""
        if not self._collecting:
            return None
        head = self._collecting[0]
        now = self._clock()
        due = now if len(head) >= self.batch_size else head.opened_at + self.batch_timeout
        if self.min_event_interval > 0:
            if self._unsettled:
                # The previous event is not stored yet: the spacing cannot start.
                return max(due - now, SETTLE_POLL_S)
            if self._last_stored is not None:
                due = max(due, self._last_stored + self.min_event_interval)
        return max(due - now, 0.0)

    def pop(self) -> MessageBatch | None:
        """The oldest batch when it may be handed over now (it then awaits :meth:`settled`)."""
        if self.wait() != 0:
            return None
        self._unsettled += 1
        return self._collecting.popleft()

    async def next_batch(
        self, read: Callable[[float], Awaitable[list[NSQMessage]]]
    ) -> MessageBatch:
        """Read (``read(timeout)``: the consumer's deliveries within ``timeout`` seconds)
        until a batch may be handed over, and return it."""
        while True:
            batch = self.pop()
            if batch is not None:
                return batch
            wait = self.wait()
            self.add(await read(IDLE_READ_S if wait is None else wait))

    def settled(self, batch: MessageBatch, *, stored: bool) -> None:
        """A handed-over batch is done with: ``stored`` when an event of it was stored
        (the next one is spaced from now), False when none was (rejected, or failed and
        requeued)."""
        self._unsettled = max(self._unsettled - 1, 0)
        if stored:
            self._last_stored = self._clock()


# -- the stream producer ----------------------------------------------------------------------


async def _start_holder(
    options: dict[str, Any],
    topic: str,
    channel: str,
    max_in_flight: int,
    lookupd_poll_interval: float,
    dead_letters: Callable[[], AsyncDeadLetterPublisher | None],
) -> AsyncMessageHolder:
    """A started consumer with ``options`` (the connection's
    :meth:`~airflow_provider_nsq.hooks.base.NSQBaseHook.held_consumer_options`) over every
    nsqd of the connection, held by a holder that gives messages up to
    ``dead_letters()`` (a publisher of its own for each try).

    While no nsqd (or no nsqlookupd) can be reached it keeps trying, with the consumer's
    backoff: a triggerer that starts before nsqd must not fail its assets. What retrying
    cannot fix (nsqd refused the subscription or AUTH, a bad setting, TLS) is raised.
    Once started, the consumer itself reconnects dropped nsqds and re-asks nsqlookupd
    every ``lookupd_poll_interval`` seconds.
    """
    backoff = reconnect_backoff()
    while True:
        consumer = AsyncNSQConsumer(
            topic, channel, lookupd_poll_interval=lookupd_poll_interval, **options
        )
        holder = AsyncMessageHolder(consumer, dead_letters=dead_letters())
        try:
            await holder.start(max_in_flight)  # closes what it opened if it fails
        except NSQTLSError:
            raise  # every nsqd refused the TLS handshake: retrying will not fix it
        except UNREACHABLE as exc:
            wait = backoff.next()
            log.warning("Cannot read %s/%s yet (%s); retrying in %gs", topic, channel, exc, wait)
            await asyncio.sleep(wait)
            continue
        break
    connections = consumer.connections
    capacity = sum(c.max_rdy_count for c in connections.values())
    if connections and max_in_flight > capacity:
        # The consumer never sends an nsqd a RDY above its limit (nsqd would drop the
        # connection): fewer messages are in flight than asked for.
        log.warning(
            "max_in_flight=%s exceeds nsqd's max RDY count (%s over %s nsqd(s), "
            "--max-rdy-count): at most %s messages of %s/%s are in flight at once",
            *(max_in_flight, capacity, len(connections), capacity, topic, channel),
        )
    lookupds = options["lookupd_http_addresses"]
    log.info(
        "Reading %s/%s from %s (max in flight %s): %s",
        topic,
        channel,
        f"nsqlookupd {', '.join(lookupds)}" if lookupds else "the connection's nsqd(s)",
        max_in_flight,
        ", ".join(connections) or "no nsqd has the topic yet",
    )
    return holder


class NSQEventStreamProducer(SharedStreamProducer):
    """The broker side of one NSQ event stream: in ack mode (Airflow >= 3.3) the shared
    stream's producer, before that what :meth:`NSQEventTrigger.run` drives itself.

    Owns the subscription for one (connection, topic, channel): one consumer over every
    nsqd of the connection, with one ``max_in_flight`` budget split across them, held
    by a holder that TOUCHes the messages meanwhile (collecting, or waiting for the
    store). Yields one raw event per batch (:class:`MessageBatch`); answers nsqd only in
    :meth:`settle` (through :meth:`advance` in ack mode), after Airflow stored every
    event derived from the batch, on the nsqd that delivered each message.

    Keyword arguments are :class:`NSQEventTrigger`'s (``message_filter`` is per trigger
    and ignored here).
    """

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        nsq_conn_id: str = NSQConsumerHook.default_conn_name,
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
            topic=topic,
            channel=channel,
            batch_size=batch_size,
            batch_timeout=batch_timeout,
            min_event_interval=min_event_interval,
        )
        self.holder: AsyncMessageHolder | None = None
        self.health: TriggerHealth | None = None
        self._reports: HealthReports | None = None
        self._metrics = _METRICS.tagged(topic=topic, channel=channel)

    @property
    def consumer(self) -> AsyncNSQConsumer | None:
        """The stream's consumer while it runs (held: read it, never call it)."""
        return None if self.holder is None else self.holder.consumer

    async def open_stream(self) -> AsyncGenerator[tuple[MessageBatch, MessageBatch], None]:
        hook = NSQConsumerHook(nsq_conn_id=self.nsq_conn_id)
        settings = await hook.aget_settings()
        config = settings.client
        check_delay_ms(self.requeue_delay_ms, config.max_req_timeout_ms, what="requeue_delay")
        dead_letter_topic = self.dead_letter_topic

        def dead_letters() -> AsyncDeadLetterPublisher | None:
            if not dead_letter_topic:
                return None
            return AsyncDeadLetterPublisher(dead_letter_topic, config, nsqds=settings.nsqds)

        # A short msg_timeout of its own: what a dead triggerer held comes back soon.
        options = hook.held_consumer_options()
        health = self.health = TriggerHealth(
            "event",
            _METRICS,
            nsqds=() if options["lookupd_http_addresses"] else options["nsqd_tcp_addresses"],
            topic=self.topic,
            channel=self.channel,
        )
        self.holder = holder = await _start_holder(
            options,
            self.topic,
            self.channel,
            self.max_in_flight,
            self.lookupd_poll_interval,
            dead_letters,
        )
        self._reports = HealthReports(health, lambda: self.consumer)
        self._reports.start()
        while True:
            # What the consumer delivers stays held (and TOUCHed) until it is answered.
            batch = await self.batcher.next_batch(holder.read)
            self._metrics.incr("nsq.event.received", len(batch))
            # Airflow's contract: (raw event, what settling it needs). Here both are the
            # batch: its records, the marks each trigger's filter leaves, its messages.
            yield batch, batch

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
        holder = self.holder
        if holder is None:
            return
        metrics = self._metrics
        if acked > 0 and batch.messages:
            # Publish (nsqd's timestamp) to the asset event stored, for the oldest message.
            oldest_ns = min(m.timestamp for m in batch.messages)
            metrics.timing("nsq.event.delay", time.time() - oldest_ns / 1e9)
        if failed or not (acked > 0 or rejected > 0):
            self._answer("REQ", holder.requeue, batch.messages)
            metrics.incr("nsq.event.requeued", len(batch))
            return
        finish: list[NSQMessage] = []
        requeue: list[NSQMessage] = []
        dead_lettered = 0
        for index, message in enumerate(batch.messages):
            if batch.accepted(index) or not self.dead_letter_topic:
                finish.append(message)
            elif await self._give_up(holder, message):
                dead_lettered += 1  # published, then FINished by the holder
            else:
                requeue.append(message)
        self._answer("FIN", holder.finish, finish)
        self._answer("REQ", holder.requeue, requeue)
        for what, count in (
            ("finished", len(finish) + dead_lettered),
            ("requeued", len(requeue)),
            ("dead_lettered", dead_lettered),
        ):
            if count:
                metrics.incr(f"nsq.event.{what}", count)

    def _answer(
        self, what: str, respond: Callable[..., None], messages: Sequence[NSQMessage]
    ) -> None:
        """FIN or REQ ``messages`` (one write per nsqd); a connection that is gone is
        logged, not raised: nsqd redelivers its messages after msg_timeout, and nothing
        else may answer them."""
        if not messages:
            return
        try:
            if what == "REQ":
                respond(*messages, delay_ms=self.requeue_delay_ms)
            else:
                respond(*messages)
        except NSQError as exc:
            log.warning(
                "Could not %s %s message(s) of %s/%s (%s): nsqd redelivers them after "
                "their msg_timeout",
                *(what, len(messages), self.topic, self.channel, exc),
            )

    async def _give_up(self, holder: AsyncMessageHolder, message: NSQMessage) -> bool:
        """Publish a message every filter rejected to ``dead_letter_topic`` (the one
        dead-letter envelope, ``"reason": "rejected"``), then FIN it; False (logged, the
        message left for a REQ) when the publish failed."""
        by = {"trigger": "NSQEventTrigger", "nsq_conn_id": self.nsq_conn_id}
        failed = await holder.give_up(message, "rejected", by=by)
        if failed is None:
            return True
        log.warning(
            "Could not publish message %s from %s to the dead-letter topic %s (%s); "
            "requeueing it instead",
            *(message.id, message.nsqd, self.dead_letter_topic, failed),
        )
        return False

    async def aclose(self) -> None:
        """Stop reporting; CLS, REQ what is still unanswered (redelivered at once), close."""
        reports, self._reports = self._reports, None
        if reports is not None:
            reports.stop()
        holder, self.holder = self.holder, None
        if holder is not None:
            await holder.close()  # stops its TOUCH; CLS (RDY 0), REQ, close, dead letters


# -- the trigger ------------------------------------------------------------------------------


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
        nsq_conn_id: str = NSQConsumerHook.default_conn_name,
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

    def _stream_kwargs(self) -> dict[str, Any]:
        """What the stream producer takes: every argument but the per-trigger filter."""
        return {
            "topic": self.topic,
            "channel": self.channel,
            "nsq_conn_id": self.nsq_conn_id,
            "batch_size": self.batch_size,
            "batch_timeout": self.batch_timeout,
            "min_event_interval": self.min_event_interval,
            "max_in_flight": self.max_in_flight,
            "requeue_delay": self.requeue_delay,
            "dead_letter_topic": self.dead_letter_topic,
            "lookupd_poll_interval": self.lookupd_poll_interval,
        }

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"message_filter": self.message_filter, **self._stream_kwargs()},
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
        dropped unfinished (the generator is made on the first ``await``, inside the
        loop).
        """
        return _LoopGenerator(self._settled_events)

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
        producer = NSQEventStreamProducer(**self._stream_kwargs())
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


class _LoopGenerator(AsyncIterator[T]):
    """The items of the async generator ``start()`` makes, made on the first ``await``,
    so that the event loop always closes it, however its caller lets go.

    A trigger's ``run()`` that holds a subscription releases it in a ``finally:`` that
    awaits (CLS, REQ what was taken and not answered). Python runs that ``finally:`` when
    the generator is closed, and how depends on the caller: ``aclose()`` and cancellation
    run it in the loop; a generator dropped unfinished is handed to the loop's finalizer
    (``aclose()`` in a task) only if its first step was taken inside a running loop. One
    whose first step was taken outside (``asyncio.run(trigger.run().__anext__())``) is
    closed by the garbage collector, where nothing can be awaited, and Python reports
    "async generator ignored GeneratorExit". Made on its first ``await``, the generator
    is always made inside the loop, so the loop owns its end.

    :param start: makes the generator (called once, inside the running event loop).
    """

    def __init__(self, start: Callable[[], AsyncGenerator[T, None]]) -> None:
        self._start = start
        self._generator: AsyncGenerator[T, None] | None = None
        self._closed = False

    def __aiter__(self) -> _LoopGenerator[T]:
        return self

    async def __anext__(self) -> T:
        if self._generator is None:
            if self._closed:
                raise StopAsyncIteration
            self._generator = self._start()
        return await anext(self._generator)

    async def aclose(self) -> None:
        """Close the generator (its ``finally:`` runs now, in the loop)."""
        self._closed = True
        if self._generator is not None:
            await self._generator.aclose()
