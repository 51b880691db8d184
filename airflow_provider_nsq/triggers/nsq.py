"""``NSQMessageTrigger``: wait, in the triggerer, until a channel holds enough messages.

It takes nothing away. With nsqd's HTTP API known (the connection's ``http_port`` or
``https_port``), it reads the channel's depth from ``/stats`` and fires once
``min_messages`` are ready: no message is delivered, no ``attempts`` go up. Between checks
it waits with backoff.

Without the HTTP API (or when it cannot be reached) it peeks over TCP: it subscribes with
``RDY min_messages``, holds what arrives until ``min_messages`` have come (or the hold
ends: a little under nsqd's msg_timeout, or the deadline), then hands them all back at
once (``RDY 0``, then ``REQ`` with no delay) and fires if there were enough. Each peek
costs every held message one redelivery (``attempts + 1``); short peeks are followed by a
growing pause.

When the connection names nsqlookupds or several nsqds, both checks cover every nsqd that
has the topic: the HTTP depth is summed over the producers nsqlookupd lists, and the TCP
peek holds ``min_messages`` across all of them (one
:class:`~airflow_provider_nsq.client.consumer.AsyncNSQConsumer`).

Every wait is bounded: past ``deadline`` the trigger fires ``{"status": "timeout"}``
itself, so the sensor's timeout holds even where the triggerer's own timeout is not
applied (``dag.test()`` runs triggers inline without one).

It runs on the asyncio driver: no threads, and cancelling it (task timeout, task cleared,
triggerer shutdown) closes its connection.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..client import AsyncNSQConnection, ClientConfig, NSQMessage
from ..client.consumer import AsyncNSQConsumer
from ..client.nsqd_http import ChannelDepth
from ..hooks.nsq import NSQHook
from ..metrics import emitter
from ..protocol.errors import (
    NSQConnectionError,
    NSQError,
    NSQHTTPError,
    NSQProtocolError,
    NSQTimeoutError,
    NSQTLSError,
)
from .nsq_event import NSQEventTrigger as NSQEventTrigger  # event-driven DAGs; own module

#: How much longer each wait after a short HTTP check is, up to HTTP_MAX_INTERVAL_S.
HTTP_BACKOFF = 1.5
HTTP_MAX_INTERVAL_S = 30.0
#: After a short TCP peek (which redelivered what it held): doubling, up to this.
TCP_BACKOFF = 2.0
TCP_MAX_INTERVAL_S = 120.0
#: A peek holds messages at most this share of nsqd's msg_timeout: they must be handed
#: back before nsqd times them out (which would count as a redelivery anyway).
HOLD_SHARE_OF_MSG_TIMEOUT = 0.8
#: Reconnect backoff after a dropped TCP connection: first and longest wait, seconds.
_RECONNECT_START_S = 1.0
_RECONNECT_MAX_S = 30.0
#: The deferred sensor's checks count as the sensor's (nsq.sensor.checks.*, depth).
_METRICS = emitter("triggerer")


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).isoformat()


class NSQMessageTrigger(BaseTrigger):
    """Fire once ``channel`` on ``topic`` holds ``min_messages`` ready messages, without
    consuming any; or fire a timeout at ``deadline``.

    Event payloads:

    - ``{"status": "ready", "topic", "channel", "ready": N, "checked_by": "http"|"tcp",
      "deadline"}``: at least ``min_messages`` were ready when checked;
    - ``{"status": "timeout", "topic", "channel", "ready": N, "deadline"}``: the deadline
      passed first (``ready`` is the last count seen, or None);
    - ``{"status": "error", "message": ...}``: nsqd refused the subscription (bad name,
      AUTH), TLS cannot be set up, or the connection's settings are invalid.

    A refused or dropped connection is retried with backoff (nsqd may be restarting).

    :param topic: the topic name.
    :param channel: the channel name (a durable one: see the sensor's docs).
    :param nsq_conn_id: the ``nsq`` Connection to use.
    :param min_messages: ready messages needed to fire (default 1).
    :param deadline: when to give up, as seconds since the epoch (None: never).
    :param poll_interval: seconds before the second check; later waits grow (backoff).
    :param read_timeout: seconds per wait for a delivery during a TCP peek.
    """

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        nsq_conn_id: str = NSQHook.default_conn_name,
        min_messages: int = 1,
        deadline: float | None = None,
        poll_interval: float = 5.0,
        read_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.channel = channel
        self.nsq_conn_id = nsq_conn_id
        self.min_messages = min_messages
        self.deadline = deadline
        self.poll_interval = poll_interval
        self.read_timeout = read_timeout
        self.connection: AsyncNSQConnection | None = None  # the live one, for tests

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topic": self.topic,
                "channel": self.channel,
                "nsq_conn_id": self.nsq_conn_id,
                "min_messages": self.min_messages,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "read_timeout": self.read_timeout,
            },
        )

    # -- the wait ------------------------------------------------------------------------

    def _remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.time()

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "topic": self.topic,
                "channel": self.channel,
                **fields,
                "deadline": _iso(self.deadline),
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = NSQHook(nsq_conn_id=self.nsq_conn_id)
        try:
            config = await hook.aget_client_config()
            hook.get_http_api()  # settings errors now, not at the first check
        except NSQError as exc:
            yield TriggerEvent({"status": "error", "message": str(exc)})
            return
        interval = self.poll_interval
        reconnect = _RECONNECT_START_S
        last_ready: int | None = None
        while True:
            remaining = self._remaining()
            if remaining is not None and remaining <= 0:
                self.log.info(
                    "Deadline passed: %s of %s message(s) ready on %s/%s",
                    last_ready,
                    self.min_messages,
                    self.topic,
                    self.channel,
                )
                yield self._event("timeout", ready=last_ready)
                return
            depth = await self._http_depth(hook)
            try:
                if depth is not None:
                    last_ready, checked_by = depth.ready, "http"
                elif hook.reads_topology:
                    last_ready, checked_by = await self._peek_all(hook, remaining), "tcp"
                else:
                    last_ready, checked_by = await self._peek(config, remaining), "tcp"
            except NSQTLSError as exc:  # a settings problem: retrying will not fix it
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            except (NSQConnectionError, NSQTimeoutError) as exc:
                self.log.warning(
                    "NSQ connection to %s lost while waiting on %s/%s (%s); retrying in %gs",
                    config.address,
                    self.topic,
                    self.channel,
                    exc,
                    reconnect,
                )
                await self._sleep(reconnect)
                reconnect = min(reconnect * 2, _RECONNECT_MAX_S)
                continue
            except NSQError as exc:
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            reconnect = _RECONNECT_START_S
            _METRICS.incr(f"nsq.sensor.checks.{checked_by}", topic=self.topic, channel=self.channel)
            if checked_by == "http":
                _METRICS.gauge(
                    "nsq.sensor.depth", last_ready, topic=self.topic, channel=self.channel
                )
            if last_ready >= self.min_messages:
                self.log.info(
                    "%s message(s) ready on %s/%s (%s needed, checked by %s)",
                    last_ready,
                    self.topic,
                    self.channel,
                    self.min_messages,
                    checked_by,
                )
                yield self._event("ready", ready=last_ready, checked_by=checked_by)
                return
            self.log.info(
                "%s of %s message(s) ready on %s/%s (checked by %s); next check in %gs",
                last_ready,
                self.min_messages,
                self.topic,
                self.channel,
                checked_by,
                interval,
            )
            await self._sleep(interval)
            if checked_by == "http":
                interval = min(
                    interval * HTTP_BACKOFF, max(HTTP_MAX_INTERVAL_S, self.poll_interval)
                )
            else:
                interval = min(interval * TCP_BACKOFF, max(TCP_MAX_INTERVAL_S, self.poll_interval))

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but never past the deadline."""
        remaining = self._remaining()
        if remaining is not None:
            seconds = min(seconds, max(remaining, 0.0))
        await asyncio.sleep(seconds)

    async def _http_depth(self, hook: NSQHook) -> ChannelDepth | None:
        """The channel's depth from nsqd's HTTP API; None when it is not configured or
        cannot be read (then a TCP peek is the fallback)."""
        try:
            return await hook.achannel_depth(self.topic, self.channel)
        except (NSQConnectionError, NSQTimeoutError, NSQHTTPError, NSQProtocolError) as exc:
            self.log.warning(
                "nsqd's HTTP API could not be read (%s); peeking over TCP instead (each peek "
                "redelivers the messages it sees)",
                exc,
            )
            return None

    def _hold_s(
        self, msg_timeout_ms: object, config: ClientConfig, remaining: float | None
    ) -> float:
        """How long a peek may hold messages: a share of nsqd's msg_timeout, never past
        the deadline."""
        if not isinstance(msg_timeout_ms, int) or msg_timeout_ms <= 0:
            msg_timeout_ms = config.msg_timeout_ms or 60_000
        hold = msg_timeout_ms / 1000 * HOLD_SHARE_OF_MSG_TIMEOUT
        return hold if remaining is None else min(hold, remaining)

    async def _peek_all(self, hook: NSQHook, remaining: float | None) -> int:
        """:meth:`_peek` over every nsqd of the connection (through nsqlookupd when it
        names any): ``min_messages`` shared as one in-flight budget."""
        consumer = AsyncNSQConsumer(self.topic, self.channel, **hook.consumer_options())
        held: list[NSQMessage] = []
        try:
            await consumer.start(self.min_messages)
            conns = list(consumer.connections.values())
            shortest = min((c.server_info.get("msg_timeout") or 0 for c in conns), default=0)
            ends = time.monotonic() + self._hold_s(shortest, consumer.config, remaining)
            self.log.info(
                "Peeking at %s/%s on %s nsqd(s) for up to %.0fs",
                self.topic,
                self.channel,
                len(conns),
                ends - time.monotonic(),
            )
            while len(held) < self.min_messages:
                left = ends - time.monotonic()
                if left <= 0:
                    break
                held += await consumer.read(min(left, self.read_timeout))
            consumer.set_max_in_flight(0)  # before the REQ: nsqd must not hand them back
            consumer.requeue(*held)
            return len(held)
        finally:
            await consumer.close()  # also on cancellation; REQs anything still held

    async def _peek(self, config: ClientConfig, remaining: float | None) -> int:
        """Hold up to ``min_messages`` deliveries until that many came or the hold ends,
        then hand them all back; how many there were."""
        conn = self.connection = AsyncNSQConnection(config)
        held: list[NSQMessage] = []
        try:
            await conn.connect()
            hold = self._hold_s(conn.server_info.get("msg_timeout"), config, remaining)
            ends = time.monotonic() + hold
            await conn.subscribe(self.topic, self.channel)
            conn.ready(min(self.min_messages, conn.max_rdy_count))
            self.log.info(
                "Peeking at %s/%s on %s for up to %.0fs",
                self.topic,
                self.channel,
                config.address,
                hold,
            )
            while len(held) < self.min_messages:
                left = ends - time.monotonic()
                if left <= 0:
                    break
                held += await conn.read_messages(min(left, self.read_timeout))
            conn.ready(0)  # before the REQ, so nsqd does not hand them straight back
            if held:
                conn.requeue(*held, delay_ms=0)
            return len(held)
        finally:
            # Also on cancellation: the connection never outlives the trigger, and
            # close() REQs anything still held.
            await conn.close()
            self.connection = None
