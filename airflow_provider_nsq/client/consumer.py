"""One consumer over every nsqd that has a topic: N connections, one in-flight budget.

NSQ as deployed runs an nsqd on every producing host; a consumer reads a topic from all
of them (found through nsqlookupd, or a static list of nsqd TCP addresses). This module
is the one place that does it, for every consumer of the provider (the hook's consume
window, the sensor, the triggers, the Spark reader), in two drivers:
:class:`NSQConsumer` (blocking) and :class:`AsyncNSQConsumer` (asyncio). Their logic is
written once in :class:`ConsumerBase`; each adds only how it connects and waits.

What it guarantees:

- one connection per nsqd, each SUB'd to the same topic/channel; one RDY budget shared
  as :mod:`.ready` plans it (never above an nsqd's ``max_rdy_count``). A streaming
  consumer that holds more messages than one connection may (``max_rdy_count``, 2500 by
  default) can allow more connections per nsqd (``max_connections_per_nsqd``): each
  nsqd then gets as many as one nsqd needs to hold the whole budget;
- FIN, REQ and TOUCH always go on the connection that delivered the message
  (:class:`~.message.NSQMessage` knows it; ``message.nsqd`` is its address);
- at-least-once: the core never FINs anything on its own. :meth:`close` REQs whatever it
  delivered and nobody answered (after ``RDY 0``, so nsqd does not hand it straight
  back). A connection that breaks takes its unanswered messages with it: nsqd
  redelivers them after its msg_timeout; they are never handed out from a dead
  connection;
- an nsqd that cannot be reached is logged and skipped; only when none can be is it an
  error (:class:`NSQConnectionError` naming each). A long-lived consumer retries it
  with backoff, re-asks nsqlookupd every ``lookupd_poll_interval`` seconds, connects to
  producers that appeared, and stops reading from those that vanished (``RDY 0``; the
  connection closes once what it delivered is answered).

Three shapes:

- one bounded window (:meth:`consume`): SUB all, RDY split of ``max_messages``, collect
  up to ``max_messages`` or until ``timeout``, CLS all, settle (``ack``: fin, req or
  manual, as :mod:`.window` does for one connection);
- long-lived streaming: :meth:`start`, :meth:`read`, :meth:`set_max_in_flight` (0
  pauses), :meth:`touch` / :meth:`finish` / :meth:`requeue`; the blocking consumer also
  has :meth:`NSQConsumer.pump` to answer heartbeats while the caller works;
- :meth:`close`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import selectors
import ssl
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..protocol.constants import DEFAULT_MSG_TIMEOUT_MS
from ..protocol.errors import (
    NSQConnectionError,
    NSQError,
    NSQProtocolError,
    NSQStateError,
    NSQTimeoutError,
    NSQTLSError,
    NSQValueError,
)
from ..protocol.names import validate_channel_name, validate_topic_name
from .address import DEFAULT_NSQD_TCP_PORT, format_address, parse_address
from .aio import AsyncNSQConnection
from .blocking import NSQConnection
from .config import ClientConfig
from .lookupd import LookupdClient, Producer, parse_addresses
from .message import NSQMessage
from .ready import keep_within, plan_ready
from .window import AckMode, Window, check_window, settle_window

log = logging.getLogger(__name__)

#: go-nsq's default LookupdPollInterval.
DEFAULT_LOOKUPD_POLL_INTERVAL_S = 60.0
#: While no producer is known, nsqlookupd is asked at least this often.
EMPTY_POLL_INTERVAL_S = 5.0
#: How often the RDY split is looked at (only changes are sent).
REBALANCE_INTERVAL_S = 0.1
#: A connection that delivered nothing for this long is quiet: it keeps its share only
#: while no other connection is busy.
IDLE_AFTER_S = 0.25
#: After a connection's RDY is lowered, what nsqd may already have sent it at the old RDY
#: stays counted this long before it is given to another connection.
SETTLE_S = 0.25
#: With fewer spare RDY than connections, the turn moves on this often.
ROTATE_INTERVAL_S = 1.0
#: Backoff for an nsqd that could not be reached (first, longest), seconds.
RECONNECT_START_S = 1.0
RECONNECT_MAX_S = 60.0

#: Errors that mean "this nsqd cannot be reached right now": logged and skipped. Any
#: other error (nsqd refused SUB or AUTH, a bad setting) is the same on every nsqd and
#: is raised.
UNREACHABLE = (NSQConnectionError, NSQTimeoutError, NSQProtocolError)

Conn = TypeVar("Conn", NSQConnection, AsyncNSQConnection)


@dataclass(eq=False)
class _Slot(Generic[Conn]):
    """One connection to an nsqd and what the consumer knows about it."""

    key: str  # the nsqd's address; "address#2", "#3" ... for its extra connections
    address: str  # the nsqd's address (host:port)
    conn: Conn
    limit: int  # nsqd's max_rdy_count
    last_delivery: float
    rdy: int = 0  # the RDY last sent
    outstanding: list[NSQMessage] = field(default_factory=list)  # delivered, maybe unanswered
    draining: bool = False  # not wanted any more: RDY 0, closed once answered
    closing: bool = False  # CLS sent
    reserved: int = 0  # the RDY before it was lowered: nsqd may still send that many ...
    reserved_until: float = 0.0  # ... until about then

    def in_flight(self) -> int:
        """Messages delivered on this connection and not yet FIN'd or REQ'd, including
        those read and not yet collected (prunes the answered ones as it counts)."""
        self.outstanding = [m for m in self.outstanding if not m._responded]
        return len(self.outstanding) + len(self.conn._messages)

    @property
    def alive(self) -> bool:
        return _alive(self.conn)


def _alive(conn: Any) -> bool:
    """The connection can still answer its messages (not failed, not closed)."""
    return conn is not None and conn._failure is None and conn.connected


def _nsqd_of(key: str) -> str:
    """The nsqd address of a connection key (``host:port`` or ``host:port#n``)."""
    return key.partition("#")[0]


class ConsumerBase(Generic[Conn]):
    """What :class:`NSQConsumer` and :class:`AsyncNSQConsumer` share: where the nsqds are,
    the connections and their RDY split, the messages delivered and who answers them.

    :param topic: the topic to read.
    :param channel: the channel (created on each nsqd by the SUB).
    :param config: connection settings shared by every nsqd connection (its host and
        port are used only when no other address is given).
    :param nsqd_tcp_addresses: read from every nsqd in this list (``host:port``; a
        comma-separated string works too) when no lookupd is given.
    :param lookupd_http_addresses: find the nsqds through these nsqlookupds (all asked
        at once); takes precedence over ``nsqd_tcp_addresses``.
    :param lookupd_poll_interval: seconds between two lookups while the consumer runs.
    :param lookupd_timeout: seconds each lookupd may take (default: the config's
        ``connect_timeout``).
    :param max_connections_per_nsqd: streaming only (:meth:`start`): up to this many
        connections to each nsqd, as many as it takes for one nsqd to hold the whole
        in-flight budget (``ceil(max_in_flight / max_rdy_count)``); opened and closed as
        the budget changes. nsqd caps each connection's RDY, and so the messages it may
        have unanswered, at its ``--max-rdy-count`` (2500 by default); a caller that
        holds messages for long (the Spark reader holds a whole batch until Spark
        commits it) needs more. Default 1: one connection per nsqd.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        *,
        config: ClientConfig | None = None,
        nsqd_tcp_addresses: Sequence[str] | str = (),
        lookupd_http_addresses: Sequence[str] | str = (),
        lookupd_poll_interval: float = DEFAULT_LOOKUPD_POLL_INTERVAL_S,
        lookupd_timeout: float | None = None,
        max_connections_per_nsqd: int = 1,
    ) -> None:
        validate_topic_name(topic)
        validate_channel_name(channel)
        self.topic = topic
        self.channel = channel
        self.config = config or ClientConfig()
        if self.config.heartbeat_interval_ms == -1:
            raise NSQValueError(
                "heartbeat_interval_ms=-1 disables heartbeats; nsqd refuses SUB without them"
            )
        if (
            isinstance(lookupd_poll_interval, bool)
            or not isinstance(lookupd_poll_interval, (int, float))
            or lookupd_poll_interval <= 0
        ):
            raise NSQValueError(
                f"lookupd_poll_interval must be a number of seconds > 0, got "
                f"{lookupd_poll_interval!r}"
            )
        self.lookupd_poll_interval = float(lookupd_poll_interval)
        if (
            isinstance(max_connections_per_nsqd, bool)
            or not isinstance(max_connections_per_nsqd, int)
            or max_connections_per_nsqd < 1
        ):
            raise NSQValueError(
                f"max_connections_per_nsqd must be an int >= 1, got {max_connections_per_nsqd!r}"
            )
        self.max_connections_per_nsqd = max_connections_per_nsqd
        lookupds = parse_addresses(lookupd_http_addresses, "lookupd_http_addresses")
        self.lookupd: LookupdClient | None = (
            LookupdClient(lookupds, timeout=lookupd_timeout or self.config.connect_timeout)
            if lookupds
            else None
        )
        static = parse_addresses(nsqd_tcp_addresses, "nsqd_tcp_addresses") or [self.config.address]
        self._static = [
            format_address(*parse_address(a, DEFAULT_NSQD_TCP_PORT, "nsqd_tcp_addresses entry"))
            for a in static
        ]
        self._slots: dict[str, _Slot[Conn]] = {}
        self._wanted: list[str] = []  # where the topic is, as last known
        self.producers: list[Producer] = []  # the last lookup's answer (lookupd only)
        self._retry: dict[str, tuple[float, float]] = {}  # address -> (when, backoff)
        self._buffer: list[NSQMessage] = []  # delivered, not yet returned by read()
        self._budget = 0
        self._started = False  # start() or consume() ran
        self._streaming = False
        self._closed = False
        self._next_poll = 0.0
        self._next_rebalance = 0.0
        self._next_maintenance = 0.0
        self._next_rotation = 0.0
        self._offset = 0
        self._shape: tuple[Any, ...] = ()  # what the last RDY plan was made for
        self._planned_at = 0.0

    def __repr__(self) -> str:
        source = f"lookupd {self.lookupd!r}" if self.lookupd else ", ".join(self._static)
        return (
            f"<{type(self).__name__} {self.topic}/{self.channel} from {source}: "
            f"{len(self._slots)} connection(s)>"
        )

    # -- what callers can see --------------------------------------------------------

    @property
    def connections(self) -> dict[str, Conn]:
        """The live connections by nsqd address (``host:port``; an nsqd's extra
        connections, see ``max_connections_per_nsqd``, as ``host:port#2`` ...)."""
        return {k: s.conn for k, s in self._slots.items() if s.alive}

    @property
    def max_in_flight(self) -> int:
        """The in-flight budget shared by every connection."""
        return self._budget

    @property
    def msg_timeout_ms(self) -> int:
        """The shortest msg_timeout of the live connections (from their IDENTIFY
        responses): what held messages must be TOUCHed within. Before any connection is
        open, the config's ``msg_timeout_ms`` or nsqd's default."""
        negotiated = [s.conn.server_info.get("msg_timeout") for s in self._slots.values()]
        known = [t for t in negotiated if isinstance(t, int) and t > 0]
        if known:
            return min(known)
        return self.config.msg_timeout_ms or DEFAULT_MSG_TIMEOUT_MS

    def ready_counts(self) -> dict[str, int]:
        """The RDY count last sent on each connection (keyed as :attr:`connections`)."""
        return {k: s.rdy for k, s in self._slots.items()}

    def in_flight(self) -> int:
        """Messages delivered and not yet FIN'd or REQ'd, over every connection."""
        return sum(s.in_flight() for s in self._slots.values())

    # -- answering messages, each on its own connection ------------------------------

    def _by_connection(self, messages: Sequence[NSQMessage]) -> list[tuple[Any, list[NSQMessage]]]:
        groups: dict[int, tuple[Any, list[NSQMessage]]] = {}
        for m in messages:
            key = id(m._conn)
            group = groups.get(key)
            if group is None:
                group = groups[key] = (m._conn, [])
            group[1].append(m)
        lost = sum(len(ms) for conn, ms in groups.values() if not _alive(conn))
        if lost:
            log.warning(
                "%s message(s) came on a connection that is gone: nsqd redelivers them "
                "after its msg_timeout",
                lost,
            )
        return [(conn, ms) for conn, ms in groups.values() if _alive(conn)]

    def finish(self, *messages: NSQMessage) -> None:
        """FIN messages, each on the connection that delivered it (one write per nsqd)."""
        for conn, group in self._by_connection(messages):
            conn.finish(*group)

    def requeue(self, *messages: NSQMessage, delay_ms: int = 0) -> None:
        """REQ messages (redelivered after ``delay_ms`` with attempts + 1)."""
        for conn, group in self._by_connection(messages):
            conn.requeue(*group, delay_ms=delay_ms)

    def touch(self, *messages: NSQMessage) -> None:
        """TOUCH messages: each restarts its msg_timeout on its nsqd."""
        for conn, group in self._by_connection(messages):
            conn.touch(*group)

    # -- where the nsqds are ----------------------------------------------------------

    def _targets(self, producers: Sequence[Producer] | None) -> list[str]:
        """Record a lookup's answer (None: the static list) and return every address
        the consumer should read from."""
        if producers is None:
            self._wanted = list(self._static)
        else:
            self.producers = list(producers)
            self._wanted = [p.tcp_address for p in producers]
        interval = self.lookupd_poll_interval
        if not self._wanted:
            interval = min(interval, EMPTY_POLL_INTERVAL_S)
        self._next_poll = time.monotonic() + interval
        self._mark_draining()
        return list(self._wanted)

    def _wanted_keys(self) -> list[str]:
        """Every connection the consumer should have: one per wanted nsqd, plus the
        extra ones its budget needs (``max_connections_per_nsqd``)."""
        if self.max_connections_per_nsqd == 1 or not self._streaming:
            return list(self._wanted)
        limits: dict[str, int] = {}
        for slot in self._slots.values():
            if slot.alive:
                limits.setdefault(slot.address, max(slot.limit, 1))
        keys: list[str] = []
        for address in self._wanted:
            keys.append(address)
            limit = limits.get(address)
            if limit is None:
                continue  # its max_rdy_count is known once its first connection is up
            wanted = min(self.max_connections_per_nsqd, math.ceil(self._budget / limit))
            keys += [f"{address}#{i}" for i in range(2, wanted + 1)]
        return keys

    def _mark_draining(self) -> None:
        """Stop reading from connections no longer wanted (their nsqd left nsqlookupd,
        or the budget needs fewer); read again from those wanted again."""
        wanted = set(self._wanted_keys())
        for key, slot in self._slots.items():
            if key in wanted and slot.draining:
                slot.draining = False  # wanted again before it was closed
                self._shape = ()
            elif key not in wanted and not slot.draining:
                if slot.address not in self._wanted:
                    log.info(
                        "nsqd at %s no longer has %s (nsqlookupd): reading from it stops",
                        slot.address,
                        self.topic,
                    )
                else:
                    log.debug("extra connection %s not needed for the budget: closing it", key)
                slot.draining = True
                self._shape = ()

    def _to_connect(self, targets: Sequence[str], retry_now: bool = False) -> list[str]:
        """The connection keys among ``targets`` that are not open and due a try."""
        now = time.monotonic()
        return [
            a
            for a in targets
            if a not in self._slots and (retry_now or self._retry.get(a, (0.0, 0.0))[0] <= now)
        ]

    def _maintenance_due(self) -> bool:
        now = time.monotonic()
        if now < self._next_maintenance:
            return False
        self._next_maintenance = now + REBALANCE_INTERVAL_S
        self._next_rebalance = 0.0  # the re-plan below is part of it
        return True

    def _poll_due(self) -> bool:
        return self.lookupd is not None and time.monotonic() >= self._next_poll

    def _lookup_failed(self, exc: NSQError) -> None:
        """A re-poll found no lookupd: keep what is connected, try again later."""
        log.warning("%s; keeping the %s connection(s) open", exc, len(self._slots))
        self._next_poll = time.monotonic() + min(self.lookupd_poll_interval, EMPTY_POLL_INTERVAL_S)

    def _producer_config(self, key: str) -> ClientConfig:
        return self.config.for_nsqd(_nsqd_of(key))

    def _connected(self, key: str, conn: Conn) -> None:
        self._retry.pop(key, None)
        slot = _Slot(key, _nsqd_of(key), conn, conn.max_rdy_count, time.monotonic())
        self._slots[key] = slot
        self._shape = ()
        self._on_slot_added(slot)
        log.debug("reading %s/%s from nsqd at %s", self.topic, self.channel, key)

    def _connect_failed(self, address: str, exc: BaseException) -> None:
        """Log an nsqd that could not be reached (and back off), or raise what is not
        about reachability."""
        if not isinstance(exc, UNREACHABLE):
            raise exc
        _, backoff = self._retry.get(address, (0.0, RECONNECT_START_S / 2))
        backoff = min(backoff * 2, RECONNECT_MAX_S)
        self._retry[address] = (time.monotonic() + backoff, backoff)
        log.warning(
            "nsqd at %s skipped for %s/%s: %s (next try in %gs)",
            address,
            self.topic,
            self.channel,
            exc,
            backoff,
        )

    def _check_reachable(self, attempted: Sequence[str], errors: Sequence[BaseException]) -> None:
        """After a first connect: none of several nsqds reachable is an error. When every
        one failed its TLS handshake it is a TLS error: a setting to fix, not an outage
        to wait out."""
        if attempted and not self._slots:
            reasons = "; ".join(f"{a} ({e})" for a, e in zip(attempted, errors, strict=True))
            tls = all(isinstance(e, NSQTLSError) for e in errors)
            raise (NSQTLSError if tls else NSQConnectionError)(
                f"could not read {self.topic}/{self.channel} from any nsqd: {reasons}"
            )

    def _on_slot_added(self, slot: _Slot[Conn]) -> None:
        """Driver hook: a connection joined (the blocking driver watches its socket)."""

    def _on_slot_removed(self, slot: _Slot[Conn]) -> None:
        """Driver hook: a connection left."""

    # -- messages in -------------------------------------------------------------------

    def _collect(self) -> list[NSQMessage]:
        """Take what every connection delivered; drop connections that broke."""
        now = time.monotonic()
        got: list[NSQMessage] = []
        for slot in self._slots.values():
            messages = slot.conn._take_messages()
            if messages:
                slot.outstanding.extend(messages)
                slot.last_delivery = now
                got.extend(messages)
        self._drop_broken()
        return [m for m in got if _alive(m._conn)]

    def _drop_broken(self) -> None:
        for key, slot in list(self._slots.items()):
            if slot.alive:
                continue
            lost = slot.in_flight()
            why = slot.conn._failure or "closed"
            log.warning(
                "connection to nsqd at %s lost (%s); %s unanswered message(s) come back "
                "after its msg_timeout",
                key,
                why,
                lost,
            )
            self._remove(slot)
            if self._buffer:
                self._buffer = [m for m in self._buffer if m._conn is not slot.conn]
            self._retry.setdefault(key, (time.monotonic() + RECONNECT_START_S, 1.0))

    def _remove(self, slot: _Slot[Conn]) -> None:
        self._slots.pop(slot.key, None)
        self._on_slot_removed(slot)
        slot.conn._teardown()
        self._shape = ()

    def _drained(self) -> list[_Slot[Conn]]:
        """Draining slots (a vanished producer, an extra connection the budget no longer
        needs) whose messages are all answered: close them."""
        done = [s for s in self._slots.values() if s.draining and s.in_flight() == 0]
        for slot in done:
            self._slots.pop(slot.key, None)
            self._on_slot_removed(slot)
        if done:
            self._shape = ()
        return done

    # -- the RDY split -----------------------------------------------------------------

    def _rebalance(self, force: bool = False) -> None:
        """Re-plan the RDY split when what it depends on changed, and send what changed."""
        now = time.monotonic()
        if not force and now < self._next_rebalance:
            return
        self._next_rebalance = now + REBALANCE_INTERVAL_S
        slots = [s for s in self._slots.values() if not s.closing and s.alive]
        active = [s for s in slots if not s.draining]
        in_flight = [s.in_flight() for s in active]
        # What a draining connection still holds counts against the budget until answered.
        budget = max(self._budget - sum(s.in_flight() for s in slots if s.draining), 0)
        # Busy: delivered lately, or took everything it was allowed since the last plan.
        busy = [
            now - s.last_delivery < IDLE_AFTER_S
            or (0 < s.rdy <= f and s.last_delivery >= self._planned_at)
            for s, f in zip(active, in_flight, strict=True)
        ]
        spare = budget - sum(in_flight)
        rotate = 0 < spare < len(active) and now >= self._next_rotation
        if rotate:
            self._offset += max(spare, 1)
            self._next_rotation = now + ROTATE_INTERVAL_S
        settling = tuple(now < s.reserved_until for s in active)
        shape = (
            budget,
            tuple(s.key for s in active),
            tuple(busy),
            settling,
            self._offset,
        )
        if shape == self._shape and not force:
            return
        self._shape = shape
        self._planned_at = now
        planned = plan_ready(
            budget,
            in_flight,
            [s.limit for s in active],
            busy,
            self._offset,
            keep_one_each=self._streaming,
        )
        committed = [
            max(f, s.rdy, s.reserved if settle else 0)
            for s, f, settle in zip(active, in_flight, settling, strict=True)
        ]
        counts = keep_within(budget, planned, committed)
        plan = {s.key: c for s, c in zip(active, counts, strict=True)}
        for slot in slots:
            want = plan.get(slot.key, 0)
            if want != slot.rdy:
                if want < slot.rdy:
                    slot.reserved = max(slot.rdy, slot.reserved if now < slot.reserved_until else 0)
                    slot.reserved_until = now + SETTLE_S
                try:
                    slot.conn.ready(want)
                    slot.rdy = want
                except NSQError as exc:
                    log.debug("RDY to %s failed: %s", slot.key, exc)
        self._drop_broken()

    def _set_budget(self, budget: int) -> None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise NSQValueError(f"max_in_flight must be an int >= 0, got {budget!r}")
        self._budget = budget
        self._mark_draining()
        self._rebalance(force=True)

    # -- shapes: checks and the parts both drivers share ------------------------------------

    def _check_open(self, starting: bool) -> None:
        if self._closed:
            raise NSQStateError(f"{self!r} is closed")
        if starting and self._started:
            raise NSQStateError(
                "a consumer runs one window or one stream: use a new consumer for the next"
            )
        if not starting and not self._streaming:
            raise NSQStateError("call start() before read()")

    def _begin_window(self, window: Window) -> None:
        capacity = sum(s.limit for s in self._slots.values())
        if self._slots and window.max_messages > capacity:
            raise NSQValueError(
                f"max_messages={window.max_messages} exceeds the nsqds' max RDY count "
                f"({capacity} over {len(self._slots)} nsqd(s), --max-rdy-count): a window "
                "holds all its messages in flight until it ends"
            )
        timeouts = [s.conn.server_info.get("msg_timeout") for s in self._slots.values()]
        shortest = min((t for t in timeouts if isinstance(t, int) and t > 0), default=None)
        if shortest is not None and window.timeout * 1000 >= shortest:
            raise NSQValueError(
                f"a consume window of {window.timeout:g}s is not shorter than nsqd's "
                f"msg_timeout of {shortest} ms: messages would be redelivered before the "
                "window ends; shorten the window or raise the connection's msg_timeout_ms"
            )
        self._set_budget(window.max_messages)

    def _window_step(self, window: Window) -> bool:
        """After a wait: collect and re-plan; False once no connection is left."""
        window.got.extend(self._collect())
        if not self._slots:
            return False
        self._rebalance()
        return True

    def _end_window(self, window: Window, stragglers: list[NSQMessage]) -> list[NSQMessage]:
        """After CLS: drop what came on a connection that broke, settle the rest."""
        got = [m for m in window.got if _alive(m._conn)]
        if len(got) != len(window.got):
            log.warning(
                "%s message(s) of the window came on a connection that broke: nsqd "
                "redelivers them after its msg_timeout",
                len(window.got) - len(got),
            )
        return settle_window(
            self,
            got,
            [m for m in stragglers if _alive(m._conn)],
            window.max_messages,
            window.ack,
            window.requeue_delay_ms,
        )

    def _read_ready(self) -> list[NSQMessage]:
        """What :meth:`read` returns now: everything delivered and not yet handed out."""
        self._buffer.extend(self._collect())
        out, self._buffer = self._buffer, []
        return out

    def _unanswered(self, slot: _Slot[Conn]) -> list[NSQMessage]:
        return [m for m in (*slot.outstanding, *slot.conn._take_messages()) if not m._responded]

    def _stop_delivery(self) -> list[_Slot[Conn]]:
        """Before closing: RDY 0 everywhere (so REQ'd messages are not handed straight
        back); the slots that still need a CLS."""
        self._budget = 0
        self._streaming = False
        for slot in self._slots.values():
            if slot.alive and slot.rdy:
                try:
                    slot.conn.ready(0)
                    slot.rdy = 0
                except NSQError:
                    pass
        return [s for s in self._slots.values() if s.alive and not s.closing]

    def _requeue_all(self) -> None:
        """REQ everything delivered and unanswered, on every live connection."""
        self._buffer = []
        for slot in self._slots.values():
            if not slot.alive:
                continue
            held = self._unanswered(slot)
            if held:
                try:
                    slot.conn.requeue(*held)
                except NSQError as exc:
                    log.warning(
                        "could not REQ %s message(s) on nsqd at %s (%s): nsqd redelivers "
                        "them after its msg_timeout",
                        len(held),
                        slot.address,
                        exc,
                    )
            slot.outstanding = []


def _check_budget(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NSQValueError(f"{what} must be an int >= 0, got {value!r}")
    return value


# -- blocking ---------------------------------------------------------------------------


class NSQConsumer(ConsumerBase[NSQConnection]):
    """A blocking consumer of one topic/channel over every nsqd that has it.

    No threads (nsqlookupd is asked with one short-lived thread per lookupd): safe in
    tasks, forked workers and Spark executors. Not thread-safe.

    Every connection answers nsqd's heartbeats only while the consumer is reading:
    inside :meth:`consume` and :meth:`read`, or when :meth:`pump` is called. nsqd drops a
    client that has not answered for two heartbeat intervals (30 s each by default; the
    connection's ``heartbeat_interval_ms``).
    """

    def __init__(self, topic: str, channel: str, **kwargs: Any) -> None:
        super().__init__(topic, channel, **kwargs)
        self._selector = selectors.DefaultSelector()

    def __enter__(self) -> NSQConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- connecting ----------------------------------------------------------------------

    def _discover(self) -> list[str]:
        if self.lookupd is None:
            return self._targets(None)
        return self._targets(self.lookupd.lookup(self.topic))

    def _connect(self, addresses: Sequence[str]) -> list[BaseException]:
        errors: list[BaseException] = []
        for address in addresses:
            conn = NSQConnection(self._producer_config(address))
            try:
                conn.connect()
                conn.subscribe(self.topic, self.channel)
            except NSQError as exc:
                conn.close()
                errors.append(exc)
                self._connect_failed(address, exc)
                continue
            self._connected(address, conn)
        return errors

    def _connect_all(self) -> None:
        targets = self._discover()
        attempted = self._to_connect(targets, retry_now=True)
        self._check_reachable(attempted, self._connect(attempted))

    def _on_slot_added(self, slot: _Slot[NSQConnection]) -> None:
        sock = slot.conn._sock
        if sock is not None:
            self._selector.register(sock, selectors.EVENT_READ, slot)

    def _on_slot_removed(self, slot: _Slot[NSQConnection]) -> None:
        sock = slot.conn._sock
        if sock is not None:
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass

    # -- waiting -------------------------------------------------------------------------

    def _wait(self, timeout: float) -> None:
        """Read from every connection that has bytes (waiting up to ``timeout`` for one):
        messages, heartbeats (answered at once), nsqd's close."""
        pending = [
            s
            for s in self._slots.values()
            if isinstance(s.conn._sock, ssl.SSLSocket) and s.conn._sock.pending()
        ]
        if pending:
            readable = pending
        elif self._slots:
            readable = [key.data for key, _ in self._selector.select(max(timeout, 0.0))]
        else:
            time.sleep(max(timeout, 0.0))
            return
        for slot in readable:
            try:
                slot.conn._read_once(0)
            except NSQError:
                pass  # recorded as the connection's failure: _collect drops it

    def _maintain(self) -> None:
        """Between waits of a long-lived consumer: re-poll nsqlookupd when due, reconnect,
        close drained connections, re-plan RDY (at most every REBALANCE_INTERVAL_S)."""
        if not self._maintenance_due():
            return
        if self._poll_due():
            try:
                self._discover()
            except NSQError as exc:
                self._lookup_failed(exc)
        new = self._to_connect(self._wanted_keys())
        if new:
            self._connect(new)
        for slot in self._drained():
            slot.conn.close()
        self._rebalance()

    # -- (a) one window ------------------------------------------------------------------

    def consume(
        self,
        *,
        max_messages: int = 1,
        timeout: float = 5.0,
        ack: AckMode = "fin",
        requeue_delay_ms: int = 0,
    ) -> list[NSQMessage]:
        """One window over every nsqd: SUB all, share ``max_messages`` as RDY, collect up
        to ``max_messages`` or until ``timeout`` seconds pass, CLS all, then settle.

        ``ack``: ``"fin"`` FINs them before returning, ``"req"`` REQs them (a peek;
        attempts + 1), ``"manual"`` returns them unanswered: answer them with
        :meth:`finish` / :meth:`requeue` (or the message's own methods), then
        :meth:`close`, which REQs what is left. Messages that came on a connection that
        broke during the window are left out (nsqd redelivers them after msg_timeout).
        """
        check_window(max_messages, timeout, ack, sys.maxsize)
        self._check_open(starting=True)
        self._started = True
        window = Window(self.topic, self.channel, max_messages, timeout, ack, requeue_delay_ms)
        self._connect_all()
        if not self._slots:
            log.info("no nsqd has %s yet: the window is empty", self.topic)
            return []
        self._begin_window(window)
        for remaining in window.waits():
            self._wait(min(remaining, REBALANCE_INTERVAL_S))
            if not self._window_step(window):
                break
        stragglers = self._close_window()
        return self._end_window(window, stragglers)

    def _close_window(self) -> list[NSQMessage]:
        """CLS every connection; what they delivered before nsqd read it."""
        for slot in self._stop_delivery():
            try:
                slot.conn.start_close()
                slot.closing = True
                if slot.conn._readable():
                    slot.conn._read_once(0)
            except NSQError as exc:
                log.debug("CLS to %s failed: %s", slot.address, exc)
        return self._collect()

    # -- (b) streaming -------------------------------------------------------------------

    def start(self, max_in_flight: int) -> NSQConsumer:
        """Connect to every nsqd, SUB, and allow ``max_in_flight`` messages in flight
        across them (0: connected but paused). Raises :class:`NSQConnectionError` when
        no nsqd (or no lookupd) can be reached; producers that appear later are joined
        by :meth:`read` / :meth:`pump`."""
        budget = _check_budget(max_in_flight, "max_in_flight")
        self._check_open(starting=True)
        self._started = self._streaming = True
        self._connect_all()
        self._budget = budget
        extra = self._to_connect(self._wanted_keys(), retry_now=True)
        if extra:  # more connections per nsqd (max_connections_per_nsqd)
            self._connect(extra)
        self._set_budget(budget)
        return self

    def read(self, timeout: float = 1.0) -> list[NSQMessage]:
        """The messages delivered since the last call, waiting up to ``timeout`` seconds
        for the first. They are in flight until answered (:meth:`finish`,
        :meth:`requeue`, or the message's own methods); TOUCH the ones held longer than
        nsqd's msg_timeout. Answers heartbeats and keeps the connections current."""
        self._check_open(starting=False)
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            self._maintain()
            got = self._read_ready()
            if got:
                return got
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._read_ready()
            self._wait(min(remaining, REBALANCE_INTERVAL_S))

    def pump(self) -> None:
        """Do the consumer's I/O without waiting: answer heartbeats, take in deliveries
        (:meth:`read` returns them), reconnect and re-poll when due.

        Call it at least once per heartbeat interval (30 s by default) while the caller
        holds messages or is busy elsewhere: nsqd drops a client silent for two
        intervals, and every message it had in flight then comes back after msg_timeout.
        Cheap: one non-blocking poll of the sockets (plus a lookup when one is due).
        """
        self._check_open(starting=False)
        self._wait(0)
        self._buffer.extend(self._collect())
        self._maintain()

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the in-flight budget (0 pauses delivery; held messages stay held)."""
        self._check_open(starting=False)
        self._set_budget(_check_budget(max_in_flight, "max_in_flight"))

    # -- (c) close ---------------------------------------------------------------------

    def close(self) -> None:
        """RDY 0, CLS, REQ everything delivered and unanswered, close every connection.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._close_window()
            self._requeue_all()
        finally:
            for slot in list(self._slots.values()):
                self._on_slot_removed(slot)
                slot.conn.close()
            self._slots.clear()
            self._selector.close()


# -- asyncio ----------------------------------------------------------------------------


class _AsyncConnection(AsyncNSQConnection):
    """An asyncio connection that also wakes its consumer when something arrives."""

    def __init__(self, config: ClientConfig, wake: asyncio.Event) -> None:
        super().__init__(config)
        self._wake = wake

    def _messages_arrived(self) -> None:
        super()._messages_arrived()
        self._wake.set()

    def _fail(self, error: NSQError) -> None:
        super()._fail(error)
        self._wake.set()


class AsyncNSQConsumer(ConsumerBase[AsyncNSQConnection]):
    """The asyncio consumer: same shapes and guarantees as :class:`NSQConsumer`.

    Heartbeats are answered by the event loop as they arrive, whatever the caller is
    doing; re-polling nsqlookupd, reconnecting and re-planning RDY happen inside
    :meth:`read`.
    """

    def __init__(self, topic: str, channel: str, **kwargs: Any) -> None:
        super().__init__(topic, channel, **kwargs)
        self._wake: asyncio.Event | None = None

    async def __aenter__(self) -> AsyncNSQConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def _event(self) -> asyncio.Event:
        if self._wake is None:
            self._wake = asyncio.Event()
        return self._wake

    # -- connecting ----------------------------------------------------------------------

    async def _discover(self) -> list[str]:
        if self.lookupd is None:
            return self._targets(None)
        return self._targets(await self.lookupd.alookup(self.topic))

    async def _connect(self, addresses: Sequence[str]) -> list[BaseException]:
        async def one(address: str) -> AsyncNSQConnection:
            conn = _AsyncConnection(self._producer_config(address), self._event)
            try:
                await conn.connect()
                await conn.subscribe(self.topic, self.channel)
            except BaseException:
                await conn.close()
                raise
            return conn

        results = await asyncio.gather(*(one(a) for a in addresses), return_exceptions=True)
        errors: list[BaseException] = []
        failure: BaseException | None = None
        for address, result in zip(addresses, results, strict=True):
            if isinstance(result, AsyncNSQConnection):
                self._connected(address, result)
                continue
            errors.append(result)
            try:
                self._connect_failed(address, result)
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return errors

    async def _connect_all(self) -> None:
        targets = await self._discover()
        attempted = self._to_connect(targets, retry_now=True)
        self._check_reachable(attempted, await self._connect(attempted))

    # -- waiting -------------------------------------------------------------------------

    async def _wait(self, timeout: float) -> None:
        event = self._event
        if any(s.conn._messages or not s.alive for s in self._slots.values()):
            return
        event.clear()
        try:
            await asyncio.wait_for(event.wait(), max(timeout, 0.0))
        except asyncio.TimeoutError:
            pass

    async def _maintain(self) -> None:
        if not self._maintenance_due():
            return
        if self._poll_due():
            try:
                await self._discover()
            except NSQError as exc:
                self._lookup_failed(exc)
        new = self._to_connect(self._wanted_keys())
        if new:
            await self._connect(new)
        for slot in self._drained():
            await slot.conn.close()
        self._rebalance()

    # -- (a) one window ------------------------------------------------------------------

    async def consume(
        self,
        *,
        max_messages: int = 1,
        timeout: float = 5.0,
        ack: AckMode = "fin",
        requeue_delay_ms: int = 0,
    ) -> list[NSQMessage]:
        """One window over every nsqd (see :meth:`NSQConsumer.consume`)."""
        check_window(max_messages, timeout, ack, sys.maxsize)
        self._check_open(starting=True)
        self._started = True
        window = Window(self.topic, self.channel, max_messages, timeout, ack, requeue_delay_ms)
        await self._connect_all()
        if not self._slots:
            log.info("no nsqd has %s yet: the window is empty", self.topic)
            return []
        self._begin_window(window)
        for remaining in window.waits():
            await self._wait(min(remaining, REBALANCE_INTERVAL_S))
            if not self._window_step(window):
                break
        stragglers = await self._close_window()
        return self._end_window(window, stragglers)

    async def _close_window(self) -> list[NSQMessage]:
        slots = self._stop_delivery()

        async def cls(slot: _Slot[AsyncNSQConnection]) -> None:
            try:
                await slot.conn.start_close()
                slot.closing = True
            except NSQError as exc:
                log.debug("CLS to %s failed: %s", slot.address, exc)

        await asyncio.gather(*(cls(s) for s in slots))
        return self._collect()

    # -- (b) streaming -------------------------------------------------------------------

    async def start(self, max_in_flight: int) -> AsyncNSQConsumer:
        """See :meth:`NSQConsumer.start`."""
        budget = _check_budget(max_in_flight, "max_in_flight")
        self._check_open(starting=True)
        self._started = self._streaming = True
        await self._connect_all()
        self._budget = budget
        extra = self._to_connect(self._wanted_keys(), retry_now=True)
        if extra:  # more connections per nsqd (max_connections_per_nsqd)
            await self._connect(extra)
        self._set_budget(budget)
        return self

    async def read(self, timeout: float = 1.0) -> list[NSQMessage]:
        """See :meth:`NSQConsumer.read`."""
        self._check_open(starting=False)
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            await self._maintain()
            got = self._read_ready()
            if got:
                return got
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._read_ready()
            await self._wait(min(remaining, REBALANCE_INTERVAL_S))

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the in-flight budget (0 pauses delivery; held messages stay held)."""
        self._check_open(starting=False)
        self._set_budget(_check_budget(max_in_flight, "max_in_flight"))

    # -- (c) close ---------------------------------------------------------------------

    async def close(self) -> None:
        """RDY 0, CLS, REQ everything delivered and unanswered, close every connection.
        Idempotent; also safe when the caller is being cancelled."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._close_window()
            self._requeue_all()
        finally:
            for slot in list(self._slots.values()):
                await slot.conn.close()
            self._slots.clear()
