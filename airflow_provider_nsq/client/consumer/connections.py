"""The work of keeping a consumer's connections, as steps: find the nsqds and open one
connection each (retrying those that cannot be reached), wait on them, take what they
delivered, drop those that broke, close those drained, keep the RDY split current, CLS
them, REQ what was never answered.

Nothing here waits or reads the clock: each method yields the steps it needs
(:mod:`..runners.steps`) and takes the time (``now``) from its caller or from a step's outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from typing import Generic

from ...protocol.errors import (
    NSQConnectionError,
    NSQError,
    NSQProtocolError,
    NSQTimeoutError,
    NSQTLSError,
)
from ..message import NSQMessage
from ..runners.steps import (
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
from .deliveries import Deliveries
from .discovery import Discovery, RetrySchedule
from .pool import Conn, Pool, nsqd_of
from .rdy_plan import REBALANCE_INTERVAL_S, Change, RdyPlanner

log = logging.getLogger("airflow_provider_nsq.client.consumer")

#: Errors that mean "this nsqd cannot be reached right now": logged and skipped. Any
#: other error (nsqd refused SUB or AUTH, a bad setting) is the same on every nsqd and
#: is raised.
UNREACHABLE = (NSQConnectionError, NSQTimeoutError, NSQProtocolError)
#: When every nsqd failed with one of these, "none reachable" is raised as that error.
_SAME_EVERYWHERE: tuple[type[NSQError], ...] = (NSQTLSError, NSQTimeoutError, NSQProtocolError)


class Connections(Generic[Conn]):
    """One consumer's connections to every nsqd of ``topic``/``channel`` (see
    :mod:`.connections`). ``streaming`` is set by the consumer while it streams (extra
    connections per nsqd, a RDY kept for every nsqd)."""

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
        self.planner = RdyPlanner()
        self.deliveries = Deliveries()
        self.streaming = False
        self.lost = 0  # connections that broke (their messages can never be answered)
        self._next_maintenance = 0.0

    # -- opening --------------------------------------------------------------------------

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
        configs = tuple(self._config_for(nsqd_of(k)) for k in keys)
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

    def _config_for(self, address: str) -> ClientConfig:
        """The settings of a connection to ``address``: the consumer's own when it is the
        config's nsqd (one nsqd: no copy to make and check)."""
        own = self.config
        return own if address == own.address else own.for_nsqd(address)

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
        return self.pool.wanted_keys(self.discovery.wanted, self.planner.budget, self.streaming)

    def mark_draining(self) -> None:
        """Stop reading from connections no longer wanted; read again from those wanted
        again."""
        self.pool.mark_draining(self.wanted_keys(), self.discovery.wanted, self.topic)

    # -- messages in ----------------------------------------------------------------------

    def wait_steps(self, timeout: float, now: float) -> Steps[Conn, float]:
        """Wait for deliveries, unless some are already there (or a connection failed:
        the caller collects first). The time after."""
        if self.pool.has_news():
            return now
        return (yield Wait(timeout, self.pool.live))

    def collect_steps(self, now: float) -> WriteSteps[list[NSQMessage]]:
        """Take what every live connection delivered; drop those that broke."""
        got, broken = self.deliveries.collect(self.pool, now)
        if broken:
            yield from self.drop_broken_steps(now)
        return got

    def drop_broken_steps(self, now: float) -> WriteSteps[None]:
        """Drop the connections that failed, with what they delivered (nsqd redelivers
        it after its msg_timeout), and try their nsqd again later."""
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
            self.deliveries.forget(conn)
            if slot.key not in self.retries:
                self.retries.failed(slot.key, now)
        yield Abort(self.pool.remove(broken))

    # -- keeping them current ---------------------------------------------------------

    def maintain_steps(self, now: float) -> Steps[Conn, None]:
        """Between waits of a stream: re-poll nsqlookupd when due, reconnect, close
        drained connections, re-plan RDY (at most every REBALANCE_INTERVAL_S)."""
        if now < self._next_maintenance:
            return
        self._next_maintenance = now + REBALANCE_INTERVAL_S
        self.planner.make_due()  # the re-plan that follows is part of it
        if self.discovery.poll_due(now):
            try:
                yield from self.discover_steps(now)
            except NSQError as exc:
                self.discovery.lookup_failed(exc, now, len(self.pool))
        due = self.retries.due(self.pool.missing(self.wanted_keys()), now)
        now, _ = yield from self.connect_steps(due, now)
        drained = self.pool.drained()
        if drained:
            yield Close(self.pool.remove(drained))
        yield from self.rebalance_steps(now)

    def set_budget_steps(self, budget: int, now: float) -> WriteSteps[None]:
        """Share ``budget`` messages in flight over the connections now."""
        self.planner.budget = budget
        self.mark_draining()
        yield from self.rebalance_steps(now, force=True)

    def rebalance_steps(self, now: float, force: bool = False) -> WriteSteps[None]:
        """Re-plan the RDY split when what it depends on changed, and send what changed."""
        if force or self.planner.due(now):
            changes = self.planner.plan(self.pool, now, self.streaming, force)
            yield from self.send_rdy_steps(changes, now)
        yield from self.drop_broken_steps(now)

    def send_rdy_steps(
        self, changes: list[Change], now: float
    ) -> Generator[Send, list[NSQError | None], None]:
        if not changes:
            return
        outcomes = yield Send(tuple(Write(s.conn, "RDY", count=count) for s, count in changes))
        for (slot, count), error in zip(changes, outcomes, strict=True):
            if error is None:
                slot.rdy = count
                slot.rdy_at = now
            else:
                log.debug("RDY to %s failed: %s", slot.key, error)

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
        docs/nsqd-facts.md section 6, so nothing REQ'd after it is
        handed straight back); what they delivered before nsqd read it."""
        self.planner.budget = 0
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
        held = self.deliveries.unanswered(any_in_flight=self.pool.in_flight() > 0)
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
