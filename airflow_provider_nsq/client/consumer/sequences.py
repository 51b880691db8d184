"""The consumer: one topic/channel over every nsqd that has it, written once.

NSQ as deployed runs an nsqd on every producing host; a consumer reads a topic from all
of them (found through nsqlookupd, or a static list of nsqd TCP addresses; one nsqd is a
list of one). This is the one place that does it, for everything in the provider that
consumes (the hook's consume window, the sensor, the triggers, the Spark reader).

What it guarantees:

- one connection per nsqd, each SUB'd to the same topic/channel; one RDY budget shared
  as :mod:`.rdy_plan` plans it (never above an nsqd's ``max_rdy_count``). A streaming
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
  ``touch_held()`` (one TOUCH policy for every holder);
- an nsqd that cannot be reached is logged and skipped; only when none can be is it an
  error (:class:`NSQConnectionError` naming each). A long-lived consumer retries it
  with backoff, re-asks nsqlookupd every ``lookupd_poll_interval`` seconds, connects to
  producers that appeared, and stops reading from those that vanished (``RDY 0``; the
  connection closes once what it delivered is answered).

Three shapes: one bounded window (``consume``); long-lived streaming (``start``,
``read``, ``set_max_in_flight``, ``touch_held``; the blocking consumer also has ``pump``);
``close``. Which calls are possible when is a state table (:mod:`.state`).

How it is written: each of those is a sequence of steps (:mod:`..runners.steps`: connect these,
wait up to t, send these RDY/FIN/REQ/TOUCH, CLS these, close these, what time is it);
it never touches a socket nor reads the clock. The work on connections is :mod:`.connections` (over :mod:`.pool`,
:mod:`.discovery`, :mod:`.rdy_plan` and :mod:`.deliveries`);
:class:`~.blocking_consumer.NSQConsumer` and :class:`~.asyncio_consumer.AsyncNSQConsumer` run the sequences,
one with :class:`~..runners.blocking_runner.BlockingRunner`, the other with
:class:`~..runners.asyncio_runner.AsyncRunner`.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Concatenate, Generic, NamedTuple, ParamSpec, TypeVar

from ...protocol.constants import DEFAULT_MSG_TIMEOUT_MS
from ...protocol.errors import NSQStateError, NSQValueError
from ...protocol.names import validate_channel_name, validate_topic_name
from ...protocol.value_checks import check_int, check_seconds
from ..http.lookupd_api import LookupdClient, Producer
from ..message import NSQMessage
from ..runners.steps import NOW, Close, Runnable, Steps, WriteStep, WriteSteps, answer
from ..settings.address import nsqd_tcp_addresses as parse_nsqd_addresses
from ..settings.address import parse_addresses
from ..settings.client_config import ClientConfig
from .connections import Connections
from .discovery import DEFAULT_LOOKUPD_POLL_INTERVAL_S, Discovery
from .pool import Conn, Contact
from .rdy_plan import REBALANCE_INTERVAL_S
from .state import CLOSED, CLOSING, IDLE, WINDOWING, ConsumerState, Lifecycle
from .windows import AckMode, Window, Windows, check_window

log = logging.getLogger("airflow_provider_nsq.client.consumer")


P = ParamSpec("P")
T = TypeVar("T")


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
    """What :class:`~.blocking_consumer.NSQConsumer` and :class:`~.asyncio_consumer.AsyncNSQConsumer` are (see
    :mod:`.sequences`): what callers can see of the consumer, and every sequence of its
    life as steps (the ``*_steps`` methods, which a runner drives).

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
        _check_settings(self.config, lookupd_poll_interval, max_connections_per_nsqd)
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
        self._windows: Windows[Conn] = Windows(self._conns)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.topic}/{self.channel} from {self._conns.discovery!r}"
            f": {len(self._conns.pool)} connection(s), {self.state.value}>"
        )

    def run_now(self, steps: Runnable[WriteStep, T]) -> T:
        """Run a sequence that only writes (:data:`~..runners.steps.WriteStep`) to its
        end at once, without an event loop: each consumer class does it with its runner."""
        raise NotImplementedError

    # -- who may call it ---------------------------------------------------------------

    def held_by(self, holder: object) -> None:
        """From now on only ``holder`` calls this consumer (inside
        :class:`~.state.CallingAs`); any other caller gets an NSQStateError naming it.
        A consumer is held once, by one holder."""
        current = self._life.holder
        if current is not None and current is not holder:
            raise NSQStateError(f"this consumer is held by {current!r} already")
        self._life.holder = holder

    # -- what callers can see --------------------------------------------------------

    @property
    def state(self) -> ConsumerState:
        """Where the consumer is in its life (:mod:`.state`)."""
        return self._life.state

    @property
    def connections(self) -> dict[str, Conn]:
        """The live connections by nsqd address (``host:port``; an nsqd's extra
        connections, see ``max_connections_per_nsqd``, as ``host:port#2`` ...)."""
        return self._conns.pool.connections()

    @property
    def max_in_flight(self) -> int:
        """The in-flight budget shared by every connection."""
        return self._conns.planner.budget

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
        return self._conns.pool.ready_counts()

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
        within :data:`.windows.KEEP_SUBSCRIBED_S` (and half a heartbeat interval) and every message
        is answered, reads on them without connecting and subscribing again. A window
        that ended on its timeout stops delivery with CLS (nsqd may have been sending);
        the next one connects afresh. A consumer runs windows or one stream.
        """
        check_window(max_messages, timeout, ack, sys.maxsize)
        self._life.do("consume")
        try:
            unanswered = self.in_flight()
            if unanswered:
                raise NSQStateError(
                    f"{unanswered} message(s) of the last window are unanswered: finish or "
                    "requeue them before the next window (or close the consumer)"
                )
            window = Window(self.topic, self.channel, max_messages, timeout, ack, requeue_delay_ms)
            return (yield from self._windows.window_steps(window, (yield NOW)))
        finally:
            if self._life.state is WINDOWING:
                self._life.do("window ended")

    def start_steps(self, max_in_flight: int) -> Steps[Conn, None]:
        """Connect to every nsqd, SUB, and allow ``max_in_flight`` messages in flight
        across them (0: connected but paused). Raises :class:`NSQConnectionError` when
        no nsqd (or no lookupd) can be reached; producers that appear later are joined
        by ``read`` (and ``pump``)."""
        budget = _check_budget(max_in_flight, "max_in_flight")
        self._life.do("start")
        conns = self._conns
        conns.streaming = True
        now = yield from conns.connect_all_steps((yield NOW))
        conns.planner.budget = budget
        # More connections per nsqd (max_connections_per_nsqd), now that its limit is
        # known (an nsqd that just failed is not tried again before its backoff).
        extra = conns.retries.due(conns.pool.missing(conns.wanted_keys()), now)
        now, _ = yield from conns.connect_steps(extra, now)
        yield from conns.set_budget_steps(budget, now)
        self._life.do("started")

    def read_steps(self, timeout: float = 1.0) -> Steps[Conn, list[NSQMessage]]:
        """The messages delivered since the last call, waiting up to ``timeout`` seconds
        for the first. They are in flight until answered (the messages' own
        ``finish()`` / ``requeue()``); TOUCH the ones held longer than nsqd's msg_timeout
        (``touch_held()``). Keeps the connections current (lookups, reconnects, RDY)."""
        self._life.do("read")
        conns = self._conns
        now = yield NOW
        deadline = now + max(timeout, 0.0)
        while True:
            yield from conns.maintain_steps(now)
            conns.deliveries.keep((yield from conns.collect_steps(now)))
            got = conns.deliveries.take()
            if got or now >= deadline:
                return got
            now = yield from conns.wait_steps(min(deadline - now, REBALANCE_INTERVAL_S), now)

    def pump_steps(self) -> Steps[Conn, None]:
        """Do the consumer's I/O without waiting: answer heartbeats, take in deliveries
        (``read`` returns them), reconnect and re-poll when due.

        Call it at least once per heartbeat interval (30 s by default) while the caller
        holds messages or is busy elsewhere: nsqd drops a client silent for two
        intervals, and every message it had in flight then comes back after msg_timeout.
        Cheap: one non-blocking poll of the sockets (plus a lookup when one is due).
        """
        self._life.do("pump")
        conns = self._conns
        now = yield from conns.wait_steps(0.0, (yield NOW))
        conns.deliveries.keep((yield from conns.collect_steps(now)))
        yield from conns.maintain_steps(now)

    def set_max_in_flight_steps(self, max_in_flight: int) -> WriteSteps[None]:
        """Change the in-flight budget (0 pauses delivery; held messages stay held)."""
        budget = _check_budget(max_in_flight, "max_in_flight")
        self._life.do("set_max_in_flight")
        yield from self._conns.set_budget_steps(budget, (yield NOW))

    set_max_in_flight = method(set_max_in_flight_steps)

    def touch_held_steps(self) -> WriteSteps[Touched]:
        """Keep what the consumer holds in flight: TOUCH every message delivered and not
        yet answered (returned by ``read`` or not) that has been in flight for a third
        (:data:`.ledger.TOUCH_AFTER_SHARE`) of the shortest msg_timeout since it was
        delivered or last TOUCHed. A caller that holds messages longer than msg_timeout
        calls it again after ``next_in`` seconds (the Spark reader's pump, the event
        trigger). A TOUCH that cannot be written is logged: nsqd then redelivers after
        msg_timeout."""
        self._life.do("touch_held")
        conns = self._conns
        now = yield NOW
        yield from conns.drop_broken_steps(now)  # a dead connection's messages: no TOUCH
        messages, next_in = conns.deliveries.ledger.due(now, self.msg_timeout_ms / 1000)
        yield from conns.touch_steps(messages)
        return Touched(len(messages), next_in)

    touch_held = method(touch_held_steps)

    def close_steps(self) -> Steps[Conn, None]:
        """CLS (no more deliveries), REQ everything delivered and unanswered, close every
        connection. Idempotent; also safe while the caller is being interrupted
        (cancelled)."""
        if self._life.do("close") in (CLOSING, CLOSED):
            return
        conns = self._conns
        error: BaseException | None = None
        try:
            now = yield NOW
            yield from conns.stop_delivery_steps(now)
            yield from conns.requeue_all_steps(now)
        except GeneratorExit:  # abandoned mid-way: no step can run any more, so drop them
            for conn in conns.pool.release_all():
                conn.abort()
            self._life.do("closed")
            raise
        except BaseException as exc:  # close the connections first, then raise it
            error = exc
        yield Close(conns.pool.release_all())
        self._life.do("closed")
        if error is not None:
            raise error


def _check_budget(value: object, what: str) -> int:
    return check_int(value, what, minimum=0)


def _check_settings(config: ClientConfig, poll_interval: object, per_nsqd: object) -> None:
    """The consumer's own arguments, each named when it is wrong."""
    if config.heartbeat_interval_ms == -1:
        raise NSQValueError(
            "heartbeat_interval_ms=-1 disables heartbeats; nsqd refuses SUB without them"
        )
    check_seconds(poll_interval, "lookupd_poll_interval")
    check_int(per_nsqd, "max_connections_per_nsqd", minimum=1)
