"""``NSQEventTrigger``: event-driven DAGs from an NSQ channel, one asset event per message.

Used through ``MessageQueueTrigger(scheme="nsq", ...)`` in an ``AssetWatcher`` (see
:mod:`airflow_provider_nsq.queues.nsq`) or directly. Every message taken off the channel
becomes one ``TriggerEvent`` whose payload is the message's JSON-safe record
(:func:`~airflow_provider_nsq.client.records.message_record` plus ``nsqd``).

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

On Airflow 3.0-3.2 (no ack mode) :meth:`NSQEventTrigger.run` keeps one connection and
FINs each message right after its event is handed to the triggerer, before the event is
stored: a triggerer crash in between loses that message. Weaker; documented as such.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from typing import Any, NamedTuple

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from ..client import AsyncNSQConnection, ClientConfig, NSQMessage
from ..client.records import MessageFilter, import_callable, message_record
from ..hooks.nsq import Delay, NSQHook, delay_to_ms
from ..protocol.commands import check_delay_ms
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT, DEFAULT_MSG_TIMEOUT_MS
from ..protocol.errors import (
    NSQConnectionError,
    NSQError,
    NSQTimeoutError,
    NSQTLSError,
    NSQValueError,
)
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

#: Reconnect backoff after a dropped connection: first and longest wait, seconds.
_BACKOFF_START_S = 1.0
_BACKOFF_MAX_S = 30.0
#: How long one read waits for deliveries before looping (heartbeats keep the link alive).
_READ_WAIT_S = 30.0
#: How long closing waits for nsqd's CLOSE_WAIT.
_CLOSE_WAIT_S = 5.0
#: TOUCH outstanding messages this many times per msg_timeout.
_TOUCHES_PER_TIMEOUT = 3

DEFAULT_MAX_IN_FLIGHT = 100
DEFAULT_REQUEUE_DELAY_MS = 5_000


class _NSQDStream:
    """One long-lived subscription on one nsqd: reconnects (and re-subscribes) with
    backoff when the connection drops; raises on what retrying cannot fix (refused
    subscription, TLS, AUTH).

    Shaped like the multi-nsqd consumer core (``start(max_in_flight)``, ``read(timeout)``,
    ``finish``/``requeue``/``touch``, ``close()``) so the trigger can move onto it.
    ``close()`` REQs every message it handed out that is still unanswered.
    """

    def __init__(self, config: ClientConfig, topic: str, channel: str) -> None:
        self.config = config
        self.topic = topic
        self.channel = channel
        self.connection: AsyncNSQConnection | None = None  # the live one, for tests
        self._max_in_flight = 1
        self._handed_out: list[NSQMessage] = []

    @property
    def nsqd(self) -> str:
        return self.config.address

    @property
    def msg_timeout_ms(self) -> int:
        """nsqd's msg_timeout for this connection (from IDENTIFY when negotiated)."""
        if self.connection is not None and self.connection.connected:
            negotiated = self.connection.server_info.get("msg_timeout")
            if isinstance(negotiated, int) and negotiated > 0:
                return negotiated
        return self.config.msg_timeout_ms or DEFAULT_MSG_TIMEOUT_MS

    async def start(self, max_in_flight: int) -> None:
        self._max_in_flight = max_in_flight
        await self._connect()

    async def _connect(self) -> None:
        backoff = _BACKOFF_START_S
        while True:
            conn = AsyncNSQConnection(self.config)
            try:
                await conn.connect()
                if self._max_in_flight > conn.max_rdy_count:
                    raise NSQValueError(
                        f"max_in_flight={self._max_in_flight} exceeds nsqd's max RDY count "
                        f"({conn.max_rdy_count}, --max-rdy-count) at {self.nsqd}"
                    )
                await conn.subscribe(self.topic, self.channel)
                conn.ready(self._max_in_flight)
            except NSQTLSError:
                await conn.close()
                raise
            except (NSQConnectionError, NSQTimeoutError) as exc:
                await conn.close()
                log.warning(
                    "Cannot subscribe to %s/%s at %s (%s); retrying in %gs",
                    self.topic,
                    self.channel,
                    self.nsqd,
                    exc,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
                continue
            except BaseException:
                await conn.close()
                raise
            self.connection = conn
            log.info(
                "Subscribed to %s/%s at %s (max in flight %s)",
                self.topic,
                self.channel,
                self.nsqd,
                self._max_in_flight,
            )
            return

    async def read(self, timeout: float) -> list[NSQMessage]:
        """Messages delivered within ``timeout`` seconds (maybe none)."""
        conn = self.connection
        if conn is None:
            raise NSQValueError("the stream is not started: call start() first")
        try:
            messages = await conn.read_messages(timeout)
        except NSQTLSError:
            raise
        except (NSQConnectionError, NSQTimeoutError) as exc:
            # Its unanswered messages stay in flight on nsqd until msg_timeout, then are
            # redelivered (nsqd does not requeue on disconnect).
            log.warning("Lost the connection to %s (%s); reconnecting", self.nsqd, exc)
            self.connection = None
            await conn.close()
            self._handed_out = []
            await self._connect()
            return []
        self._handed_out = [m for m in self._handed_out if not m.responded]
        self._handed_out += messages
        return messages

    def finish(self, message: NSQMessage) -> None:
        message.finish()

    def requeue(self, message: NSQMessage, delay_ms: int = 0) -> None:
        message.requeue(delay_ms)

    def touch(self, *messages: NSQMessage) -> None:
        for message in messages:
            message.touch()

    async def close(self) -> None:
        """CLS, then REQ every unanswered message (delivered at once to the next
        consumer), then close. Without the CLS, a message nsqd is sending right now (say
        one just REQ'd with no delay) would sit in flight until msg_timeout."""
        conn, self.connection = self.connection, None
        if conn is None:
            return
        if conn.connected:
            try:
                # nsqd sends nothing after CLOSE_WAIT: what it sent before is here to REQ.
                await asyncio.wait_for(conn.start_close(), _CLOSE_WAIT_S)
            except (NSQError, asyncio.TimeoutError):
                pass
        for message in self._handed_out:
            try:
                message.requeue(0)
            except NSQError:
                break  # the connection is gone: nsqd's msg_timeout redelivers them
        self._handed_out = []
        await conn.close()  # also REQs what arrived and was never read


class _Delivery(NamedTuple):
    """The broker payload of one raw event: the message and the nsqd that owns it."""

    nsqd: str
    message: NSQMessage


class _DeadLetters:
    """Publishes rejected messages to ``topic`` on a connection of its own, one at a time."""

    def __init__(self, config: ClientConfig, topic: str) -> None:
        self.topic = topic
        self._conn = AsyncNSQConnection(config)

    async def publish(self, message: NSQMessage, nsqd: str) -> bool:
        """True once nsqd accepted the copy; False (logged) when it did not."""
        try:
            await self._conn.publish(self.topic, message.body)
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
        await self._conn.close()


def _answer(what: str, delivery: _Delivery, respond: Callable[..., None], *args: Any) -> None:
    try:
        respond(delivery.message, *args)
    except NSQError as exc:
        log.warning(
            "Could not %s message %s on %s (%s): nsqd redelivers it after its msg_timeout",
            what,
            delivery.message.id,
            delivery.nsqd,
            exc,
        )


class NSQEventStreamProducer(SharedStreamProducer):
    """The broker side of one shared NSQ stream in ack mode (Airflow >= 3.3).

    Owns the subscription for one (connection, topic, channel); yields one raw event (the
    message's record) per message; answers nsqd only in :meth:`advance`, after Airflow
    stored every event derived from it. Meanwhile it TOUCHes outstanding messages a few
    times per msg_timeout, so a slow store does not make nsqd redeliver them.

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
        **_: Any,
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.nsq_conn_id = nsq_conn_id
        self.max_in_flight = max_in_flight
        self.requeue_delay_ms = requeue_delay
        self.dead_letter_topic = dead_letter_topic
        self.stream: _NSQDStream | None = None
        self._outstanding: dict[tuple[str, str], NSQMessage] = {}
        self._dead_letters: _DeadLetters | None = None
        self._toucher: asyncio.Task[None] | None = None

    async def open_stream(self) -> AsyncIterator[tuple[dict[str, Any], _Delivery]]:
        config = await NSQHook(nsq_conn_id=self.nsq_conn_id).aget_client_config()
        check_delay_ms(self.requeue_delay_ms, config.max_req_timeout_ms, what="requeue_delay")
        if self.dead_letter_topic:
            self._dead_letters = _DeadLetters(config, self.dead_letter_topic)
        stream = self.stream = _NSQDStream(config, self.topic, self.channel)
        await stream.start(self.max_in_flight)
        self._toucher = asyncio.create_task(self._touch_outstanding())
        while True:
            for message in await stream.read(_READ_WAIT_S):
                nsqd = stream.nsqd
                self._outstanding[(nsqd, message.id)] = message
                record = message_record(message, self.topic, self.channel, nsqd=nsqd)
                yield record, _Delivery(nsqd, message)

    def get_advance_lane(self, broker_payload: _Delivery) -> Hashable:
        # FIN is per message (no cumulative offset): one lane each, so a message still
        # waiting for a slow subscriber never holds back the FIN of later ones.
        return (broker_payload.nsqd, broker_payload.message.id)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        """Answer nsqd for each resolved message.

        - a subscriber failed (ack timeout, overflow), or no subscriber was online: REQ
          after ``requeue_delay``, so it comes back;
        - at least one subscriber stored an event for it: FIN;
        - every subscriber rejected it: publish it to ``dead_letter_topic`` (when set),
          then FIN; if that publish fails, REQ instead.

        Never raises: a FIN/REQ that cannot be sent (connection gone) leaves the message
        to nsqd's msg_timeout, which redelivers it.
        """
        stream = self.stream
        if stream is None:
            return
        for item in batch:
            delivery: _Delivery = item.broker_payload
            outcome = item.outcome
            key = (delivery.nsqd, delivery.message.id)
            if self._outstanding.get(key) is delivery.message:  # not a later redelivery
                del self._outstanding[key]
            # Done with it: nobody failed, and somebody stored or rejected it.
            done = not outcome.failed and (outcome.acked > 0 or outcome.rejected > 0)
            if done and not outcome.acked and self._dead_letters is not None:
                done = await self._dead_letters.publish(delivery.message, delivery.nsqd)
            if done:
                _answer("finish", delivery, stream.finish)
            else:
                _answer("requeue", delivery, stream.requeue, self.requeue_delay_ms)

    async def _touch_outstanding(self) -> None:
        while True:
            stream = self.stream
            if stream is None:
                return
            await asyncio.sleep(max(stream.msg_timeout_ms / 1000 / _TOUCHES_PER_TIMEOUT, 0.2))
            for message in [m for m in self._outstanding.values() if not m.responded]:
                try:
                    stream.touch(message)
                except NSQError:
                    pass  # its connection is gone: nsqd redelivers it after msg_timeout

    async def aclose(self) -> None:
        """Stop touching; REQ what is still unanswered (redelivered at once); close."""
        toucher, self._toucher = self._toucher, None
        if toucher is not None:
            toucher.cancel()
            try:
                await toucher
            except asyncio.CancelledError:
                pass
        stream, self.stream = self.stream, None
        if stream is not None:
            await stream.close()
        dead_letters, self._dead_letters = self._dead_letters, None
        if dead_letters is not None:
            await dead_letters.close()
        self._outstanding.clear()


class NSQEventTrigger(BaseEventTrigger):
    """Fire one event per message on an NSQ channel: for event-driven DAGs (assets).

    The event payload is the message as a JSON-safe dict: ``body`` (text; base64 text
    when ``body_encoding == "base64"``), ``body_encoding``, ``id``, ``attempts``,
    ``timestamp`` (ns since the epoch, set by nsqd at publish), ``topic``, ``channel``,
    ``nsqd`` (``host:port`` of the nsqd that delivered it). Delivery is at-least-once: a
    DAG may see a message twice (same ``nsqd`` and ``id``, higher ``attempts``).

    On Airflow >= 3.3 the message is FINished only after Airflow stored the event (see
    the module docstring); triggers with the same connection, topic and channel share
    one subscription, whose ``max_in_flight``, ``requeue_delay`` and
    ``dead_letter_topic`` are those of the first trigger to start.

    :param topic: the topic name.
    :param channel: the channel name; a durable channel keeps messages while no
        triggerer is running.
    :param nsq_conn_id: the ``nsq`` Connection to use.
    :param message_filter: dotted path to a ``callable(record) -> bool``; messages it
        rejects fire no event (and, when no other trigger on the channel takes them, go
        to ``dead_letter_topic``, or are dropped). A filter that raises keeps the
        message (the error is logged).
    :param max_in_flight: messages held unanswered at once (nsqd's RDY count, default
        100, at most nsqd's --max-rdy-count).
    :param requeue_delay: how long nsqd waits before redelivering a message whose event
        could not be stored: ``timedelta`` or milliseconds (default 5 s).
    :param dead_letter_topic: where messages that every trigger's filter rejected are
        published (on the same connection) before they are FINished.
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
    ) -> None:
        super().__init__()
        validate_topic_name(topic)
        validate_channel_name(channel)
        if message_filter is not None and not isinstance(message_filter, str):
            raise NSQValueError(
                "message_filter must be a dotted path (module.function) so the trigger can "
                f"be serialised, got {message_filter!r}"
            )
        if (
            isinstance(max_in_flight, bool)
            or not isinstance(max_in_flight, int)
            or not 1 <= max_in_flight <= DEFAULT_MAX_RDY_COUNT
        ):
            raise NSQValueError(
                f"max_in_flight must be an int 1-{DEFAULT_MAX_RDY_COUNT}, got {max_in_flight!r}"
            )
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
        self.max_in_flight = max_in_flight
        self.requeue_delay = delay_to_ms(requeue_delay, "requeue_delay")
        self.dead_letter_topic = dead_letter_topic

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topic": self.topic,
                "channel": self.channel,
                "nsq_conn_id": self.nsq_conn_id,
                "message_filter": self.message_filter,
                "max_in_flight": self.max_in_flight,
                "requeue_delay": self.requeue_delay,
                "dead_letter_topic": self.dead_letter_topic,
            },
        )

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

    # -- Airflow 3.0-3.2: one connection, FIN after the event is handed over -------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """The pre-3.3 path (also what a direct ``run()`` does): FIN each message right
        after its event is yielded, which is before the triggerer stored it."""
        keep = self._load_filter()
        config = await NSQHook(nsq_conn_id=self.nsq_conn_id).aget_client_config()
        check_delay_ms(self.requeue_delay, config.max_req_timeout_ms, what="requeue_delay")
        dead_letters = (
            _DeadLetters(config, self.dead_letter_topic) if self.dead_letter_topic else None
        )
        stream = _NSQDStream(config, self.topic, self.channel)
        try:
            await stream.start(self.max_in_flight)
            while True:
                for message in await stream.read(_READ_WAIT_S):
                    record = message_record(message, self.topic, self.channel, nsqd=stream.nsqd)
                    delivery = _Delivery(stream.nsqd, message)
                    if not self._accepts(keep, record):
                        if dead_letters is None or await dead_letters.publish(message, stream.nsqd):
                            _answer("finish", delivery, stream.finish)
                        else:
                            _answer("requeue", delivery, stream.requeue, self.requeue_delay)
                        continue
                    yield TriggerEvent(record)
                    _answer("finish", delivery, stream.finish)
        finally:
            # Also on cancellation: REQs what was taken and not answered.
            await stream.close()
            if dead_letters is not None:
                await dead_letters.close()
