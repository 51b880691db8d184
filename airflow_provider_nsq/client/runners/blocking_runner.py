"""The blocking runner: performs :mod:`.steps` on blocking sockets, without an event loop.

Safe in tasks, forked workers and Spark executors: no threads, except for a
:class:`~.steps.Gather` of several HTTP calls (every nsqlookupd, every producer's
``/stats``), which gets one short-lived thread per call, joined before the step ends.
Each such call is one bounded HTTP request; a selector-driven HTTP client (TLS
handshakes included) would be far more code than those threads cost. Connections to
nsqd are opened all at once over one selector (a :class:`~.steps.Connect`: every TCP
connect and handshake at the same time, so N nsqds that cannot be reached cost one
``connect_timeout``).

:func:`blocking` makes a sequence a plain method that runs it here (the blocking
consumer's ``consume``, ``read`` and ``pump``).
"""

from __future__ import annotations

import errno
import functools
import selectors
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, TypeVar

from ...protocol.errors import NSQError
from ..drivers.blocking_driver import NSQConnection
from ..transport.http_request import HTTPRequest, send_request
from ..transport.io_errors import map_exceptions
from .steps import (
    Abort,
    Close,
    Connect,
    Gather,
    HTTPStep,
    Now,
    Opened,
    Runnable,
    Send,
    StartClose,
    Step,
    Wait,
    drive,
    send,
)

__all__ = ["BlockingRunner", "blocking", "run"]

P = ParamSpec("P")
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
            return _open_connections(step)
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


def blocking(
    steps: Callable[Concatenate[Any, P], Runnable[Step[NSQConnection], T]],
) -> Callable[Concatenate[Any, P], T]:
    """The sequence method ``steps`` as a plain method that runs it on its object's
    runner (its ``_runner``, a :class:`BlockingRunner`) and returns what it returns."""

    @functools.wraps(steps)
    def call(self: Any, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._runner.run(steps(self, *args, **kwargs))

    call.__name__ = call.__qualname__ = steps.__name__.removesuffix("_steps")
    return call


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


# -- Connect: every nsqd at once over one selector ------------------------------------

_IN_PROGRESS = (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY)


def _open_connections(step: Connect[NSQConnection]) -> Opened[NSQConnection]:
    """Open, handshake and SUB one connection per config, all at once: every TCP connect
    starts at the same time (non-blocking, over one selector), and every handshake
    (magic, IDENTIFY, TLS, compression, AUTH) is pumped as its bytes arrive; then each
    connection is SUB'd. So N nsqds that cannot be reached cost one ``connect_timeout``,
    not N of them, as on the asyncio runner. Only a TLS upgrade (when nsqd asks for it)
    and the SUB's reply wait on one connection at a time, each bounded by
    ``connect_timeout`` or ``read_timeout``. An interrupt closes every connection opened
    so far and is raised."""
    conns = [NSQConnection(config) for config in step.configs]
    results: list[NSQConnection | NSQError] = list(conns)
    socks: dict[int, socket.socket] = {}
    try:
        deadlines = [time.monotonic() + c.connect_timeout for c in step.configs]
        _connect_all(conns, deadlines, results, socks)
        _handshake_all(socks, deadlines, results)
        for i, conn in enumerate(conns):
            if results[i] is conn:
                try:
                    conn.subscribe(step.topic, step.channel)
                except NSQError as exc:
                    conn.close()
                    results[i] = exc
    except BaseException:
        for conn in conns:
            conn.close()
        for sock in socks.values():
            sock.close()
        raise
    return Opened(tuple(results), time.monotonic())


class _Dial:
    """One non-blocking TCP connect to an nsqd, trying each address its host resolves
    to in turn (as ``socket.create_connection`` does)."""

    def __init__(self, conn: NSQConnection) -> None:
        self.conn = conn
        config = conn.config
        self.peer = f"nsqd at {config.address}"
        self.timeout = config.connect_timeout
        self._sock: socket.socket | None = None
        self._last: OSError | None = None
        with map_exceptions(self.peer, "connect to", self.timeout):
            self._addresses = socket.getaddrinfo(config.host, config.port, type=socket.SOCK_STREAM)

    def start(self) -> bool:
        """Start connecting to the next address; False when none is left (the last
        error is raised by :meth:`error`)."""
        while self._addresses:
            family, kind, proto, _, address = self._addresses.pop(0)
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            code = sock.connect_ex(address)
            if code in _IN_PROGRESS:
                self._sock = sock
                return True
            sock.close()
            self._last = OSError(code, "connect failed")
        return False

    @property
    def sock(self) -> socket.socket:
        """The socket connecting (or connected) now."""
        assert self._sock is not None
        return self._sock

    def finished(self) -> bool:
        """The socket became writable: True once connected, False when this address
        failed (:meth:`start` tries the next)."""
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code == 0:
            return True
        self.close()
        self._last = OSError(code, "connect failed")
        return False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def error(self, timed_out: bool) -> NSQError:
        """The error to report, worded as the driver's own ``connect()`` words it."""
        self.close()
        cause: OSError = TimeoutError() if timed_out else self._last or OSError("no address")
        try:
            with map_exceptions(self.peer, "connect to", self.timeout):
                raise cause
        except NSQError as exc:
            return exc
        raise AssertionError("map_exceptions maps every OSError")  # pragma: no cover


def _connect_all(
    conns: Sequence[NSQConnection],
    deadlines: Sequence[float],
    results: list[NSQConnection | NSQError],
    connected: dict[int, socket.socket],
) -> None:
    """Connect every TCP socket at once into ``connected`` (by index); the others'
    results are their errors."""
    pending: dict[int, _Dial] = {}
    with selectors.DefaultSelector() as selector:
        try:
            for i, conn in enumerate(conns):
                try:
                    dial = _Dial(conn)
                except NSQError as exc:
                    results[i] = exc
                    continue
                if dial.start():
                    pending[i] = dial
                    selector.register(dial.sock, selectors.EVENT_WRITE, i)
                else:
                    results[i] = dial.error(timed_out=False)
            while pending:
                now = time.monotonic()
                for i in [i for i in pending if now >= deadlines[i]]:
                    dial = pending.pop(i)
                    selector.unregister(dial.sock)
                    results[i] = dial.error(timed_out=True)
                if not pending:
                    break
                soonest = min(deadlines[i] for i in pending)
                for key, _ in selector.select(max(soonest - now, 0.0)):
                    i = key.data
                    dial = pending[i]
                    selector.unregister(dial.sock)
                    if dial.finished():
                        connected[i] = pending.pop(i).sock
                    elif dial.start():
                        selector.register(dial.sock, selectors.EVENT_WRITE, i)
                    else:
                        results[i] = pending.pop(i).error(timed_out=False)
        finally:
            for dial in pending.values():  # only left after an interrupt
                dial.close()


def _handshake_all(
    socks: dict[int, socket.socket],
    deadlines: Sequence[float],
    results: list[NSQConnection | NSQError],
) -> None:
    """Pump every handshake at once over one selector; a connection that fails or does
    not complete it in time is closed, its result the error."""
    waiting: dict[int, NSQConnection] = {}
    with selectors.DefaultSelector() as selector:
        for i, sock in socks.items():
            conn = results[i]
            assert isinstance(conn, NSQConnection)
            try:
                conn.start_handshake(sock)
            except NSQError as exc:
                conn.close()
                results[i] = exc
                continue
            waiting[i] = conn
            selector.register(conn, selectors.EVENT_READ, i)
        while waiting:
            now = time.monotonic()
            for i in [i for i in waiting if now >= deadlines[i]]:
                conn = waiting.pop(i)
                selector.unregister(conn)
                conn.close()
                results[i] = conn.handshake_timeout()
            if not waiting:
                break
            # TLS may hold decrypted bytes the socket no longer shows as readable.
            ready = [i for i, c in waiting.items() if c.has_buffered_input]
            if not ready:
                soonest = min(deadlines[i] for i in waiting)
                ready = [key.data for key, _ in selector.select(max(soonest - now, 0.0))]
            for i in ready:
                conn = waiting[i]
                try:
                    conn.read_available()
                    done = conn.handshake_done
                except NSQError as exc:
                    done = True
                    conn.close()
                    results[i] = exc
                if done:
                    selector.unregister(conn)
                    del waiting[i]
