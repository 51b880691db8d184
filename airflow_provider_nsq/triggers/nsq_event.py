"""``NSQEventTrigger``: event-driven DAGs from an NSQ channel, one asset event per message.

Used through ``MessageQueueTrigger(scheme="nsq", ...)`` in an ``AssetWatcher`` (see
:mod:`airflow_provider_nsq.queues.nsq`) or directly. Every message taken off the channel
becomes one ``TriggerEvent`` whose payload is the message's JSON-safe record
(:func:`~airflow_provider_nsq.client.records.message_record`).

On Airflow >= 3.3 the trigger runs in the triggerer's shared-stream **ack mode**
(``airflow/triggers/shared_stream.py``): all triggers on one (connection, topic, channel)
share one consumer, :class:`NSQEventStreamProducer`, and a message is FINished only in
:meth:`~NSQEventStreamProducer.advance`, which Airflow calls after the asset events
derived from it are stored in the metadata database. Until then the producer TOUCHes the
message so nsqd does not redeliver it early. A subscriber that failed (ack timeout,
overflow) or a broadcast nobody took gets the message REQ'd; a message every filter
rejected is FINished, after a publish to ``dead_letter_topic`` when one is set. A
triggerer that dies leaves its messages in flight: nsqd redelivers them after its
msg_timeout, to the next triggerer. At-least-once: duplicates, never losses.

On Airflow 3.0-3.2 (no ack mode) :meth:`NSQEventTrigger.run` keeps its own consumer and
FINs each message right after its event is handed to the triggerer, before the event is
stored: a triggerer crash in between loses that message. Weaker; documented as such.

Both read through the consumer core,
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
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from functools import partial
from typing import Any, NamedTuple

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from ..client import AsyncNSQConnection, AsyncNSQConsumer, ClientConfig, NSQMessage
from ..client.backoff import Backoff
from ..client.consumer import (
    DEFAULT_LOOKUPD_POLL_INTERVAL_S,
    RECONNECT_MAX_S,
    RECONNECT_START_S,
    UNREACHABLE,
)
from ..client.records import MessageFilter, import_callable, message_record
from ..hooks.nsq import Delay, NSQHook, delay_to_ms, duration_to_seconds
from ..protocol.commands import check_delay_ms
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT
from ..protocol.errors import NSQError, NSQTLSError, NSQValueError
from ..protocol.names import validate_channel_name, validate_topic_name

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

#: How long one read waits for deliveries before looping (heartbeats keep the link alive;
#: the consumer re-polls nsqlookupd and reconnects inside the read).
_READ_WAIT_S = 30.0

DEFAULT_MAX_IN_FLIGHT = 100
DEFAULT_REQUEUE_DELAY_MS = 5_000


async def _start_consumer(
    hook: NSQHook,
    topic: str,
    channel: str,
    max_in_flight: int,
    lookupd_poll_interval: float,
) -> AsyncNSQConsumer:
    """A started :class:`AsyncNSQConsumer` over every nsqd of the connection: found
    through its nsqlookupds when it names any, else its nsqd list (``host:port``, then
    ``nsqd_tcp_addresses``).

    While no nsqd (or no nsqlookupd) can be reached it keeps trying, with the core's
    backoff: a triggerer that starts before nsqd must not fail its assets. What retrying
    cannot fix (nsqd refused the subscription or AUTH, a bad setting) is raised. Once
    started, the core itself reconnects dropped nsqds and re-asks nsqlookupd every
    ``lookupd_poll_interval`` seconds.
    """
    await hook.aget_client_config()  # consumer_options() then reads the cached settings
    options = hook.consumer_options()
    backoff = Backoff(RECONNECT_START_S, RECONNECT_MAX_S)
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
        # The core never sends an nsqd a RDY above its limit (nsqd would drop the
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


class _Delivery(NamedTuple):
    """The broker payload of one raw event: the message and the nsqd that delivered it
    (FIN/REQ/TOUCH go back on that nsqd's connection: the message knows it)."""

    nsqd: str
    message: NSQMessage


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


def _answer(what: str, delivery: _Delivery, respond: Callable[[], None]) -> None:
    """FIN or REQ one message (``respond`` does it); a connection that is gone is
    logged, not raised: nsqd redelivers its messages after msg_timeout."""
    try:
        respond()
    except NSQError as exc:
        log.warning(
            "Could not %s message %s on %s (%s): nsqd redelivers it after its msg_timeout",
            what,
            delivery.message.id,
            delivery.nsqd,
            exc,
        )


class _Stream:
    """One subscription as :class:`NSQEventTrigger` describes it, however Airflow runs it
    (the shared stream of ack mode, or the trigger's own ``run``): it opens the consumer,
    reads each message as its record and delivery, and settles each one by the same
    rule."""

    def __init__(self, trigger: NSQEventTrigger) -> None:
        self.trigger = trigger
        self.consumer: AsyncNSQConsumer | None = None
        self._dead_letters: _DeadLetters | None = None

    async def open(self) -> AsyncNSQConsumer:
        """Start the consumer (waiting while no nsqd can be reached); raises what
        waiting cannot fix."""
        trigger = self.trigger
        hook = NSQHook(nsq_conn_id=trigger.nsq_conn_id)
        config = await hook.aget_client_config()
        check_delay_ms(trigger.requeue_delay, config.max_req_timeout_ms, what="requeue_delay")
        if trigger.dead_letter_topic:
            self._dead_letters = _DeadLetters(config, trigger.dead_letter_topic)
        self.consumer = await _start_consumer(
            hook,
            trigger.topic,
            trigger.channel,
            trigger.max_in_flight,
            trigger.lookupd_poll_interval,
        )
        return self.consumer

    async def deliveries(self) -> AsyncIterator[tuple[dict[str, Any], _Delivery]]:
        """Every message, as it comes: its record (the event payload) and delivery."""
        consumer = self.consumer
        assert consumer is not None, "open() first"
        topic, channel = self.trigger.topic, self.trigger.channel
        while True:
            for message in await consumer.read(_READ_WAIT_S):
                record = message_record(message, topic, channel)
                yield record, _Delivery(record["nsqd"], message)

    async def settle(
        self, delivery: _Delivery, *, stored: bool, rejected: bool, failed: bool = False
    ) -> None:
        """Answer nsqd for one message once its fate is known, on the nsqd that
        delivered it:

        - ``failed`` (a subscriber failed: ack timeout, overflow), or neither stored nor
          rejected (nobody took it): REQ after ``requeue_delay``, so it comes back;
        - ``stored`` (an event for it is stored): FIN;
        - ``rejected`` by every filter: publish it to ``dead_letter_topic`` (when set),
          then FIN; if that publish fails, REQ instead.

        Never raises: a FIN/REQ that cannot be sent (connection gone) leaves the message
        to nsqd's msg_timeout, which redelivers it.
        """
        consumer = self.consumer
        if consumer is None:
            return
        message = delivery.message
        done = not failed and (stored or rejected)
        if done and not stored and self._dead_letters is not None:
            done = await self._dead_letters.publish(message, delivery.nsqd)
        if done:
            _answer("finish", delivery, partial(consumer.finish, message))
        else:
            delay_ms = self.trigger.requeue_delay
            _answer("requeue", delivery, partial(consumer.requeue, message, delay_ms=delay_ms))

    async def keep_held_alive(self) -> None:
        """TOUCH what the stream holds while Airflow stores its events, as the consumer
        core decides (``touch_held()``), until cancelled."""
        while self.consumer is not None:
            _, next_in = self.consumer.touch_held()
            await asyncio.sleep(next_in)

    async def close(self) -> None:
        """CLS (RDY 0), REQ every unanswered message (redelivered at once), close."""
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            await consumer.close()
        dead_letters, self._dead_letters = self._dead_letters, None
        if dead_letters is not None:
            await dead_letters.close()


class NSQEventStreamProducer(SharedStreamProducer):
    """The broker side of one shared NSQ stream in ack mode (Airflow >= 3.3).

    Owns the subscription for one (connection, topic, channel): one
    :class:`~airflow_provider_nsq.client.consumer.AsyncNSQConsumer` over every nsqd of
    the connection (discovered through nsqlookupd when the connection names any), with
    one ``max_in_flight`` budget split across them. Yields one raw event (the message's
    record) per message; answers nsqd only in :meth:`advance`, after Airflow stored every
    event derived from it, on the nsqd that delivered it. Meanwhile the consumer core
    TOUCHes the messages still unanswered (``touch_held()``), so a slow store does not
    make nsqd redeliver them.

    Keyword arguments are :class:`NSQEventTrigger`'s, as it serializes them
    (``message_filter`` is per trigger and not used here).
    """

    def __init__(self, **trigger_kwargs: Any) -> None:
        self._stream = _Stream(NSQEventTrigger(**trigger_kwargs))
        self._toucher: asyncio.Task[None] | None = None

    async def open_stream(self) -> AsyncIterator[tuple[dict[str, Any], _Delivery]]:
        await self._stream.open()
        self._toucher = asyncio.create_task(self._stream.keep_held_alive())
        async for raw_event in self._stream.deliveries():
            yield raw_event

    def get_advance_lane(self, broker_payload: _Delivery) -> Hashable:
        # FIN is per message (no cumulative offset): one lane each, so a message still
        # waiting for a slow subscriber never holds back the FIN of later ones.
        return (broker_payload.nsqd, broker_payload.message.id)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        """Answer nsqd for each resolved message (see :meth:`_Stream.settle`): FIN once a
        subscriber stored an event for it, dead-letter then FIN when every subscriber
        rejected it, REQ when one failed or none was online. Never raises."""
        for item in batch:
            outcome = item.outcome
            await self._stream.settle(
                item.broker_payload,
                stored=outcome.acked > 0,
                rejected=outcome.rejected > 0,
                failed=bool(outcome.failed),
            )

    async def aclose(self) -> None:
        """Stop touching; REQ what is still unanswered (redelivered at once); close."""
        toucher, self._toucher = self._toucher, None
        if toucher is not None:
            toucher.cancel()
            try:
                await toucher
            except asyncio.CancelledError:
                pass
        await self._stream.close()


class NSQEventTrigger(BaseEventTrigger):
    """Fire one event per message on an NSQ channel: for event-driven DAGs (assets).

    The event payload is the message as a JSON-safe dict: ``body`` (text; base64 text
    when ``body_encoding == "base64"``), ``body_encoding``, ``id``, ``attempts``,
    ``timestamp`` (ns since the epoch, set by nsqd at publish), ``topic``, ``channel``,
    ``nsqd`` (``host:port`` of the nsqd that delivered it). Delivery is at-least-once: a
    DAG may see a message twice (same ``nsqd`` and ``id``, higher ``attempts``).

    It reads from every nsqd of the connection: those nsqlookupd lists for the topic
    when the connection has ``lookupd_http_addresses`` (asked again every
    ``lookupd_poll_interval``: nsqds that start carrying the topic are joined, those that
    stop are left once their messages are answered), else the connection's ``host:port``
    and its ``nsqd_tcp_addresses``. An nsqd that drops is reconnected with backoff; the
    others go on meanwhile.

    On Airflow >= 3.3 the message is FINished only after Airflow stored the event (see
    the module docstring); triggers with the same connection, topic and channel share
    one subscription, whose ``max_in_flight``, ``requeue_delay``, ``dead_letter_topic``
    and ``lookupd_poll_interval`` are those of the first trigger to start.

    :param topic: the topic name.
    :param channel: the channel name; a durable channel keeps messages while no
        triggerer is running.
    :param nsq_conn_id: the ``nsq`` Connection to use.
    :param message_filter: dotted path to a ``callable(record) -> bool``; messages it
        rejects fire no event (and, when no other trigger on the channel takes them, go
        to ``dead_letter_topic``, or are dropped). A filter that raises keeps the
        message (the error is logged).
    :param max_in_flight: messages held unanswered at once across all nsqds (the RDY
        counts, split between them; default 100, at most 2500). No nsqd is given more
        than its --max-rdy-count.
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
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        requeue_delay: Delay = DEFAULT_REQUEUE_DELAY_MS,
        dead_letter_topic: str | None = None,
        lookupd_poll_interval: float | datetime.timedelta = DEFAULT_LOOKUPD_POLL_INTERVAL_S,
    ) -> None:
        super().__init__()
        validate_topic_name(topic)
        validate_channel_name(channel)
        self.topic, self.channel, self.nsq_conn_id = topic, channel, nsq_conn_id
        if message_filter is not None and not isinstance(message_filter, str):
            raise NSQValueError(
                "message_filter must be a dotted path (module.function) so the trigger can "
                f"be serialised, got {message_filter!r}"
            )
        self.message_filter = message_filter
        if (
            isinstance(max_in_flight, bool)
            or not isinstance(max_in_flight, int)
            or not 1 <= max_in_flight <= DEFAULT_MAX_RDY_COUNT
        ):
            raise NSQValueError(
                f"max_in_flight must be an int 1-{DEFAULT_MAX_RDY_COUNT}, got {max_in_flight!r}"
            )
        self.max_in_flight = max_in_flight
        self.requeue_delay = delay_to_ms(requeue_delay, "requeue_delay")
        if dead_letter_topic is not None:
            validate_topic_name(dead_letter_topic)
            if dead_letter_topic == topic:
                raise NSQValueError(
                    f"dead_letter_topic must differ from topic ({topic!r}): rejected "
                    "messages would come straight back"
                )
        self.dead_letter_topic = dead_letter_topic
        self.lookupd_poll_interval = duration_to_seconds(
            lookupd_poll_interval, "lookupd_poll_interval"
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # The keyword arguments are the attributes of the same names (normalised: the
        # delay in ms, the poll interval in seconds).
        first = ("topic", "channel", "nsq_conn_id", "message_filter", "max_in_flight")
        names = (*first, "requeue_delay", "dead_letter_topic", "lookupd_poll_interval")
        kwargs = {name: getattr(self, name) for name in names}
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    # -- the user's filter -------------------------------------------------------------

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
        async for record in shared_stream:
            if self._accepts(keep, record):
                yield TriggerEvent(record)
            else:
                reject_shared_stream_event()

    # -- Airflow 3.0-3.2: FIN right after the event is handed over ----------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """The pre-3.3 path (also what a direct ``run()`` does): FIN each message right
        after its event is yielded, which is before the triggerer stored it."""
        keep = self._load_filter()
        stream = _Stream(self)
        try:
            await stream.open()
            async for record, delivery in stream.deliveries():
                if not self._accepts(keep, record):
                    await stream.settle(delivery, stored=False, rejected=True)
                    continue
                yield TriggerEvent(record)
                await stream.settle(delivery, stored=True, rejected=False)
        finally:
            # Also on cancellation: CLS (RDY 0), REQ what was taken and not answered.
            await stream.close()
