"""The blocking runner: performs :mod:`.steps` on blocking sockets, without an event loop.

Safe in tasks, forked workers and Spark executors: no threads, except for a
:class:`~.steps.Gather` of several HTTP calls (every nsqlookupd, every producer's
``/stats``), which gets one short-lived thread per call, joined before the step ends.
Each such call is one bounded HTTP request; a selector-driven HTTP client (TLS
handshakes included) would be far more code than those threads cost. Connections to
nsqd are opened all at once over one selector (:mod:`.blocking_connect`).
"""

from __future__ import annotations

import selectors
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ...protocol.errors import NSQError
from ..drivers.blocking_driver import NSQConnection
from ..transport.http_request import HTTPRequest, send_request
from .blocking_connect import open_connections
from .steps import (
    Abort,
    Close,
    Connect,
    Gather,
    HTTPStep,
    Now,
    Runnable,
    Send,
    StartClose,
    Step,
    Wait,
    drive,
    send,
)

R = TypeVar("R")
T = TypeVar("T")


class BlockingRunner:
    """Performs steps on blocking sockets. A consumer keeps one (its selector follows
    its connections from wait to wait); :func:`run` is for a one-off sequence. Not
    thread-safe."""

    def __init__(self) -> None:
        self._selector: selectors.BaseSelector | None = None  # made at the first wait
        self._watched: tuple[NSQConnection, ...] = ()

    def run(self, steps: Runnable[Step[NSQConnection], T]) -> T:
        """Drive ``steps`` to its end; return what it returns."""
        return drive(steps, self.perform)

    def perform(self, step: Step[NSQConnection]) -> object:
        """Do one step's I/O; its outcome (see :mod:`.steps`)."""
        if isinstance(step, Now):
            return time.monotonic()
        if isinstance(step, Wait):
            return self._wait(step)
        if isinstance(step, Send):
            return send(step)
        if isinstance(step, HTTPRequest):
            return send_request(step)
        if isinstance(step, Connect):
            return open_connections(step)
        if isinstance(step, Gather):
            return _gather(step)
        if isinstance(step, StartClose):
            return [_start_close(conn) for conn in step.connections]
        if isinstance(step, Abort):
            for dropped in step.connections:
                dropped.abort()
            return None
        assert isinstance(step, Close), step
        for conn in step.connections:
            conn.close()
        return None

    def close(self) -> None:
        """Release the selector (the connections are the caller's to close)."""
        if self._selector is not None:
            self._selector.close()
            self._selector = None
            self._watched = ()

    def _wait(self, step: Wait[NSQConnection]) -> float:
        """Wait on every socket at once; read from each that has bytes (messages,
        heartbeats answered at once, nsqd's close)."""
        conns = step.connections
        if not conns:
            time.sleep(max(step.timeout, 0.0))
            return time.monotonic()
        selector = self._selector
        if selector is None or conns is not self._watched:
            selector = self._watch(conns)
        # TLS may hold decrypted bytes the socket no longer shows as readable.
        ready = [c for c in conns if c.has_buffered_input]
        if not ready:
            ready = [key.data for key, _ in selector.select(max(step.timeout, 0.0))]
        for conn in ready:
            try:
                conn.read_available()
            except NSQError:
                pass  # recorded as the connection's failure: its owner drops it
        return time.monotonic()

    def _watch(self, conns: tuple[NSQConnection, ...]) -> selectors.BaseSelector:
        """A selector over exactly ``conns`` (new ones since the last wait)."""
        if self._selector is not None:
            self._selector.close()
        selector = self._selector = selectors.DefaultSelector()
        for conn in conns:
            if conn.fileno() >= 0:
                selector.register(conn, selectors.EVENT_READ, conn)
        self._watched = conns
        return selector


def run(steps: Runnable[HTTPStep, T]) -> T:
    """Drive ``steps`` on blocking sockets (a sequence of HTTP calls: no state to keep)."""
    return BlockingRunner().run(steps)


def _outcome(steps: Runnable[HTTPStep, R]) -> R | NSQError:
    try:
        return run(steps)
    except NSQError as exc:
        return exc


def _gather(step: Gather[R]) -> list[R | NSQError]:
    sequences = step.sequences
    if len(sequences) <= 1:
        return [_outcome(s) for s in sequences]
    # One thread per sequence, all joined here (each HTTP call is bounded by its timeout);
    # an exception other than NSQError is raised by map().
    with ThreadPoolExecutor(len(sequences), thread_name_prefix="nsq-http") as pool:
        return list(pool.map(_outcome, sequences))


def _start_close(conn: NSQConnection) -> NSQError | None:
    try:
        conn.start_close()
        conn.read_available()  # what nsqd sent before it read the CLS
    except NSQError as exc:
        return exc
    return None
