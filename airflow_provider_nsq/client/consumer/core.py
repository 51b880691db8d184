"""The consumer core: one topic/channel over every nsqd that has it, written once.

NSQ as deployed runs an nsqd on every producing host; a consumer reads a topic from all
of them (found through nsqlookupd, or a static list of nsqd TCP addresses; one nsqd is a
list of one). This is the one place that does it, for everything in the provider that
consumes (the hook's consume window, the sensor, the triggers, the Spark reader).

What it guarantees:

- one connection per nsqd, each SUB'd to the same topic/channel; one RDY budget shared
  as :mod:`..ready` plans it (never above an nsqd's ``max_rdy_count``). A streaming
  consumer that holds more messages than one connection may (``max_rdy_count``, 2500 by
  default) can allow more connections per nsqd (``max_connections_per_nsqd``): each
  nsqd then gets as many as one nsqd needs to hold the whole budget;
- FIN, REQ and TOUCH always go on the connection that delivered the message
  (:attr:`~..message.NSQMessage.connection`; ``message.nsqd`` is its address);
- at-least-once: the core never FINs anything on its own. ``close()`` REQs whatever it
  delivered and nobody answered (after ``CLS``, which stops delivery, so nsqd does not
  hand it straight back). A connection that breaks takes its unanswered messages with it: nsqd
  redelivers them after its msg_timeout; they are never handed out from a dead
  connection;
- messages held longer than nsqd's msg_timeout stay in flight when the holder calls
  :meth:`ConsumerCore.touch_held` (one TOUCH policy for every holder);
- an nsqd that cannot be reached is logged and skipped; only when none can be is it an
  error (:class:`NSQConnectionError` naming each). A long-lived consumer retries it
  with backoff, re-asks nsqlookupd every ``lookupd_poll_interval`` seconds, connects to
  producers that appeared, and stops reading from those that vanished (``RDY 0``; the
  connection closes once what it delivered is answered).

Three shapes: one bounded window (``consume``); long-lived streaming (``start``,
``read``, ``set_max_in_flight``, ``touch``/``finish``/``requeue``; the blocking consumer
also has ``pump``); ``close``.

How it is written: each of those sequences is a generator of steps, the I/O it needs
done (:mod:`.steps`: look up, connect these, wait up to t, CLS these, close these), as
``client/nsqd_http.py`` writes its requests; who holds which message is :mod:`.ledger`. The steps
hold every decision; :class:`~.blocking.NSQConsumer` and :class:`~.aio.AsyncNSQConsumer`
only do what each step asks, on sockets or on the event loop, and send back the outcome.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Generic, NamedTuple, TypeVar

from ...protocol.constants import DEFAULT_MSG_TIMEOUT_MS
from ...protocol.errors import (
    NSQConnectionError,
    NSQError,
    NSQProtocolError,
    NSQStateError,
    NSQTimeoutError,
    NSQTLSError,
    NSQValueError,
)
from ...protocol.names import validate_channel_name, validate_topic_name
from ..address import DEFAULT_NSQD_TCP_PORT, format_address, parse_address
from ..aio import AsyncNSQConnection
from ..backoff import Backoff
from ..blocking import NSQConnection
from ..config import ClientConfig
from ..lookupd import LookupdClient, Producer, parse_addresses
from ..message import NSQMessage
from ..ready import keep_within, plan_ready
from ..window import AckMode, Window, check_window, settle_window
from .ledger import Ledger
from .steps import CloseConnections, Connect, Lookup, StartClose, Steps, Wait

log = logging.getLogger("airflow_provider_nsq.client.consumer")

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
#: With fewer spare RDY than connections, the turn moves on this often (the first time
#: this long after the first plan: a share just given is not taken away at once).
ROTATE_INTERVAL_S = 1.0
#: A window that filled up keeps its subscriptions (RDY 0) for a next window that starts
#: within this many seconds (and half a heartbeat interval, so nsqd never dropped them).
KEEP_SUBSCRIBED_S = 5.0
#: A window that starts within this long of the last one skips looking at its sockets
#: first: no heartbeat can be due yet (nsqd's shortest interval is 1 s).
QUIET_S = 0.5
#: Backoff for an nsqd that could not be reached (first, longest), seconds.
RECONNECT_START_S = 1.0
RECONNECT_MAX_S = 60.0

#: Errors that mean "this nsqd cannot be reached right now": logged and skipped. Any
#: other error (nsqd refused SUB or AUTH, a bad setting) is the same on every nsqd and
#: is raised.
UNREACHABLE = (NSQConnectionError, NSQTimeoutError, NSQProtocolError)
#: When every nsqd failed with one of these, "none reachable" is raised as that error.
_SAME_EVERYWHERE: tuple[type[NSQError], ...] = (NSQTLSError, NSQTimeoutError, NSQProtocolError)

Conn = TypeVar("Conn", NSQConnection, AsyncNSQConnection)
T = TypeVar("T")


class Touched(NamedTuple):
    """What :meth:`ConsumerCore.touch_held` did."""

    touched: int  # messages TOUCHed now
    next_in: float  # seconds until the next held message is due


@dataclass(eq=False)
class _Slot(Generic[Conn]):
    """One connection to an nsqd and what the consumer knows about it."""

    key: str  # the nsqd's address; "address#2", "#3" ... for its extra connections
    address: str  # the nsqd's address (host:port)
    conn: Conn
    limit: int  # nsqd's max_rdy_count
    msg_timeout: int | None  # nsqd's msg_timeout for this connection (ms), if it said
    last_delivery: float
    rdy: int = 0  # the RDY last sent
    draining: bool = False  # not wanted any more: RDY 0, closed once answered
    closing: bool = False  # CLS sent
    reserved: int = 0  # the RDY before it was lowered: nsqd may still send that many ...
    reserved_until: float = 0.0  # ... until about then


def _nsqd_of(key: str) -> str:
    """The nsqd address of a connection key (``host:port`` or ``host:port#n``)."""
    return key.partition("#")[0]


def _check_budget(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NSQValueError(f"{what} must be an int >= 0, got {value!r}")
    return value


_CONNECTION = attrgetter("connection")


def _alive(conn: Any) -> bool:
    return conn is not None and conn.alive


def by_connection(messages: Sequence[NSQMessage]) -> list[tuple[Any, Sequence[NSQMessage]]]:
    """``messages`` grouped by the connection that delivered them (each group in their
    order), leaving out (with a warning) those whose connection is gone: nsqd redelivers
    them after its msg_timeout, and no other connection may answer them."""
    conns = set(map(_CONNECTION, messages))  # one pass in C: usually a single connection
    groups: dict[Any, Sequence[NSQMessage]]
    if len(conns) == 1:
        groups = {conns.pop(): messages}
    else:
        lists: dict[Any, list[NSQMessage]] = {conn: [] for conn in conns}
        for m in messages:
            lists[m.connection].append(m)
        groups = dict(lists)
    lost = sum(len(ms) for conn, ms in groups.items() if not _alive(conn))
    if lost:
        log.warning(
            "%s message(s) came on a connection that is gone: nsqd redelivers them "
            "after its msg_timeout",
            lost,
        )
    return [(conn, ms) for conn, ms in groups.items() if _alive(conn)]


class ConsumerCore(Generic[Conn]):
    """What :class:`~.blocking.NSQConsumer` and :class:`~.aio.AsyncNSQConsumer` are: where
    the nsqds are, the connections and their RDY split, the messages delivered and who
    answers them, and every sequence of the consumer's life as steps (the ``*_steps``
    methods, which a runner drives; they are not called directly).

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
    :param max_connections_per_nsqd: streaming only (``start``): up to this many
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
        self._own_address = self.config.address
        _check_settings(self.config, lookupd_poll_interval, max_connections_per_nsqd)
        self.lookupd_poll_interval = float(lookupd_poll_interval)
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
        self._live: tuple[Conn, ...] = ()  # every slot's connection, for Wait
        self._wanted: list[str] = []  # where the topic is, as last known
        self.producers: list[Producer] = []  # the last lookup's answer (lookupd only)
        self._retry: dict[str, tuple[float, Backoff]] = {}  # address -> (when, backoff)
        self._buffer: list[NSQMessage] = []  # delivered, not yet returned by read()
        self._ledger = Ledger()  # delivered, maybe unanswered
        self._lost = 0  # connections that broke (their messages can never be answered)
        self._budget = 0
        self._started = False  # start() or consume() ran
        self._window_ended = 0.0  # when the last window ended (monotonic)
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
        return {k: s.conn for k, s in self._slots.items() if s.conn.alive}

    @property
    def max_in_flight(self) -> int:
        """The in-flight budget shared by every connection."""
        return self._budget

    @property
    def msg_timeout_ms(self) -> int:
        """The shortest msg_timeout of the live connections (from their IDENTIFY
        responses): what held messages must be TOUCHed within. Before any connection is
        open, the config's ``msg_timeout_ms`` or nsqd's default."""
        shortest = self._negotiated_msg_timeout()
        if shortest is not None:
            return shortest
        return self.config.msg_timeout_ms or DEFAULT_MSG_TIMEOUT_MS

    def ready_counts(self) -> dict[str, int]:
        """The RDY count last sent on each connection (keyed as :attr:`connections`)."""
        return {k: s.rdy for k, s in self._slots.items()}

    def in_flight(self) -> int:
        """Messages delivered and not yet FIN'd or REQ'd, over every connection."""
        return sum(s.conn.in_flight for s in self._slots.values())

    @property
    def subscribed(self) -> bool:
        """True when the last window kept its subscriptions (it filled up, and nothing
        it delivered is left unanswered): the next window may read on them."""
        return (
            not self._streaming
            and not self._closed
            and any(s.conn.alive and not s.closing for s in self._slots.values())
            and self.in_flight() == 0
        )

    # -- answering messages, each on its own connection ------------------------------

    @staticmethod
    def finish(*messages: NSQMessage) -> None:
        """FIN messages, each on the connection that delivered it (one write per nsqd).
        Works for any delivered message, whichever consumer took it."""
        for conn, group in by_connection(messages):
            conn.finish(*group)

    @staticmethod
    def requeue(*messages: NSQMessage, delay_ms: int = 0) -> None:
        """REQ messages (redelivered after ``delay_ms`` with attempts + 1)."""
        for conn, group in by_connection(messages):
            conn.requeue(*group, delay_ms=delay_ms)

    @staticmethod
    def touch(*messages: NSQMessage) -> None:
        """TOUCH messages: each restarts its msg_timeout on its nsqd."""
        for conn, group in by_connection(messages):
            conn.touch(*group)

    def touch_held(self) -> Touched:
        """Keep what the consumer holds in flight: TOUCH every message delivered and not
        yet answered (returned by ``read`` or not) that has been in flight for a third
        (:data:`.ledger.TOUCH_AFTER_SHARE`) of the shortest msg_timeout since it was
        delivered or last TOUCHed. A caller that holds messages longer than msg_timeout
        calls it again after ``next_in`` seconds (the Spark reader's pump, the event
        trigger). A TOUCH that cannot be written is logged: nsqd then redelivers after
        msg_timeout."""
        self._drop_broken()  # what a dead connection delivered cannot be TOUCHed
        messages, next_in = self._ledger.due(time.monotonic(), self.msg_timeout_ms / 1000)
        for conn, group in by_connection(messages):
            try:
                conn.touch(*group)
            except NSQError as exc:
                log.debug("TOUCH on %s failed (%s): nsqd redelivers after msg_timeout", conn, exc)
        return Touched(len(messages), next_in)

    # -- the sequences, as steps (a runner drives them) ----------------------------------

    def consume_steps(
        self,
        *,
        max_messages: int = 1,
        timeout: float = 5.0,
        ack: AckMode = "fin",
        requeue_delay_ms: int = 0,
    ) -> Steps[list[NSQMessage]]:
        """One window over every nsqd: SUB all, share ``max_messages`` as RDY, collect up
        to ``max_messages`` or until ``timeout`` seconds pass, stop delivery, then settle.

        ``ack``: ``"fin"`` FINs them before returning, ``"req"`` REQs them (a peek;
        attempts + 1), ``"manual"`` returns them unanswered: answer them with
        ``finish`` / ``requeue`` (or the message's own methods), then ``close``, which
        REQs what is left. Messages that came on a connection that broke during the
        window are left out (nsqd redelivers them after msg_timeout).

        A window that filled up ends with RDY 0 (nsqd has sent all the RDY allowed, so
        nothing more can come) and keeps its subscriptions: the next window, if it starts
        within :data:`KEEP_SUBSCRIBED_S` (and half a heartbeat interval) and every message
        is answered, reads on them without connecting and subscribing again. A window
        that ended on its timeout stops delivery with CLS (nsqd may have been sending);
        the next one connects afresh. A consumer runs windows or one stream.
        """
        check_window(max_messages, timeout, ack, sys.maxsize)
        self._check_next_window()
        self._started = True
        window = Window(self.topic, self.channel, max_messages, timeout, ack, requeue_delay_ms)
        yield from self._open_window(window)
        if not self._slots:
            log.info("no nsqd has %s yet: the window is empty", self.topic)
            return []
        self._begin_window(window)
        for remaining in window.waits():
            yield from self._wait(min(remaining, REBALANCE_INTERVAL_S))
            window.got.extend(self._collect())
            if not self._slots:
                break
            self._rebalance()
        if len(window.got) >= window.max_messages:
            stragglers = self._pause()
        else:
            stragglers = yield from self._close_window()
        self._window_ended = time.monotonic()
        return self._end_window(window, stragglers)

    def start_steps(self, max_in_flight: int) -> Steps[None]:
        """Connect to every nsqd, SUB, and allow ``max_in_flight`` messages in flight
        across them (0: connected but paused). Raises :class:`NSQConnectionError` when
        no nsqd (or no lookupd) can be reached; producers that appear later are joined
        by ``read`` (and ``pump``)."""
        budget = _check_budget(max_in_flight, "max_in_flight")
        self._check_open(starting=True)
        self._started = self._streaming = True
        yield from self._connect_all()
        self._budget = budget
        extra = self._to_connect(self._wanted_keys(), retry_now=True)
        if extra:  # more connections per nsqd (max_connections_per_nsqd)
            yield from self._connect(extra)
        self._set_budget(budget)

    def read_steps(self, timeout: float = 1.0) -> Steps[list[NSQMessage]]:
        """The messages delivered since the last call, waiting up to ``timeout`` seconds
        for the first. They are in flight until answered (``finish``, ``requeue``, or
        the message's own methods); TOUCH the ones held longer than nsqd's msg_timeout
        (:meth:`touch_held`). Keeps the connections current (lookups, reconnects, RDY)."""
        self._check_open(starting=False)
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            yield from self._maintain()
            got = self._read_ready()
            if got:
                return got
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._read_ready()
            yield from self._wait(min(remaining, REBALANCE_INTERVAL_S))

    def pump_steps(self) -> Steps[None]:
        """Do the consumer's I/O without waiting: answer heartbeats, take in deliveries
        (``read`` returns them), reconnect and re-poll when due.

        Call it at least once per heartbeat interval (30 s by default) while the caller
        holds messages or is busy elsewhere: nsqd drops a client silent for two
        intervals, and every message it had in flight then comes back after msg_timeout.
        Cheap: one non-blocking poll of the sockets (plus a lookup when one is due).
        """
        self._check_open(starting=False)
        yield from self._wait(0.0)
        self._buffer.extend(self._collect())
        yield from self._maintain()

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the in-flight budget (0 pauses delivery; held messages stay held)."""
        self._check_open(starting=False)
        self._set_budget(_check_budget(max_in_flight, "max_in_flight"))

    def close_steps(self) -> Steps[None]:
        """CLS (no more deliveries), REQ everything delivered and unanswered, close every
        connection. Idempotent; also safe while the caller is being interrupted
        (cancelled)."""
        if self._closed:
            return
        self._closed = True
        error: BaseException | None = None
        try:
            yield from self._close_window()
            self._requeue_all()
        except GeneratorExit:  # abandoned mid-way: no step may run any more
            for conn in self._release_all():
                conn.abort()
            raise
        except BaseException as exc:  # close the connections first, then raise it
            error = exc
        yield CloseConnections(self._release_all())
        if error is not None:
            raise error

    # -- the parts of sequences ----------------------------------------------------------

    def _discover(self) -> Steps[list[str]]:
        if self.lookupd is None:
            return self._targets(None)
        producers = yield Lookup(self.lookupd, self.topic)
        return self._targets(producers)

    def _connect(self, keys: Sequence[str]) -> Steps[list[BaseException]]:
        """Open a connection for each key; the errors of those that could not be opened
        (unreachable ones are logged and backed off; any other error is raised)."""
        configs = tuple(self._config_for(_nsqd_of(k)) for k in keys)
        results = yield Connect(configs, self.topic, self.channel)
        errors: list[BaseException] = []
        failure: BaseException | None = None
        for key, result in zip(keys, results, strict=True):
            if not isinstance(result, BaseException):
                self._connected(key, result)
                continue
            errors.append(result)
            try:
                self._connect_failed(key, result)
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return errors

    def _config_for(self, address: str) -> ClientConfig:
        """The settings of a connection to ``address``: the consumer's own when it is the
        config's nsqd (one nsqd: no copy to make and check)."""
        own = self.config
        return own if address == self._own_address else own.for_nsqd(address)

    def _connect_all(self) -> Steps[None]:
        targets = yield from self._discover()
        attempted = self._to_connect(targets, retry_now=True)
        errors = yield from self._connect(attempted)
        self._check_reachable(attempted, errors)

    def _wait(self, timeout: float) -> Steps[None]:
        """Wait for deliveries, unless some are already there (or a connection failed:
        the caller collects first)."""
        for slot in self._slots.values():
            if slot.conn.has_news:
                return
        yield Wait(timeout, self._live)

    def _maintain(self) -> Steps[None]:
        """Between waits of a long-lived consumer: re-poll nsqlookupd when due, reconnect,
        close drained connections, re-plan RDY (at most every REBALANCE_INTERVAL_S)."""
        if not self._maintenance_due():
            return
        if self._poll_due():
            try:
                yield from self._discover()
            except NSQError as exc:
                self._lookup_failed(exc)
        new = self._to_connect(self._wanted_keys())
        if new:
            yield from self._connect(new)
        drained = self._drained()
        if drained:
            yield CloseConnections(tuple(s.conn for s in drained))
        self._rebalance()

    def _close_window(self) -> Steps[list[NSQMessage]]:
        """CLS every connection; what they delivered before nsqd read it."""
        slots = self._stop_delivery()
        if slots:
            outcomes = yield StartClose(tuple(s.conn for s in slots))
            for slot, outcome in zip(slots, outcomes, strict=True):
                if outcome is None:
                    slot.closing = True
                    slot.rdy = 0  # CLS did it
                elif isinstance(outcome, NSQError):
                    log.debug("CLS to %s failed: %s", slot.address, outcome)
                else:
                    raise outcome
        return self._collect()

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
            if slot.conn.alive:
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
            if a not in self._slots
            and (retry_now or a not in self._retry or self._retry[a][0] <= now)
        ]

    def _maintenance_due(self) -> bool:
        now = time.monotonic()
        if now < self._next_maintenance:
            return False
        self._next_maintenance = now + REBALANCE_INTERVAL_S
        self._next_rebalance = 0.0  # the re-plan that follows is part of it
        return True

    def _poll_due(self) -> bool:
        return self.lookupd is not None and time.monotonic() >= self._next_poll

    def _lookup_failed(self, exc: NSQError) -> None:
        """A re-poll found no lookupd: keep what is connected, try again later."""
        log.warning("%s; keeping the %s connection(s) open", exc, len(self._slots))
        self._next_poll = time.monotonic() + min(self.lookupd_poll_interval, EMPTY_POLL_INTERVAL_S)

    def _connected(self, key: str, conn: Conn) -> None:
        self._retry.pop(key, None)
        timeout = conn.server_info.get("msg_timeout")
        negotiated = timeout if isinstance(timeout, int) and timeout > 0 else None
        slot = _Slot(key, _nsqd_of(key), conn, conn.max_rdy_count, negotiated, time.monotonic())
        self._slots[key] = slot
        self._slots_changed()
        log.debug("reading %s/%s from nsqd at %s", self.topic, self.channel, key)

    def _retry_later(self, key: str) -> float:
        """Back off from ``key`` (an nsqd that could not be reached, or dropped): the
        seconds until its next try."""
        backoff = self._retry.get(key, (0.0, None))[1] or Backoff(
            RECONNECT_START_S, RECONNECT_MAX_S
        )
        wait = backoff.next()
        self._retry[key] = (time.monotonic() + wait, backoff)
        return wait

    def _connect_failed(self, address: str, exc: BaseException) -> None:
        """Log an nsqd that could not be reached (and back off), or raise what is not
        about reachability."""
        if not isinstance(exc, UNREACHABLE):
            raise exc
        wait = self._retry_later(address)
        log.warning(
            "nsqd at %s skipped for %s/%s: %s (next try in %gs)",
            address,
            self.topic,
            self.channel,
            exc,
            wait,
        )

    def _check_reachable(self, attempted: Sequence[str], errors: Sequence[BaseException]) -> None:
        """After a first connect: no nsqd reachable is an error, naming each. When every
        one failed the same way it is that error: a failed TLS handshake is a setting to
        fix, not an outage to wait out; a timeout is a timeout; an answer that is not
        NSQ's is a wrong address."""
        if attempted and not self._slots:
            reasons = "; ".join(f"{a} ({e})" for a, e in zip(attempted, errors, strict=True))
            kind = next(
                (k for k in _SAME_EVERYWHERE if all(isinstance(e, k) for e in errors)),
                NSQConnectionError,
            )
            raise kind(f"could not read {self.topic}/{self.channel} from any nsqd: {reasons}")

    def _slots_changed(self) -> None:
        self._live = tuple(s.conn for s in self._slots.values())
        self._shape = ()

    def _release_all(self) -> tuple[Conn, ...]:
        """Forget every connection (the caller closes them)."""
        conns = tuple(s.conn for s in self._slots.values())
        self._slots.clear()
        self._slots_changed()
        return conns

    # -- messages in: who holds what -----------------------------------------------------

    def _collect(self) -> list[NSQMessage]:
        """Take what every live connection delivered (into the ledger); drop the
        connections that broke, with what they delivered."""
        got: list[NSQMessage] = []
        broken = False
        now = time.monotonic()
        for slot in self._slots.values():
            conn = slot.conn
            if not conn.has_news:
                continue
            if not conn.alive:
                broken = True
            else:
                got += conn.take_messages()
                slot.last_delivery = now
        if got:
            self._ledger.add(got, now, self.in_flight)
        if broken:
            self._drop_broken()
        return got

    def _drop_broken(self) -> None:
        for key, slot in list(self._slots.items()):
            conn = slot.conn
            if conn.alive:
                continue
            log.warning(
                "connection to nsqd at %s lost (%s); %s unanswered message(s) come back "
                "after its msg_timeout",
                key,
                conn.failure or "closed",
                conn.in_flight,
            )
            del self._slots[key]
            self._slots_changed()
            self._lost += 1
            conn.abort()
            self._forget(conn)
            if key not in self._retry:
                self._retry_later(key)

    def _forget(self, conn: Conn) -> None:
        """A connection broke: its messages can never be answered, so nobody is given
        them and nobody TOUCHes them (nsqd redelivers them after its msg_timeout)."""
        if self._buffer:
            self._buffer = [m for m in self._buffer if m.connection is not conn]
        self._ledger.forget(conn)

    def _drained(self) -> list[_Slot[Conn]]:
        """Draining slots (a vanished producer, an extra connection the budget no longer
        needs) whose messages are all answered: the caller closes them."""
        done = [s for s in self._slots.values() if s.draining and s.conn.in_flight == 0]
        for slot in done:
            del self._slots[slot.key]
        if done:
            self._slots_changed()
        return done

    # -- the RDY split -----------------------------------------------------------------

    def _rebalance(self, force: bool = False) -> None:
        """Re-plan the RDY split when what it depends on changed, and send what changed."""
        now = time.monotonic()
        if not force and now < self._next_rebalance:
            return
        self._next_rebalance = now + REBALANCE_INTERVAL_S
        slots = [s for s in self._slots.values() if not s.closing and s.conn.alive]
        active = [s for s in slots if not s.draining]
        # What a draining connection still holds counts against the budget until answered.
        budget = max(self._budget - sum(s.conn.in_flight for s in slots if s.draining), 0)
        plan = self._plan(now, active, budget, force)
        if plan is None:
            return
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

    def _plan(
        self, now: float, active: list[_Slot[Conn]], budget: int, force: bool
    ) -> dict[str, int] | None:
        """The RDY count for each active connection, or None when nothing it depends on
        changed since the last plan."""
        in_flight = [s.conn.in_flight for s in active]
        # Busy: delivered lately, or took everything it was allowed since the last plan.
        busy = [
            now - s.last_delivery < IDLE_AFTER_S
            or (0 < s.rdy <= f and s.last_delivery >= self._planned_at)
            for s, f in zip(active, in_flight, strict=True)
        ]
        spare = budget - sum(in_flight)
        if not self._next_rotation:  # the first turn comes an interval after the first plan
            self._next_rotation = now + ROTATE_INTERVAL_S
        if 0 < spare < len(active) and now >= self._next_rotation:
            self._offset += max(spare, 1)
            self._next_rotation = now + ROTATE_INTERVAL_S
        settling = tuple(now < s.reserved_until for s in active)
        shape = (budget, tuple(s.key for s in active), tuple(busy), settling, self._offset)
        if shape == self._shape and not force:
            return None
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
        return {s.key: c for s, c in zip(active, counts, strict=True)}

    def _set_budget(self, budget: int) -> None:
        self._budget = _check_budget(budget, "max_in_flight")
        self._mark_draining()
        self._rebalance(force=True)

    # -- checks and the parts of a window and a close -------------------------------------

    def _check_open(self, starting: bool) -> None:
        if self._closed:
            raise NSQStateError(f"{self!r} is closed")
        if starting and self._started:
            raise NSQStateError(
                "a consumer runs windows or one stream: use a new consumer for the stream"
            )
        if not starting and not self._streaming:
            raise NSQStateError("call start() before read()")

    def _negotiated_msg_timeout(self) -> int | None:
        """The shortest msg_timeout the live connections negotiated (ms), if any did."""
        known = [s.msg_timeout for s in self._slots.values() if s.msg_timeout and s.conn.alive]
        return min(known, default=None)

    def _check_next_window(self) -> None:
        if self._closed:
            raise NSQStateError(f"{self!r} is closed")
        if self._streaming:
            raise NSQStateError("a consumer runs windows or one stream: this one streams")
        if self.in_flight():
            raise NSQStateError(
                f"{self.in_flight()} message(s) of the last window are unanswered: finish or "
                "requeue them before the next window (or close the consumer)"
            )

    def _open_window(self, window: Window) -> Steps[None]:
        """Connect and SUB for a window. A later window reads on what the last one kept
        when it is fresh, and connects to what is missing."""
        keep_for = min(KEEP_SUBSCRIBED_S, self.config.effective_heartbeat_interval_ms / 2000)
        stale = time.monotonic() - self._window_ended > keep_for
        done = [s for s in self._slots.values() if stale or s.closing or s.draining]
        for slot in done:
            del self._slots[slot.key]
        if done:
            self._slots_changed()
            yield CloseConnections(tuple(s.conn for s in done))
        if not self._slots:
            yield from self._connect_all()
            return
        if time.monotonic() - self._window_ended > QUIET_S:
            yield from self._wait(0.0)  # heartbeats answered; a connection nsqd closed shows
            window.got.extend(self._collect())
        targets = (yield from self._discover()) if self._poll_due() else self._wanted
        attempted = self._to_connect(targets, retry_now=True)
        if attempted:
            yield from self._connect(attempted)

    def _pause(self) -> list[NSQMessage]:
        """After a full window: RDY 0 everywhere (nsqd has sent all the RDY allowed, so
        nothing more comes, and nothing does once the window's messages are answered);
        the subscriptions stay for the next window. What a connection still had is
        returned, as CLS's stragglers are."""
        self._budget = 0
        for slot in self._slots.values():
            if slot.rdy and slot.conn.alive:
                try:
                    slot.conn.ready(0)
                except NSQError as exc:
                    log.debug("RDY 0 to %s failed: %s", slot.key, exc)
            slot.rdy = slot.reserved = 0
        self._shape = ()
        return self._collect()

    def _begin_window(self, window: Window) -> None:
        capacity = sum(s.limit for s in self._slots.values())
        if window.max_messages > capacity:
            raise NSQValueError(
                f"max_messages={window.max_messages} exceeds the nsqds' max RDY count "
                f"({capacity} over {len(self._slots)} nsqd(s), --max-rdy-count): a window "
                "holds all its messages in flight until it ends"
            )
        shortest = self._negotiated_msg_timeout()
        if shortest is not None and window.timeout * 1000 >= shortest:
            raise NSQValueError(
                f"a consume window of {window.timeout:g}s is not shorter than nsqd's "
                f"msg_timeout of {shortest} ms: messages would be redelivered before the "
                "window ends; shorten the window or raise the connection's msg_timeout_ms"
            )
        self._set_budget(window.max_messages)

    def _end_window(self, window: Window, stragglers: list[NSQMessage]) -> list[NSQMessage]:
        """After CLS: drop what came on a connection that broke, settle the rest."""
        got = window.got
        if self._lost:  # else every message came on a live connection: no need to look
            got = [m for m in got if _alive(m.connection)]
            stragglers = [m for m in stragglers if _alive(m.connection)]
        if len(got) != len(window.got):
            log.warning(
                "%s message(s) of the window came on a connection that broke: nsqd "
                "redelivers them after its msg_timeout",
                len(window.got) - len(got),
            )
        return settle_window(
            self, got, stragglers, window.max_messages, window.ack, window.requeue_delay_ms
        )

    def _read_ready(self) -> list[NSQMessage]:
        """What ``read`` returns now: everything delivered and not yet handed out."""
        self._buffer.extend(self._collect())
        out, self._buffer = self._buffer, []
        return out

    def _stop_delivery(self) -> list[_Slot[Conn]]:
        """Before closing: no budget any more; the slots that still need a CLS. CLS sets
        the connection's RDY to 0 (tests/conformance/transcripts/FACTS.md section 6), so
        nothing REQ'd after it is handed straight back, and no RDY 0 need go first."""
        self._budget = 0
        self._streaming = False
        return [s for s in self._slots.values() if s.conn.alive and not s.closing]

    def _requeue_all(self) -> None:
        """REQ everything delivered and unanswered, on every live connection."""
        self._buffer = []
        self._collect()
        if not self.in_flight():  # all answered: no need to look through the ledger
            self._ledger = Ledger()
            return
        held = self._ledger.take_unanswered()
        for conn, group in by_connection(held):
            try:
                conn.requeue(*group)
            except NSQError as exc:
                log.warning(
                    "could not REQ %s message(s) on nsqd at %s (%s): nsqd redelivers "
                    "them after its msg_timeout",
                    len(group),
                    conn.config.address,
                    exc,
                )


def _check_settings(config: ClientConfig, poll_interval: object, per_nsqd: object) -> None:
    """The consumer's own arguments, each named when it is wrong."""
    if config.heartbeat_interval_ms == -1:
        raise NSQValueError(
            "heartbeat_interval_ms=-1 disables heartbeats; nsqd refuses SUB without them"
        )
    if (
        isinstance(poll_interval, bool)
        or not isinstance(poll_interval, (int, float))
        or poll_interval <= 0
    ):
        raise NSQValueError(
            f"lookupd_poll_interval must be a number of seconds > 0, got {poll_interval!r}"
        )
    if isinstance(per_nsqd, bool) or not isinstance(per_nsqd, int) or per_nsqd < 1:
        raise NSQValueError(f"max_connections_per_nsqd must be an int >= 1, got {per_nsqd!r}")
