"""Open many nsqd connections at once on blocking sockets: how the blocking runner
performs :class:`~.steps.Connect`.

Every TCP connect starts at the same time (non-blocking, over one selector), and every
handshake (magic, IDENTIFY, TLS, compression, AUTH) is pumped as its bytes arrive; then
each connection is SUB'd. So N nsqds that cannot be reached cost one ``connect_timeout``,
not N of them, as on the asyncio runner. Only a TLS upgrade (when nsqd asks for it) and
the SUB's reply wait on one connection at a time, each bounded by ``connect_timeout`` or
``read_timeout``.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from collections.abc import Sequence

from ...protocol.errors import NSQError
from ..drivers.blocking_driver import NSQConnection
from ..transport.io_errors import map_exceptions
from .steps import Connect, Opened

_IN_PROGRESS = (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY)


def open_connections(step: Connect) -> Opened:
    """Open, handshake and SUB one connection per config, all at once (see the module
    docstring). An interrupt closes every connection opened so far and is raised."""
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
