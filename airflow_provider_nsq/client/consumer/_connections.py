"""A consumer's connections to every nsqd of its topic, and the work on them, with no
I/O: the pool of connections (:class:`Pool`), what they delivered and who holds it
(:class:`Ledger`, with the one TOUCH policy), the RDY split kept current
(:class:`RdyPlanner` over :mod:`._rdy_split`), and the work as steps
(:class:`Connections`: open them, wait on them, take what they delivered, drop those
that broke, close those drained, CLS them, REQ what was never answered).

A stream's read is here from end to end (:meth:`Connections.read_steps`): it waits, takes
what each connection delivered, lists it and returns it, in this module alone; finding
nsqds (:mod:`._discovery`) and the RDY split (:mod:`._rdy_split`) are entered only when
a lookup, a retry or a re-plan is due. What callers see of a consumer, its life as a
state table and its consume windows are :mod:`._sequences`.

Nothing here waits or reads the clock: each method yields the steps it needs
(:mod:`..runners.steps`) and takes the time (``now``) from its caller or from a step's
outcome.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ...protocol.errors import (
    NSQConnectionError,
    NSQError,
    NSQProtocolError,
    NSQTimeoutError,
    NSQTLSError,
)
from ...protocol.value_checks import is_int
from ..drivers.asyncio_driver import AsyncNSQConnection
from ..drivers.blocking_driver import NSQConnection
from ..message import NSQMessage
from ..runners.steps import (
    NOW,
    Abort,
    Close,
    Connect,
    HTTPSteps,
    Opened,
    Send,
    StartClose,
    Steps,
    Wait,
    Write,
    WriteStep,
    WriteSteps,
    answers,
)
from ..settings.client_config import ClientConfig
from ._discovery import Discovery, RetrySchedule
from ._rdy_split import IDLE_AFTER_S, REBALANCE_INTERVAL_S, ROTATE_INTERVAL_S, SETTLE_S, split

log = logging.getLogger("airflow_provider_nsq.client.consumer")

Conn = TypeVar("Conn", NSQConnection, AsyncNSQConnection)

# -- its connections -------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Slot(Generic[Conn]):
    """One connection to an nsqd and what the consumer knows about it."""

    key: str  # the nsqd's address; "address#2", "#3" ... for its extra connections
    address: str  # the nsqd's address (host:port)
    conn: Conn
    limit: int  # nsqd's max_rdy_count
    msg_timeout: int | None  # nsqd's msg_timeout for this connection (ms), if it said
    last_delivery: float
    rdy: int = 0  # the RDY last sent ...
    rdy_at: float = 0.0  # ... and when
    draining: bool = False  # not wanted any more: RDY 0, closed once answered
    closing: bool = False  # CLS sent
    reserved: int = 0  # the RDY before it was lowered: nsqd may still send that many ...
    reserved_until: float = 0.0  # ... until about then


@dataclass(frozen=True, slots=True)
class Contact:
    """What a consumer last heard from one nsqd (``contact()``)."""

    nsqd: str  # host:port
    connected: bool  # a connection to it is up
    silent_for: float | None  # seconds since it last sent anything (None: never heard)


def nsqd_of(key: str) -> str:
    """The nsqd address of a connection key (``host:port`` or ``host:port#n``)."""
    return key.partition("#")[0]


class Pool(Generic[Conn]):
    """The connections, by key (:class:`Slot`).

    :param max_per_nsqd: streaming only: up to this many connections to each nsqd, as
        many as it takes for one nsqd to hold the whole budget.
    """

    def __init__(self, max_per_nsqd: int) -> None:
        self.max_per_nsqd = max_per_nsqd
        self.slots: dict[str, Slot[Conn]] = {}
        #: Every slot's connection (rebuilt when a slot comes or goes): what a wait
        #: watches; the runner knows it is the same set while it is the same tuple.
        self.live: tuple[Conn, ...] = ()
        #: Bumped whenever a slot comes, goes or starts or stops draining: the RDY split
        #: is made again.
        self.version = 0
        self._heard: dict[str, float] = {}  # nsqd -> last heard, for connections gone

    def __len__(self) -> int:
        return len(self.slots)

    def add(self, key: str, conn: Conn, now: float) -> None:
        timeout = conn.server_info.get("msg_timeout")
        negotiated = timeout if is_int(timeout) and timeout > 0 else None
        self.slots[key] = Slot(key, nsqd_of(key), conn, conn.max_rdy_count, negotiated, now)
        self._changed()

    def remove(self, slots: Iterable[Slot[Conn]]) -> tuple[Conn, ...]:
        """Forget ``slots``; their connections (for the caller to close)."""
        conns = []
        for slot in slots:
            del self.slots[slot.key]
            last = slot.conn.last_received
            if last:
                self._heard[slot.address] = max(self._heard.get(slot.address, 0.0), last)
            conns.append(slot.conn)
        if conns:
            self._changed()
        return tuple(conns)

    def broken(self) -> list[Slot[Conn]]:
        """The slots whose connection failed or closed."""
        return [s for s in self.slots.values() if not s.conn.alive]

    def drained(self) -> list[Slot[Conn]]:
        """Draining slots whose messages are all answered (ready to close)."""
        return [s for s in self.slots.values() if s.draining and s.conn.in_flight == 0]

    def missing(self, keys: Sequence[str]) -> list[str]:
        """The ``keys`` with no connection."""
        return [k for k in keys if k not in self.slots]

    def wanted_keys(self, wanted: Sequence[str], budget: int, streaming: bool) -> list[str]:
        """Every connection the consumer should have: one per wanted nsqd, plus, while
        streaming, the extra ones ``budget`` needs (``max_per_nsqd``)."""
        if self.max_per_nsqd == 1 or not streaming:
            return list(wanted)
        limits: dict[str, int] = {}
        for slot in self.slots.values():
            if slot.conn.alive:
                limits.setdefault(slot.address, max(slot.limit, 1))
        keys: list[str] = []
        for address in wanted:
            keys.append(address)
            limit = limits.get(address)
            if limit is None:
                continue  # its max_rdy_count is known once its first connection is up
            count = min(self.max_per_nsqd, math.ceil(budget / limit))
            keys += [f"{address}#{i}" for i in range(2, count + 1)]
        return keys

    def mark_draining(self, keys: Sequence[str], wanted: Sequence[str], topic: str) -> None:
        """Stop reading from connections not in ``keys`` (their nsqd is no longer in
        ``wanted``, or the budget needs fewer); read again from those in it."""
        keep = set(keys)
        changed = False
        for key, slot in self.slots.items():
            if key in keep and slot.draining:
                slot.draining = False  # wanted again before it was closed
                changed = True
            elif key not in keep and not slot.draining:
                if slot.address not in wanted:
                    log.info(
                        "nsqd at %s no longer has %s (nsqlookupd): reading from it stops",
                        *(slot.address, topic),
                    )
                else:
                    log.debug("extra connection %s not needed for the budget: closing it", key)
                slot.draining = True
                changed = True
        if changed:
            self.version += 1

    def in_flight(self) -> int:
        """Messages delivered and not yet FIN'd or REQ'd, over every connection."""
        return sum(s.conn.in_flight for s in self.slots.values())

    def negotiated_msg_timeout(self) -> int | None:
        """The shortest msg_timeout the live connections negotiated (ms), if any did."""
        known = [s.msg_timeout for s in self.slots.values() if s.msg_timeout and s.conn.alive]
        return min(known, default=None)

    def contact(self, nsqds: Iterable[str], now: float) -> dict[str, Contact]:
        """For each nsqd in ``nsqds`` (and each one connected): whether a connection to it
        is up, and how long since it last sent anything (heartbeats included)."""
        heard = dict(self._heard)
        up: set[str] = set()
        for slot in self.slots.values():
            conn = slot.conn
            if conn.alive:
                up.add(slot.address)
            if conn.last_received:
                heard[slot.address] = max(heard.get(slot.address, 0.0), conn.last_received)
        out: dict[str, Contact] = {}
        for nsqd in [*nsqds, *(s.address for s in self.slots.values())]:
            last = heard.get(nsqd)
            out[nsqd] = Contact(nsqd, nsqd in up, None if last is None else max(now - last, 0.0))
        return out

    def _changed(self) -> None:
        self.live = tuple(s.conn for s in self.slots.values())
        self.version += 1


# -- who holds what: the one TOUCH policy ----------------------------------------------

#: A held message is TOUCHed once it has been in flight this share of nsqd's msg_timeout
#: since it was delivered or last TOUCHed: two thirds of the timeout are left for the
#: TOUCH to reach nsqd, however busy its holder is.
TOUCH_AFTER_SHARE = 1 / 3
#: How soon, at the soonest, the holder is asked to look again (seconds).
TOUCH_CHECK_MIN_S = 0.1
#: The ledger is compacted once it lists this many more messages than are in flight.
LEDGER_SLACK = 1024


class _Delivery:
    """Messages delivered together, and when they were last started in flight (their
    delivery, or their last TOUCH)."""

    __slots__ = ("messages", "touched")

    def __init__(self, messages: list[NSQMessage], touched: float) -> None:
        self.messages = messages
        self.touched = touched


class Ledger:
    """Every message a consumer delivered and may not have answered yet, in deliveries
    (answered ones included until the next compaction): what ``close()`` REQs and
    ``touch_held()`` TOUCHes. Answered messages are dropped in bulk, not one by one, so
    listing costs a delivery one append."""

    def __init__(self) -> None:
        self._deliveries: deque[_Delivery] = deque()
        self._count = 0  # messages listed (answered ones included)

    def add(self, messages: list[NSQMessage], now: float, in_flight: Callable[[], int]) -> None:
        """List a delivery made at ``now``; ``in_flight()`` counts the consumer's
        unanswered messages (asked only when the list is long: compacted when it is far
        longer)."""
        self._deliveries.append(_Delivery(messages, now))
        self._count += len(messages)
        if self._count > LEDGER_SLACK and self._count > 2 * in_flight() + LEDGER_SLACK:
            self._keep(None)

    def forget(self, conn: object) -> None:
        """Drop what ``conn`` delivered (it broke: nobody can answer those any more)."""
        self._keep(lambda m: m.connection is not conn)

    def take_unanswered(self) -> list[NSQMessage]:
        """Every listed message not yet answered; the ledger is empty afterwards."""
        held = [m for d in self._deliveries for m in d.messages if not m.responded]
        self._deliveries.clear()
        self._count = 0
        return held

    def due(self, now: float, msg_timeout_s: float) -> tuple[list[NSQMessage], float]:
        """The unanswered messages to TOUCH now (marked as TOUCHed at ``now``), and the
        seconds until the next ones are due, by the one policy: a message is due once
        :data:`TOUCH_AFTER_SHARE` of ``msg_timeout_s`` passed since its last start."""
        after = msg_timeout_s * TOUCH_AFTER_SHARE
        deliveries = self._deliveries
        while deliveries and all(m.responded for m in deliveries[0].messages):
            self._count -= len(deliveries.popleft().messages)
        due = [d for d in deliveries if now - d.touched >= after]
        for d in due:
            d.touched = now
        messages = [m for d in due for m in d.messages if not m.responded]
        oldest = min((d.touched for d in deliveries), default=now)
        return messages, max(oldest + after - now, TOUCH_CHECK_MIN_S)

    def _keep(self, keep: Callable[[NSQMessage], bool] | None) -> None:
        """Keep the listed messages ``keep`` accepts (None: those not answered yet)."""
        kept: deque[_Delivery] = deque()
        count = 0
        for delivery in self._deliveries:
            if keep is None:  # the common case, once per many deliveries: no call each
                delivery.messages = [m for m in delivery.messages if not m.responded]
            else:
                delivery.messages = [m for m in delivery.messages if keep(m)]
            if delivery.messages:
                kept.append(delivery)
                count += len(delivery.messages)
        self._deliveries = kept
        self._count = count


# -- the work on the connections, as steps ---------------------------------------------

#: Errors that mean "this nsqd cannot be reached right now": logged and skipped. Any
#: other error (nsqd refused SUB or AUTH, a bad setting) is the same on every nsqd and
#: is raised.
UNREACHABLE = (NSQConnectionError, NSQTimeoutError, NSQProtocolError)
#: When every nsqd failed with one of these, "none reachable" is raised as that error.
_SAME_EVERYWHERE: tuple[type[NSQError], ...] = (NSQTLSError, NSQTimeoutError, NSQProtocolError)

#: A change of RDY to send: the slot, and its new count.
Change = tuple[Slot[Any], int]


class RdyPlanner:
    """What the RDY split (:func:`~._rdy_split.split`) needs between plans: who was busy,
    whose RDY was lowered and may still deliver, whose turn it is, and what the last plan
    was made for. The split is made again only when one of those changed."""

    def __init__(self) -> None:
        self.next_rebalance = 0.0  # a re-plan is looked at from then on
        self._next_rotation = 0.0  # 0: no plan yet
        self._offset = 0  # where the round-robin starts
        self._shape: tuple[Any, ...] = ()  # what the last plan was made for

    def changes(
        self, pool: Pool[Any], budget: int, now: float, streaming: bool, force: bool
    ) -> list[Change]:
        """The RDY changes to send now: a new split when what it depends on changed (or
        ``force``), else none. A lowered RDY stays counted for :data:`SETTLE_S`.

        Only the connections that have not failed are here: :meth:`collect` drops the
        others before a plan, and a RDY write that fails drops its connection."""
        self.next_rebalance = now + REBALANCE_INTERVAL_S
        if not self._next_rotation:
            self._next_rotation = now + ROTATE_INTERVAL_S
        slots = [s for s in pool.slots.values() if not s.closing]
        active = [s for s in slots if not s.draining]
        # What a draining connection still holds counts against the budget until answered.
        budget = max(budget - sum(s.conn.in_flight for s in slots if s.draining), 0)
        keys = tuple(s.key for s in active)
        shape: tuple[Any, ...]
        if len(active) <= 1:  # its split is min(budget, its limit), whatever the rest
            shape = (pool.version, budget, keys)
            if shape == self._shape and not force:
                return []
            in_flight = [s.conn.in_flight for s in active]
            busy = [True] * len(active)
            settling = [False] * len(active)
        else:
            in_flight = [s.conn.in_flight for s in active]
            # Busy: delivered lately, or took all its RDY allowed since that RDY was sent
            # (nsqd cannot send it more, so its silence says nothing about what it has).
            # Not a connection whose RDY was lowered to what it holds: it took nothing since.
            busy = [
                now - s.last_delivery < IDLE_AFTER_S
                or (0 < s.rdy <= f and s.last_delivery >= s.rdy_at)
                for s, f in zip(active, in_flight, strict=True)
            ]
            spare = budget - sum(in_flight)
            if 0 < spare < len(active) and now >= self._next_rotation:
                self._offset += max(spare, 1)
                self._next_rotation = now + ROTATE_INTERVAL_S
            settling = [now < s.reserved_until for s in active]
            shape = (pool.version, budget, keys, tuple(busy), tuple(settling), self._offset)
            if shape == self._shape and not force:
                return []
        self._shape = shape
        committed = [
            max(f, s.rdy, s.reserved if settle else 0)
            for s, f, settle in zip(active, in_flight, settling, strict=True)
        ]
        counts = split(
            budget,
            in_flight,
            [s.limit for s in active],
            busy,
            committed,
            self._offset,
            keep_one_each=streaming,
        )
        wanted = dict(zip(keys, counts, strict=True))
        changes: list[Change] = []
        for slot in slots:
            want = wanted.get(slot.key, 0)
            if want != slot.rdy:
                if want < slot.rdy:
                    held = slot.reserved if now < slot.reserved_until else 0
                    slot.reserved = max(slot.rdy, held)
                    slot.reserved_until = now + SETTLE_S
                changes.append((slot, want))
        return changes

    def pause(self, pool: Pool[Any]) -> list[Change]:
        """After a full window: RDY 0 everywhere (nothing is reserved: nsqd has sent all
        it was allowed). The changes to send."""
        self._shape = ()
        slots = pool.slots.values()
        changes: list[Change] = [(s, 0) for s in slots if s.rdy and s.conn.alive]
        for slot in slots:
            slot.rdy = slot.reserved = 0
        return changes


class Connections(Generic[Conn]):
    """One consumer's connections to every nsqd of ``topic``/``channel`` and the work on
    them, as steps: open them (retrying those that cannot be reached), wait on them,
    take what they delivered (kept until ``read`` hands it out, and listed in
    :attr:`ledger` until answered), drop those that broke, close those drained, keep
    the RDY split current, CLS them, REQ what was never answered.

    ``streaming`` is set by the consumer while it streams (extra connections per nsqd, a
    RDY kept for every nsqd). Nothing here waits or reads the clock: the time (``now``)
    comes from the caller or a step's outcome.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        config: ClientConfig,
        discovery: Discovery,
        max_per_nsqd: int,
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.config = config
        self.discovery = discovery
        self.pool: Pool[Conn] = Pool(max_per_nsqd)
        self.retries = RetrySchedule()
        self.ledger = Ledger()
        self.budget = 0  # messages in flight across every connection
        self.streaming = False
        self.lost = 0  # connections that broke (their messages can never be answered)
        self._buffer: list[NSQMessage] = []  # delivered, not yet handed out by read()
        self._missing = False  # a wanted connection is not open (its retry is pending)
        self.planner = RdyPlanner()
        self._next_maintenance = 0.0

    # -- opening ------------------------------------------------------------------------

    def discover_steps(self, now: float) -> HTTPSteps[list[str]]:
        """Ask where the nsqds are (nsqlookupd, or the static list); stop reading from
        those gone. Every address to read from."""
        wanted = yield from self.discovery.discover_steps(now)
        self.mark_draining()
        return wanted

    def connect_all_steps(self, now: float) -> Steps[Conn, float]:
        """Find the nsqds and connect to each; raise when none can be reached (naming
        each). The time it ended."""
        targets = yield from self.discover_steps(now)
        now, _ = yield from self.connect_steps(self.pool.missing(targets), now, required=True)
        return now

    def connect_steps(
        self, keys: Sequence[str], now: float, *, required: bool = False
    ) -> Generator[Connect[Conn], Opened[Conn], tuple[float, list[NSQError]]]:
        """Open a connection for each key: the time it ended, and the errors of those that
        could not be opened (unreachable ones are logged, and a stream tries them again
        after their backoff; any other error is raised). ``required``: when none could be
        opened (and the pool is empty), raise one error naming each instead."""
        if not keys:
            return now, []
        own = self.config  # the consumer's own settings for its nsqd: no copy to check
        configs = tuple(own if (a := nsqd_of(k)) == own.address else own.for_nsqd(a) for k in keys)
        opened = yield Connect(configs, self.topic, self.channel)
        errors: list[NSQError] = []
        skipped: list[tuple[str, NSQError]] = []
        failure: NSQError | None = None
        for key, result in zip(keys, opened.results, strict=True):
            if not isinstance(result, NSQError):
                self.retries.succeeded(key)
                self.pool.add(key, result, opened.now)
                log.debug("reading %s/%s from nsqd at %s", self.topic, self.channel, key)
            elif isinstance(result, UNREACHABLE):
                errors.append(result)
                skipped.append((key, result))
            else:
                errors.append(result)
                failure = failure or result
        if failure is not None:
            raise failure
        if required:
            self._check_reachable(keys, errors)
        for key, exc in skipped:
            self._skip(key, exc, opened.now)
        return opened.now, errors

    def _skip(self, key: str, exc: NSQError, now: float) -> None:
        """Go on without ``key``, which could not be opened. Only a stream tries it again
        (after its backoff), and only then does the warning announce a next try: a
        window reads the others, and the next window tries every nsqd afresh."""
        if not self.streaming:
            log.warning(
                "nsqd at %s skipped for this window of %s/%s: %s",
                *(key, self.topic, self.channel, exc),
            )
            return
        self._missing = True
        wait = self.retries.failed(key, now)
        log.warning(
            "nsqd at %s skipped for %s/%s: %s (next try in %.1fs)",
            *(key, self.topic, self.channel, exc, wait),
        )

    def _check_reachable(self, attempted: Sequence[str], errors: Sequence[NSQError]) -> None:
        """After a first connect: no nsqd reachable is an error, naming each. When every
        one failed the same way it is that error: a failed TLS handshake is a setting to
        fix, not an outage to wait out; a timeout is a timeout; an answer that is not
        NSQ's is a wrong address."""
        if attempted and not self.pool.slots:
            reasons = "; ".join(f"{a} ({e})" for a, e in zip(attempted, errors, strict=True))
            kind = next(
                (k for k in _SAME_EVERYWHERE if all(isinstance(e, k) for e in errors)),
                NSQConnectionError,
            )
            raise kind(f"could not read {self.topic}/{self.channel} from any nsqd: {reasons}")

    def wanted_keys(self) -> list[str]:
        return self.pool.wanted_keys(self.discovery.wanted, self.budget, self.streaming)

    def mark_draining(self) -> None:
        """Stop reading from connections no longer wanted; read again from those wanted
        again."""
        self.pool.mark_draining(self.wanted_keys(), self.discovery.wanted, self.topic)

    # -- messages in ----------------------------------------------------------------------

    def wait_steps(self, timeout: float, now: float) -> Steps[Conn, float]:
        """Wait for deliveries, unless some are already there (or a connection failed:
        the caller collects first). The time after."""
        if any(s.conn.has_news for s in self.pool.slots.values()):
            return now
        return (yield Wait(timeout, self.pool.live))

    def wait_timeout(self, now: float, deadline: float) -> float:
        """How long a stream waits for deliveries before its upkeep
        (:meth:`maintain_steps`) is due: up to ``deadline``; up to the next upkeep while
        the clock alone may change something (two connections or more: who is busy,
        whose RDY settled, whose turn it is; one draining; an nsqd waiting for its
        retry); else up to the next lookup."""
        slots = self.pool.slots
        until = self._next_maintenance
        if len(slots) == 1 and not self._missing and not any(s.draining for s in slots.values()):
            until = max(until, self.discovery.next_poll)
        return min(deadline, until) - now

    def collect(self, now: float) -> tuple[list[NSQMessage], bool]:
        """Take what every live connection delivered (listed in the ledger): the
        messages, and whether a connection broke (the caller drops it: a connection that
        failed has news, so this is where it shows)."""
        got: list[NSQMessage] = []
        broken = False
        for slot in self.pool.slots.values():
            conn = slot.conn
            if conn.has_news:
                if conn.alive:
                    got += conn.take_messages()
                    slot.last_delivery = now
                else:
                    broken = True
        if got:
            self.ledger.add(got, now, self.pool.in_flight)
        return got, broken

    def collect_steps(self, now: float) -> WriteSteps[list[NSQMessage]]:
        """:meth:`collect`, then drop the connections that broke."""
        got, broken = self.collect(now)
        if broken:
            yield from self.drop_broken_steps(now)
        return got

    def read_steps(self, timeout: float) -> Steps[Conn, list[NSQMessage]]:
        """A stream's ``read``: the messages delivered since the last one, waiting up to
        ``timeout`` seconds for the first, with the upkeep that is due."""
        now = yield NOW
        deadline = now + max(timeout, 0.0)
        while True:
            yield from self.maintain_steps(now)
            got, broken = self.collect(now)
            if broken:
                yield from self.drop_broken_steps(now)
            if self._buffer:
                got, self._buffer = self._buffer + got, []
            if got or now >= deadline:
                return got
            # Nothing between the collect and this wait lets a delivery in unseen.
            now = yield Wait(self.wait_timeout(now, deadline), self.pool.live)

    def pump_steps(self) -> Steps[Conn, None]:
        """A stream's ``pump``: its I/O without waiting; what was delivered is kept for
        the next :meth:`read_steps`."""
        now = yield from self.wait_steps(0.0, (yield NOW))
        self._buffer += yield from self.collect_steps(now)
        yield from self.maintain_steps(now)

    def drop_broken_steps(self, now: float) -> Generator[Abort, object, None]:
        """Drop the connections that failed, with what they delivered (nsqd redelivers
        it after its msg_timeout; nobody is given it, nobody TOUCHes it), and try their
        nsqd again later."""
        broken = self.pool.broken()
        if not broken:
            return
        for slot in broken:
            conn = slot.conn
            log.warning(
                "connection to nsqd at %s lost (%s); %s unanswered message(s) come back "
                "after its msg_timeout",
                *(slot.key, conn.failure or "closed", conn.in_flight),
            )
            self.lost += 1
            if self._buffer:
                self._buffer = [m for m in self._buffer if m.connection is not conn]
            self.ledger.forget(conn)
            if slot.key not in self.retries:
                self.retries.failed(slot.key, now)
        self._missing = True
        yield Abort(self.pool.remove(broken))

    # -- keeping them current ---------------------------------------------------------

    def maintain_steps(self, now: float) -> Steps[Conn, None]:
        """Between waits of a stream, at most every :data:`REBALANCE_INTERVAL_S`:
        re-poll nsqlookupd when due, reconnect what is due, close drained connections,
        re-plan RDY."""
        if now < self._next_maintenance:
            return
        self._next_maintenance = now + REBALANCE_INTERVAL_S
        discovery = self.discovery
        if now >= discovery.next_poll:
            try:
                yield from self.discover_steps(now)
            except NSQError as exc:
                discovery.lookup_failed(exc, now, len(self.pool))
        keys = self.wanted_keys()
        missing = self.pool.missing(keys)
        if missing:
            due = self.retries.due(missing, now)
            if due:
                now, _ = yield from self.connect_steps(due, now)
                missing = self.pool.missing(keys)
        self._missing = bool(missing)
        drained = self.pool.drained()
        if drained:
            yield Close(self.pool.remove(drained))
        yield from self._replan_steps(now, force=False)

    def set_budget_steps(self, budget: int, now: float) -> WriteSteps[None]:
        """Share ``budget`` messages in flight over the connections now."""
        self.budget = budget
        self.mark_draining()
        yield from self._replan_steps(now, force=True)

    def rebalance_steps(self, now: float) -> WriteSteps[None]:
        """Re-plan the RDY split when one is due (at most every
        :data:`REBALANCE_INTERVAL_S`) and what it depends on changed; send what changed."""
        if now >= self.planner.next_rebalance:
            yield from self._replan_steps(now, force=False)

    def _replan_steps(self, now: float, *, force: bool) -> WriteSteps[None]:
        changes = self.planner.changes(self.pool, self.budget, now, self.streaming, force)
        if changes:
            yield from self.send_rdy_steps(changes, now)

    def pause_steps(self, now: float) -> WriteSteps[None]:
        """After a full window: budget 0 and RDY 0 everywhere (nothing is reserved: nsqd
        has sent all it was allowed)."""
        self.budget = 0
        yield from self.send_rdy_steps(self.planner.pause(self.pool), now)

    def send_rdy_steps(
        self, changes: list[Change], now: float
    ) -> Generator[Send | Abort, list[NSQError | None], None]:
        """Send ``changes``; a RDY that cannot be written drops its connection."""
        if not changes:
            return
        outcomes = yield Send(tuple(Write(s.conn, "RDY", count=count) for s, count in changes))
        failed = False
        for (slot, count), error in zip(changes, outcomes, strict=True):
            if error is None:
                slot.rdy = count
                slot.rdy_at = now
            else:
                failed = True
                log.debug("RDY to %s failed: %s", slot.key, error)
        if failed:
            yield from self.drop_broken_steps(now)

    def touch_steps(self, messages: Sequence[NSQMessage]) -> WriteSteps[None]:
        """TOUCH ``messages``; a TOUCH that cannot be written is logged (nsqd then
        redelivers after msg_timeout)."""
        yield from _send_logged(
            answers(messages, "TOUCH"),
            logging.DEBUG,
            "could not TOUCH %s message(s) on nsqd at %s (%s): nsqd redelivers them "
            "after its msg_timeout",
        )

    # -- closing --------------------------------------------------------------------------

    def stop_delivery_steps(
        self, now: float
    ) -> Generator[StartClose[Conn] | WriteStep, list[NSQError | None], list[NSQMessage]]:
        """CLS every open connection (nsqd stops delivering: CLS sets RDY 0,
        docs/nsqd-facts.md section 6, so nothing REQ'd after it is handed straight
        back); what they delivered before nsqd read it."""
        self.budget = 0
        self.streaming = False
        slots = [s for s in self.pool.slots.values() if s.conn.alive and not s.closing]
        if slots:
            outcomes = yield StartClose(tuple(s.conn for s in slots))
            for slot, outcome in zip(slots, outcomes, strict=True):
                if outcome is None:
                    slot.closing = True
                    slot.rdy = 0  # CLS did it
                else:
                    log.debug("CLS to %s failed: %s", slot.address, outcome)
        return (yield from self.collect_steps(now))

    def requeue_all_steps(self, now: float) -> WriteSteps[None]:
        """REQ everything delivered and unanswered, on every live connection."""
        yield from self.collect_steps(now)
        self._buffer = []
        if self.pool.in_flight() > 0:
            held = self.ledger.take_unanswered()
        else:
            held, self.ledger = [], Ledger()
        yield from _send_logged(
            answers(held, "REQ"),
            logging.WARNING,
            "could not REQ %s message(s) on nsqd at %s (%s): nsqd redelivers them after "
            "its msg_timeout",
        )


def _send_logged(
    writes: tuple[Write, ...], level: int, text: str
) -> Generator[Send, list[NSQError | None], None]:
    """Send ``writes``; log each that failed at ``level`` (``text`` takes the count of
    its messages, its nsqd and the error): nothing else is to be done about it."""
    if not writes:
        return
    outcomes = yield Send(writes)
    for write, error in zip(writes, outcomes, strict=True):
        if error is not None:
            address = write.connection.config.address
            log.log(level, text, len(write.messages), address, error)
