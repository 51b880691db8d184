"""The consumer: one topic/channel over every nsqd that has it, its life and its
consume windows, as steps, with no I/O.

NSQ as deployed runs an nsqd on every producing host; a consumer reads a topic from all
of them (found through nsqlookupd, or a static list of nsqd TCP addresses; one nsqd is a
list of one). This is the one place that does it, for everything in the provider that
consumes (the hook's consume window, the sensor, the triggers, the Spark reader).

What it guarantees:

- one connection per nsqd, each SUB'd to the same topic/channel; one RDY budget shared
  as :mod:`._rdy_split` splits it (never above an nsqd's ``max_rdy_count``). A streaming
  consumer that holds more messages than one connection may (``max_rdy_count``, 2500 by
  default) can allow more connections per nsqd (``max_connections_per_nsqd``): each
  nsqd then gets as many as one nsqd needs to hold the whole budget;
- FIN, REQ and TOUCH always go on the connection that delivered the message
  (:attr:`~..message.NSQMessage.connection`; ``message.nsqd`` is its address);
- at-least-once: the consumer never FINs anything on its own. ``close()`` REQs whatever
  it delivered and nobody answered (after ``CLS``, which stops delivery, so nsqd does not
  hand it straight back). A connection that breaks takes its unanswered messages with it:
  nsqd redelivers them after its msg_timeout; they are never handed out from a dead
  connection;
- messages held longer than nsqd's msg_timeout stay in flight when the holder calls
  ``touch_held()``, which TOUCHes each a third of msg_timeout
  (:data:`~._connections.TOUCH_AFTER_SHARE`) after its delivery or its last TOUCH (one
  TOUCH policy for every holder);
- an nsqd that cannot be reached is logged and skipped; only when none can be is it an
  error (:class:`NSQConnectionError` naming each). A long-lived consumer retries it
  with backoff, re-asks nsqlookupd every ``lookupd_poll_interval`` seconds, connects to
  producers that appeared, and stops reading from those that vanished (``RDY 0``; the
  connection closes once what it delivered is answered).

Three shapes: one bounded window (``consume``); long-lived streaming (``start``,
``read``, ``set_max_in_flight``, ``touch_held``; the blocking consumer also has ``pump``);
``close``. Which calls are possible when is a state table (h11's ``_state.py`` keeps
HTTP's the same way): every call that changes or needs the state is one lookup in
:data:`TRANSITIONS`, keyed by a :class:`Call` (typed, so mypy checks each), and an
illegal one is one clear error naming the call and the state::

                 consume                    window ended
    NEW ──────────────────────► WINDOWING ──────────────► IDLE
     │                              ▲                      │
     │ start                        └────── consume ───────┘
     ▼            started
    STARTING ───────────────► STREAMING ⟲ read, pump, set_max_in_flight

    any state ── close ──► CLOSING ── closed ──► CLOSED   (close again: nothing to do)

``touch_held`` is possible in every state (it TOUCHes what is held, if anything). A
consumer runs windows or one stream, never both; a window that fails still ends (IDLE),
a start that fails does not (close that consumer).

How it is written: each of those is a sequence of steps (:mod:`..runners.steps`:
connect these, wait up to t, send these RDY/FIN/REQ/TOUCH, CLS these, close these, what
time is it); nothing here touches a socket or reads the clock. The work on the
connections, a stream's read included, is :mod:`._connections`. ``NSQConsumer`` and
``AsyncNSQConsumer`` run the sequences, one on blocking sockets, the other on the
asyncio event loop (:mod:`._consumers`).
"""

from __future__ import annotations

import enum
import functools
import logging
import math
import sys
from collections.abc import Callable, Generator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Concatenate, Generic, Literal, NamedTuple, ParamSpec, TypeVar

from ...protocol.constants import DEFAULT_MSG_TIMEOUT_MS
from ...protocol.errors import NSQError, NSQStateError, NSQValueError
from ...protocol.names import validate_channel_name, validate_topic_name
from ...protocol.value_checks import check_int, check_seconds
from ..http.lookupd_api import LookupdClient, Producer
from ..message import NSQMessage, answer, on_live_connections
from ..runners.steps import (
    NOW,
    Close,
    Runnable,
    Send,
    Steps,
    Wait,
    WriteStep,
    WriteSteps,
    answers,
    fail_on_error,
)
from ..settings.address import nsqd_tcp_addresses as parse_nsqd_addresses
from ..settings.address import parse_addresses
from ..settings.client_config import ClientConfig
from ._connections import Conn, Connections, Contact
from ._discovery import DEFAULT_LOOKUPD_POLL_INTERVAL_S, Discovery
from ._rdy_split import REBALANCE_INTERVAL_S

log = logging.getLogger("airflow_provider_nsq.client.consumer")

P = ParamSpec("P")
T = TypeVar("T")

# -- its life: the state table ---------------------------------------------------------


class ConsumerState(enum.Enum):
    """Where a consumer is in its life."""

    NEW = "new"
    WINDOWING = "windowing"  # a consume window is running
    IDLE = "idle"  # between windows
    STARTING = "starting"  # start() is connecting
    STREAMING = "streaming"
    CLOSING = "closing"
    CLOSED = "closed"


class Call(enum.Enum):
    """What moves a consumer's state on: a public call (its value is the method's name)
    or the end of a longer one."""

    CONSUME = "consume"
    WINDOW_ENDED = "window ended"
    START = "start"
    STARTED = "started"
    READ = "read"
    PUMP = "pump"
    SET_MAX_IN_FLIGHT = "set_max_in_flight"
    TOUCH_HELD = "touch_held"
    CLOSE = "close"
    CLOSED = "closed"


NEW, WINDOWING, IDLE = ConsumerState.NEW, ConsumerState.WINDOWING, ConsumerState.IDLE
STARTING, STREAMING = ConsumerState.STARTING, ConsumerState.STREAMING
CLOSING, CLOSED = ConsumerState.CLOSING, ConsumerState.CLOSED

#: (state, call) -> the state after it. A pair that is not here is an illegal call.
TRANSITIONS: dict[tuple[ConsumerState, Call], ConsumerState] = {
    (NEW, Call.CONSUME): WINDOWING,
    (IDLE, Call.CONSUME): WINDOWING,
    (WINDOWING, Call.WINDOW_ENDED): IDLE,
    (NEW, Call.START): STARTING,
    (STARTING, Call.STARTED): STREAMING,
    (STREAMING, Call.READ): STREAMING,
    (STREAMING, Call.PUMP): STREAMING,
    (STREAMING, Call.SET_MAX_IN_FLIGHT): STREAMING,
    **{(state, Call.TOUCH_HELD): state for state in ConsumerState},
    **{(state, Call.CLOSE): CLOSING for state in (NEW, WINDOWING, IDLE, STARTING, STREAMING)},
    (CLOSING, Call.CLOSE): CLOSING,
    (CLOSED, Call.CLOSE): CLOSED,
    (CLOSING, Call.CLOSED): CLOSED,
}

_WINDOWS_OR_STREAM = "a consumer runs windows or one stream"
#: Why a call is illegal in a state, for the error.
_WHY: dict[tuple[ConsumerState, Call], str] = {
    (WINDOWING, Call.CONSUME): "a window is running: one at a time",
    (STARTING, Call.CONSUME): f"{_WINDOWS_OR_STREAM}: this one streams",
    (STREAMING, Call.CONSUME): f"{_WINDOWS_OR_STREAM}: this one streams",
    (WINDOWING, Call.START): f"{_WINDOWS_OR_STREAM}: use a new consumer for the stream",
    (IDLE, Call.START): f"{_WINDOWS_OR_STREAM}: use a new consumer for the stream",
    (STARTING, Call.START): "start() was called already",
    (STREAMING, Call.START): "start() was called already",
}
_NOT_STARTED = "call start() before read(), pump() or set_max_in_flight()"
_WHY_IN: dict[ConsumerState, str] = {
    NEW: _NOT_STARTED,
    WINDOWING: _NOT_STARTED,
    IDLE: _NOT_STARTED,
    STARTING: "start() did not complete: close this consumer",
    CLOSING: "the consumer is closed",
    CLOSED: "the consumer is closed",
}

#: The calls a holder makes for its consumer (the consumer's public methods that do I/O).
HELD_CALLS = frozenset(
    {Call.CONSUME, Call.START, Call.READ, Call.PUMP, Call.SET_MAX_IN_FLIGHT}
    | {Call.TOUCH_HELD, Call.CLOSE}
)
#: Who is calling the consumer now: a holder sets itself here around each of its calls
#: (``CALLING_HOLDER.set(holder)``, then ``reset``). A context variable, so another
#: thread or another asyncio task that calls the consumer meanwhile is not taken for
#: the holder.
CALLING_HOLDER: ContextVar[object | None] = ContextVar("nsq_consumer_holder", default=None)


class Lifecycle:
    """A consumer's :class:`ConsumerState`, changed only through :meth:`do`, and who
    holds it (:attr:`holder`: while one does, only it may call the consumer)."""

    __slots__ = ("holder", "state")

    def __init__(self) -> None:
        self.state = NEW
        self.holder: object | None = None

    def do(self, call: Call) -> ConsumerState:
        """Move the state on for ``call``: the state before it. :class:`NSQStateError`
        naming both when the call is not possible now, or naming the holder when a held
        consumer is called by anyone else."""
        holder = self.holder
        if holder is not None and call in HELD_CALLS and CALLING_HOLDER.get() is not holder:
            raise NSQStateError(
                f"{call.value}() was called on a consumer that {holder!r} holds: while a "
                "holder holds a consumer, only the holder calls it (it reads, TOUCHes, "
                "answers and closes); call the holder instead"
            )
        before = self.state
        try:
            self.state = TRANSITIONS[before, call]
        except KeyError:
            why = _WHY.get((before, call)) or _WHY_IN.get(before, "not possible")
            raise NSQStateError(
                f"{call.value}() is not possible while the consumer is {before.value}: {why}"
            ) from None
        return before


# -- consume windows --------------------------------------------------------------------

AckMode = Literal["fin", "req", "manual"]
ACK_MODES: tuple[str, ...] = ("fin", "req", "manual")
#: A window that filled up keeps its subscriptions (RDY 0) for a next window that starts
#: within this many seconds (and half a heartbeat interval, so nsqd never dropped them).
KEEP_SUBSCRIBED_S = 5.0
#: A window that starts within this long of the last one skips looking at its sockets
#: first: no heartbeat can be due yet (nsqd's shortest interval is 1 s).
QUIET_S = 0.5


def check_window(max_messages: object, timeout: object, ack: object, max_rdy_count: int) -> None:
    """Validate a consume window's arguments, naming the bad one."""
    count = check_int(max_messages, "max_messages", minimum=1)
    if count > max_rdy_count:
        raise NSQValueError(
            f"max_messages={count} exceeds nsqd's max RDY count of {max_rdy_count} "
            "(--max-rdy-count): a window holds all its messages in flight until it ends"
        )
    check_seconds(timeout, "timeout")
    if ack not in ACK_MODES:
        raise NSQValueError(f"ack must be one of {', '.join(ACK_MODES)}, got {ack!r}")


@dataclass(frozen=True, slots=True)
class ConsumeWindow:
    """One consume window: the arguments ``consume`` took, and the messages it got."""

    max_messages: int
    timeout: float
    ack: AckMode
    requeue_delay_ms: int
    got: list[NSQMessage] = field(default_factory=list)


class ConsumeWindows(Generic[Conn]):
    """A consumer's consume windows, one after the other, over its connections: open
    (on what the last full window kept, when it is fresh), share ``max_messages`` as
    RDY, collect until full or the deadline, pause (RDY 0) or CLS, and settle (REQ what
    came beyond ``max_messages``, apply ``ack``)."""

    def __init__(self, conns: Connections[Conn]) -> None:
        self._conns: Connections[Conn] = conns
        heartbeat_s = conns.config.effective_heartbeat_interval_ms / 1000
        self._keep_for = min(KEEP_SUBSCRIBED_S, heartbeat_s / 2)
        self._ended = -math.inf  # when the last window ended

    def window_steps(self, window: ConsumeWindow, now: float) -> Steps[Conn, list[NSQMessage]]:
        """One window (see ``ConsumerSteps.consume_steps``); its messages, settled."""
        conns = self._conns
        now = yield from self._open_steps(window, now)
        if not conns.pool.slots:
            log.info("no nsqd has %s yet: the window is empty", conns.topic)
            return []
        yield from self._begin_steps(window, now)
        deadline = now + window.timeout
        while len(window.got) < window.max_messages and now < deadline:
            # No step between the last collect and this wait lets a delivery in unseen.
            now = yield Wait(min(deadline - now, REBALANCE_INTERVAL_S), conns.pool.live)
            window.got.extend((yield from conns.collect_steps(now)))
            if not conns.pool.slots:
                break
            yield from conns.rebalance_steps(now)
        if len(window.got) >= window.max_messages:
            # nsqd has sent all the RDY allowed: RDY 0 keeps the subscriptions for the next
            # window (what a connection still had is returned, as CLS's stragglers are).
            yield from conns.pause_steps(now)
            stragglers = yield from conns.collect_steps(now)
        else:
            stragglers = yield from conns.stop_delivery_steps(now)
        self._ended = now
        return (yield from self._end_steps(window, stragglers))

    def _open_steps(self, window: ConsumeWindow, now: float) -> Steps[Conn, float]:
        """Connect and SUB for a window. A later window reads on what the last one kept
        when it is fresh, and connects to what is missing."""
        conns = self._conns
        pool = conns.pool
        stale = now - self._ended > self._keep_for
        done = [s for s in pool.slots.values() if stale or s.closing or s.draining]
        if done:
            yield Close(pool.remove(done))
        if not pool.slots:
            return (yield from conns.connect_all_steps(now))
        if now - self._ended > QUIET_S:
            now = yield from conns.wait_steps(0.0, now)  # heartbeats answered; a close shows
            window.got.extend((yield from conns.collect_steps(now)))
        if now >= conns.discovery.next_poll:
            yield from conns.discover_steps(now)
        now, _ = yield from conns.connect_steps(pool.missing(conns.discovery.wanted), now)
        return now

    def _begin_steps(self, window: ConsumeWindow, now: float) -> WriteSteps[None]:
        pool = self._conns.pool
        capacity = sum(s.limit for s in pool.slots.values())
        if window.max_messages > capacity:
            raise NSQValueError(
                f"max_messages={window.max_messages} exceeds the nsqds' max RDY count "
                f"({capacity} over {len(pool)} nsqd(s), --max-rdy-count): a window "
                "holds all its messages in flight until it ends"
            )
        shortest = pool.negotiated_msg_timeout()
        if shortest is not None and window.timeout * 1000 >= shortest:
            raise NSQValueError(
                f"a consume window of {window.timeout:g}s is not shorter than nsqd's "
                f"msg_timeout of {shortest} ms: messages would be redelivered before the "
                "window ends; shorten the window or raise the connection's msg_timeout_ms"
            )
        yield from self._conns.set_budget_steps(window.max_messages, now)

    def _end_steps(
        self, window: ConsumeWindow, stragglers: list[NSQMessage]
    ) -> Generator[Send, list[NSQError | None], list[NSQMessage]]:
        """After CLS (or RDY 0): drop what came on a connection that broke, settle the
        rest (REQ the stragglers beyond ``max_messages``, then apply ``ack``)."""
        got = window.got
        if self._conns.lost:  # else every message came on a live connection: no need to look
            got = on_live_connections(got)
            stragglers = on_live_connections(stragglers)
        if len(got) != len(window.got):
            log.warning(
                "%s message(s) of the window came on a connection that broke: nsqd "
                "redelivers them after its msg_timeout",
                len(window.got) - len(got),
            )
        # The messages it returns: what it got, and the stragglers nsqd sent before it
        # read CLS while they fit max_messages; the stragglers beyond that are REQ'd.
        room = window.max_messages - len(got)
        got, extra = got + stragglers[:room], stragglers[room:]
        writes = answers(extra, "REQ")
        if window.ack == "fin":
            writes += answers(got, "FIN")
        elif window.ack == "req":
            writes += answers(got, "REQ", window.requeue_delay_ms)
        if writes:
            fail_on_error((yield Send(writes)))
        return got


# -- what callers see: the sequences of a consumer's life --------------------------------


def method(
    steps: Callable[Concatenate[ConsumerSteps[Conn], P], WriteSteps[T]],
) -> Callable[Concatenate[ConsumerSteps[Conn], P], T]:
    """The sequence ``steps``, which only writes, as a plain method: the consumer runs
    it to its end at once (:meth:`ConsumerSteps.run_now`) and the method returns what it
    returns."""

    @functools.wraps(steps)
    def call(self: ConsumerSteps[Conn], *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run_now(steps(self, *args, **kwargs))

    call.__name__ = call.__qualname__ = steps.__name__.removesuffix("_steps")
    return call


class Touched(NamedTuple):
    """What ``touch_held()`` did."""

    touched: int  # messages TOUCHed now
    next_in: float  # seconds until the next held message is due


class ConsumerSteps(Generic[Conn]):
    """What ``NSQConsumer`` and ``AsyncNSQConsumer`` are (see :mod:`._core`): what
    callers can see of the consumer, and every sequence of its life as steps (the
    ``*_steps`` methods, which a runner drives).

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
        if self.config.heartbeat_interval_ms == -1:
            raise NSQValueError(
                "heartbeat_interval_ms=-1 disables heartbeats; nsqd refuses SUB without them"
            )
        check_seconds(lookupd_poll_interval, "lookupd_poll_interval")
        check_int(max_connections_per_nsqd, "max_connections_per_nsqd", minimum=1)
        self.lookupd_poll_interval = float(lookupd_poll_interval)
        self.max_connections_per_nsqd = max_connections_per_nsqd
        lookupds = parse_addresses(lookupd_http_addresses, "lookupd_http_addresses")
        self.lookupd: LookupdClient | None = (
            LookupdClient(lookupds, timeout=lookupd_timeout or self.config.connect_timeout)
            if lookupds
            else None
        )
        static = parse_nsqd_addresses(nsqd_tcp_addresses) or [self.config.address]
        discovery = Discovery(topic, static, self.lookupd, self.lookupd_poll_interval)
        self._life = Lifecycle()
        self._conns: Connections[Conn] = Connections(
            topic, channel, self.config, discovery, max_connections_per_nsqd
        )
        self._windows: ConsumeWindows[Conn] = ConsumeWindows(self._conns)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.topic}/{self.channel} from {self._conns.discovery!r}"
            f": {len(self._conns.pool)} connection(s), {self.state.value}>"
        )

    def run_now(self, steps: Runnable[WriteStep, T]) -> T:
        """Run a sequence that only writes (:data:`~..runners.steps.WriteStep`) to its
        end at once, without an event loop: each consumer class does it with its runner."""
        raise NotImplementedError

    def held_by(self, holder: object) -> None:
        """From now on only ``holder`` calls this consumer (with itself in
        :data:`CALLING_HOLDER` around each call); any other caller gets an NSQStateError
        naming it. A consumer is held once, by one holder."""
        current = self._life.holder
        if current is not None and current is not holder:
            raise NSQStateError(f"this consumer is held by {current!r} already")
        self._life.holder = holder

    # -- what callers can see --------------------------------------------------------

    @property
    def state(self) -> ConsumerState:
        """Where the consumer is in its life (see :mod:`._core`)."""
        return self._life.state

    @property
    def connections(self) -> dict[str, Conn]:
        """The live connections by nsqd address (``host:port``; an nsqd's extra
        connections, see ``max_connections_per_nsqd``, as ``host:port#2`` ...)."""
        return {k: s.conn for k, s in self._conns.pool.slots.items() if s.conn.alive}

    @property
    def max_in_flight(self) -> int:
        """The in-flight budget shared by every connection."""
        return self._conns.budget

    @property
    def msg_timeout_ms(self) -> int:
        """The shortest msg_timeout of the live connections (from their IDENTIFY
        responses): what held messages must be TOUCHed within. Before any connection is
        open, the config's ``msg_timeout_ms`` or nsqd's default."""
        shortest = self._conns.pool.negotiated_msg_timeout()
        if shortest is not None:
            return shortest
        return self.config.msg_timeout_ms or DEFAULT_MSG_TIMEOUT_MS

    @property
    def producers(self) -> list[Producer]:
        """The nsqds the last nsqlookupd lookup listed (lookupd only)."""
        return self._conns.discovery.producers

    def ready_counts(self) -> dict[str, int]:
        """The RDY count last sent on each connection (keyed as :attr:`connections`)."""
        return {k: s.rdy for k, s in self._conns.pool.slots.items()}

    def in_flight(self) -> int:
        """Messages delivered and not yet FIN'd or REQ'd, over every connection."""
        return self._conns.pool.in_flight()

    @property
    def subscribed(self) -> bool:
        """True when the last window kept its subscriptions (it filled up, and nothing
        it delivered is left unanswered): the next window may read on them."""
        return (
            self.state is IDLE
            and any(s.conn.alive and not s.closing for s in self._conns.pool.slots.values())
            and self.in_flight() == 0
        )

    def contact_steps(self, now: float | None = None) -> WriteSteps[dict[str, Contact]]:
        """Per nsqd (``host:port``: every one the consumer should read from, and every
        one it is connected to): whether a connection to it is up, and the seconds since
        it last sent anything, heartbeats included (None: never heard), at ``now``
        (``time.monotonic()`` seconds; default: the current time). For health checks: a
        connected nsqd silent for more than two heartbeat intervals is one that would
        have dropped the connection."""
        if now is None:
            now = yield NOW
        return self._conns.pool.contact(self._conns.discovery.wanted, now)

    contact = method(contact_steps)

    # -- answering messages: batch aliases of the messages' own methods ----------------

    @staticmethod
    def finish(*messages: NSQMessage) -> None:
        """``message.finish()`` for each, one write per connection (each on the
        connection that delivered it). Works for any delivered message."""
        answer(messages, "FIN")

    @staticmethod
    def requeue(*messages: NSQMessage, delay_ms: int = 0) -> None:
        """``message.requeue(delay_ms)`` for each (redelivered after ``delay_ms`` with
        attempts + 1), one write per connection."""
        answer(messages, "REQ", delay_ms)

    @staticmethod
    def touch(*messages: NSQMessage) -> None:
        """``message.touch()`` for each (restarts its msg_timeout), one write per
        connection."""
        answer(messages, "TOUCH")

    # -- the sequences, as steps (a runner drives them) ----------------------------------

    def consume_steps(
        self,
        *,
        max_messages: int = 1,
        timeout: float = 5.0,
        ack: AckMode = "fin",
        requeue_delay_ms: int = 0,
    ) -> Steps[Conn, list[NSQMessage]]:
        """One window over every nsqd: SUB all, share ``max_messages`` as RDY, collect up
        to ``max_messages`` or until ``timeout`` seconds pass, stop delivery, then settle.

        ``ack``: ``"fin"`` FINs them before returning, ``"req"`` REQs them (a peek;
        attempts + 1), ``"manual"`` returns them unanswered: answer them (the messages'
        own ``finish()`` / ``requeue()``), then ``close``, which REQs what is left.
        Messages that came on a connection that broke during the window are left out
        (nsqd redelivers them after msg_timeout).

        A window that filled up ends with RDY 0 (nsqd has sent all the RDY allowed, so
        nothing more can come) and keeps its subscriptions: the next window, if it starts
        within :data:`KEEP_SUBSCRIBED_S` (and half a heartbeat interval) and every message
        is answered, reads on them without connecting and subscribing again. A window
        that ended on its timeout stops delivery with CLS (nsqd may have been sending);
        the next one connects afresh. A consumer runs windows or one stream.
        """
        check_window(max_messages, timeout, ack, sys.maxsize)
        self._life.do(Call.CONSUME)
        try:
            unanswered = self.in_flight()
            if unanswered:
                raise NSQStateError(
                    f"{unanswered} message(s) of the last window are unanswered: finish or "
                    "requeue them before the next window (or close the consumer)"
                )
            window = ConsumeWindow(max_messages, timeout, ack, requeue_delay_ms)
            return (yield from self._windows.window_steps(window, (yield NOW)))
        finally:
            if self._life.state is WINDOWING:
                self._life.do(Call.WINDOW_ENDED)

    def start_steps(self, max_in_flight: int) -> Steps[Conn, None]:
        """Connect to every nsqd, SUB, and allow ``max_in_flight`` messages in flight
        across them (0: connected but paused). Raises :class:`NSQConnectionError` when
        no nsqd (or no lookupd) can be reached; producers that appear later are joined
        by ``read`` (and ``pump``)."""
        budget = check_int(max_in_flight, "max_in_flight", minimum=0)
        self._life.do(Call.START)
        conns = self._conns
        conns.streaming = True
        now = yield from conns.connect_all_steps((yield NOW))
        conns.budget = budget
        # More connections per nsqd (max_connections_per_nsqd), now that its limit is
        # known (an nsqd that just failed is not tried again before its backoff).
        extra = conns.retries.due(conns.pool.missing(conns.wanted_keys()), now)
        now, _ = yield from conns.connect_steps(extra, now)
        yield from conns.set_budget_steps(budget, now)
        self._life.do(Call.STARTED)

    def read_steps(self, timeout: float = 1.0) -> Steps[Conn, list[NSQMessage]]:
        """The messages delivered since the last call, waiting up to ``timeout`` seconds
        for the first. They are in flight until answered (the messages' own
        ``finish()`` / ``requeue()``); TOUCH the ones held longer than nsqd's msg_timeout
        (``touch_held()``). Keeps the connections current (lookups, reconnects, RDY)."""
        self._life.do(Call.READ)
        return self._conns.read_steps(timeout)  # a read is that module's alone

    def pump_steps(self) -> Steps[Conn, None]:
        """Do the consumer's I/O without waiting: answer heartbeats, take in deliveries
        (``read`` returns them), reconnect and re-poll when due.

        Call it at least once per heartbeat interval (30 s by default) while the caller
        holds messages or is busy elsewhere: nsqd drops a client silent for two
        intervals, and every message it had in flight then comes back after msg_timeout.
        Cheap: one non-blocking poll of the sockets (plus a lookup when one is due).
        """
        self._life.do(Call.PUMP)
        return self._conns.pump_steps()

    def set_max_in_flight_steps(self, max_in_flight: int) -> WriteSteps[None]:
        """Change the in-flight budget (0 pauses delivery; held messages stay held)."""
        budget = check_int(max_in_flight, "max_in_flight", minimum=0)
        self._life.do(Call.SET_MAX_IN_FLIGHT)
        yield from self._conns.set_budget_steps(budget, (yield NOW))

    set_max_in_flight = method(set_max_in_flight_steps)

    def touch_held_steps(self) -> WriteSteps[Touched]:
        """Keep what the consumer holds in flight: TOUCH every message delivered and not
        yet answered (returned by ``read`` or not) that has been in flight for a third
        (:data:`~._connections.TOUCH_AFTER_SHARE`) of the shortest msg_timeout since it was delivered
        or last TOUCHed. A caller that holds messages longer than msg_timeout calls it
        again after ``next_in`` seconds (the Spark reader's pump, the event trigger). A
        TOUCH that cannot be written is logged: nsqd then redelivers after
        msg_timeout."""
        self._life.do(Call.TOUCH_HELD)
        conns = self._conns
        now = yield NOW
        yield from conns.drop_broken_steps(now)  # a dead connection's messages: no TOUCH
        messages, next_in = conns.ledger.due(now, self.msg_timeout_ms / 1000)
        yield from conns.touch_steps(messages)
        return Touched(len(messages), next_in)

    touch_held = method(touch_held_steps)

    def close_steps(self) -> Steps[Conn, None]:
        """CLS (no more deliveries), REQ everything delivered and unanswered, close every
        connection. Idempotent; also safe while the caller is being interrupted
        (cancelled)."""
        if self._life.do(Call.CLOSE) in (CLOSING, CLOSED):
            return
        conns = self._conns
        error: BaseException | None = None
        try:
            now = yield NOW
            yield from conns.stop_delivery_steps(now)
            yield from conns.requeue_all_steps(now)
        except GeneratorExit:  # abandoned mid-way: no step can run any more, so drop them
            for conn in conns.pool.remove(list(conns.pool.slots.values())):
                conn.abort()
            self._life.do(Call.CLOSED)
            raise
        except BaseException as exc:  # close the connections first, then raise it
            error = exc
        yield Close(conns.pool.remove(list(conns.pool.slots.values())))
        self._life.do(Call.CLOSED)
        if error is not None:
            raise error
