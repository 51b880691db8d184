"""A consumer's consume windows: their arguments (checked, each named when wrong), and
the windows as steps: open (on what the last full window kept, when
it is fresh), share ``max_messages`` as RDY, collect until full or the deadline, pause
(RDY 0) or CLS, and settle (REQ what came beyond ``max_messages``, apply ``ack``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Generic, Literal

from ...protocol.errors import NSQError, NSQValueError
from ...protocol.value_checks import check_int, check_seconds
from ..message import NSQMessage, on_live_connections
from ..runners.steps import Close, Send, Steps, WriteSteps, answers, fail_on_error
from .connections import Connections
from .pool import Conn
from .rdy_plan import REBALANCE_INTERVAL_S

AckMode = Literal["fin", "req", "manual"]
ACK_MODES: tuple[str, ...] = ("fin", "req", "manual")


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
class Window:
    """One consume window: the arguments :meth:`consume` took, and the messages it got."""

    topic: str
    channel: str
    max_messages: int
    timeout: float
    ack: AckMode
    requeue_delay_ms: int
    got: list[NSQMessage] = field(default_factory=list)


def settle(
    got: list[NSQMessage], stragglers: list[NSQMessage], max_messages: int
) -> tuple[list[NSQMessage], list[NSQMessage]]:
    """How a consume window ends: the messages it returns (what it got, and the
    stragglers nsqd sent before it read CLS, while they fit ``max_messages``) and the
    stragglers beyond that (to REQ)."""
    room = max_messages - len(got)
    return got + stragglers[:room], stragglers[room:]


log = logging.getLogger("airflow_provider_nsq.client.consumer")

#: A window that filled up keeps its subscriptions (RDY 0) for a next window that starts
#: within this many seconds (and half a heartbeat interval, so nsqd never dropped them).
KEEP_SUBSCRIBED_S = 5.0
#: A window that starts within this long of the last one skips looking at its sockets
#: first: no heartbeat can be due yet (nsqd's shortest interval is 1 s).
QUIET_S = 0.5


class Windows(Generic[Conn]):
    """One consumer's windows, one after the other, over its connections."""

    def __init__(self, conns: Connections[Conn]) -> None:
        self._conns: Connections[Conn] = conns
        heartbeat_s = conns.config.effective_heartbeat_interval_ms / 1000
        self._keep_for = min(KEEP_SUBSCRIBED_S, heartbeat_s / 2)
        self._ended = -math.inf  # when the last window ended

    def window_steps(self, window: Window, now: float) -> Steps[Conn, list[NSQMessage]]:
        """One window (see ``ConsumerSteps.consume_steps``); its messages, settled."""
        conns = self._conns
        now = yield from self._open_steps(window, now)
        if not conns.pool.slots:
            log.info("no nsqd has %s yet: the window is empty", conns.topic)
            return []
        yield from self._begin_steps(window, now)
        deadline = now + window.timeout
        while len(window.got) < window.max_messages and now < deadline:
            now = yield from conns.wait_steps(min(deadline - now, REBALANCE_INTERVAL_S), now)
            window.got.extend((yield from conns.collect_steps(now)))
            if not conns.pool.slots:
                break
            yield from conns.rebalance_steps(now)
        if len(window.got) >= window.max_messages:
            # nsqd has sent all the RDY allowed: RDY 0 keeps the subscriptions for the next
            # window (what a connection still had is returned, as CLS's stragglers are).
            yield from conns.send_rdy_steps(conns.planner.pause(conns.pool), now)
            stragglers = yield from conns.collect_steps(now)
        else:
            stragglers = yield from conns.stop_delivery_steps(now)
        self._ended = now
        return (yield from self._end_steps(window, stragglers))

    def _open_steps(self, window: Window, now: float) -> Steps[Conn, float]:
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
        if conns.discovery.poll_due(now):
            yield from conns.discover_steps(now)
        now, _ = yield from conns.connect_steps(pool.missing(conns.discovery.wanted), now)
        return now

    def _begin_steps(self, window: Window, now: float) -> WriteSteps[None]:
        pool = self._conns.pool
        capacity = pool.capacity()
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
        self, window: Window, stragglers: list[NSQMessage]
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
        got, extra = settle(got, stragglers, window.max_messages)
        writes = answers(extra, "REQ")
        if window.ack == "fin":
            writes += answers(got, "FIN")
        elif window.ack == "req":
            writes += answers(got, "REQ", window.requeue_delay_ms)
        if writes:
            fail_on_error((yield Send(writes)))
        return got
