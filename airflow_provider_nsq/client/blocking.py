"""Blocking driver: one socket, pumped through :class:`ClientConnection`.

Safe for plain scripts, Airflow tasks, forked workers and Spark executors: no threads, no
event loop. Not thread-safe: use one connection per thread.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable

from ..protocol.connection import ClientConnection, ConnectionState
from ..protocol.errors import (
    NSQConnectionClosedError,
    NSQConnectionError,
    NSQError,
    NSQTimeoutError,
)
from .config import ClientConfig
from .driver import CLOSED_STATES as _CLOSED_STATES
from .driver import DriverBase
from .io_errors import describe_tls_error, map_exceptions
from .message import NSQMessage
from .tls import build_ssl_context
from .window import Window

log = logging.getLogger(__name__)

_RECV_SIZE = 256 * 1024


class NSQConnection(DriverBase[list[NSQMessage]]):
    """A blocking connection to one nsqd.

    Publishing methods return only after nsqd's ``OK`` and raise :class:`NSQServerError`
    with nsqd's code and text otherwise. A publishing connection that nsqd closed (after
    an error, or because it sat idle past two heartbeat intervals) is reopened before the
    next publish is written; a subscribed connection is never silently reopened.
    """

    def __init__(self, config: ClientConfig | None = None) -> None:
        super().__init__(config)
        self._sock: socket.socket | None = None
        self._replies: deque[bytes] = deque()
        self._timeout: float | None = None  # the socket's current timeout (a syscall to set)
        self._recv_buffer = bytearray(_RECV_SIZE)
        self._recv_view = memoryview(self._recv_buffer)
        self._unsent = 0  # bytes of the current write not yet taken by the socket

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> NSQConnection:
        if self._sock is None:
            self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def connect(self) -> NSQConnection:
        """Open the TCP connection and run the handshake (IDENTIFY, TLS, compression,
        AUTH), bounded by ``connect_timeout``."""
        self._teardown()
        cfg = self.config
        deadline = time.monotonic() + cfg.connect_timeout
        with map_exceptions(self._peer, "connect to", cfg.connect_timeout):
            sock = socket.create_connection((cfg.host, cfg.port), timeout=cfg.connect_timeout)
        try:
            self.start_handshake(sock)
            while not self.handshake_done:
                if not self._read_once(deadline - time.monotonic()):
                    raise self.handshake_timeout()
        except BaseException:
            self._teardown()
            raise
        return self

    # -- a handshake pumped by an owner of many connections (the consumer's Connect) --

    def start_handshake(self, sock: socket.socket) -> None:
        """Take over ``sock``, a TCP socket already connected to this connection's nsqd,
        and send the handshake's opening (magic, IDENTIFY) without waiting for nsqd. The
        caller then calls :meth:`read_available` whenever the socket is readable, until
        :attr:`handshake_done`: so one selector pumps many handshakes at once (the
        blocking consumer opens every nsqd that way). A TLS upgrade, when nsqd asks for
        it, waits on this socket (bounded by ``connect_timeout``)."""
        self._teardown()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._timeout = sock.gettimeout()
        self._new_core().initiate()
        self._flush()

    @property
    def handshake_done(self) -> bool:
        """Whether the handshake :meth:`start_handshake` began has completed; raises the
        error that ended it instead (nsqd's refusal, its close)."""
        self._raise_failure("the handshake")
        assert self._core is not None
        return self._core.state is not ConnectionState.HANDSHAKING

    def handshake_timeout(self) -> NSQTimeoutError:
        """The error for a handshake that did not complete within ``connect_timeout``."""
        return NSQTimeoutError(
            f"nsqd at {self.config.address} did not complete the handshake within "
            f"{self.config.connect_timeout:g}s"
        )

    def close(self) -> None:
        """Close the connection. Messages still held unanswered are REQ'd first (when
        the connection is alive) so nsqd redelivers them at once, not after msg_timeout."""
        self._requeue_unanswered()
        self._teardown()

    def _teardown(self) -> None:
        self._reset_state()
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._replies.clear()

    # -- publishing ----------------------------------------------------------------

    def publish(self, topic: str, body: bytes) -> None:
        """PUB one message; returns after nsqd's OK."""
        core = self._prepare_publish()
        core.pub(topic, body)
        self._request("PUB")

    def defer_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        """DPUB: nsqd delivers the message ``delay_ms`` after it is published."""
        core = self._prepare_publish()
        core.dpub(topic, delay_ms, body)
        self._request("DPUB")

    def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> int:
        """MPUB ``bodies`` in as few frames as fit nsqd's limits; returns the frame count.

        Every body is checked before anything is sent. The frames are pipelined; if nsqd
        refuses one, the error says how many frames (and messages) it had accepted.
        """
        counts = self._queue_mpub(self._prepare_publish(), topic, bodies)
        self._flush()
        for done in range(len(counts)):
            try:
                self._wait_reply("MPUB")
            except NSQError as exc:
                raise self._mpub_failed(exc, done, counts) from exc if done else None
        return len(counts)

    def prepare_publish(self) -> None:
        """Make the connection ready for the next publish without sending anything:
        answer the heartbeats waiting, and reopen it when nsqd closed it or it sat idle
        past nsqd's heartbeat deadline. Raises what reopening raises."""
        self._prepare_publish()

    def _prepare_publish(self) -> ClientConnection:
        core = self._core
        if core is None or core.state in _CLOSED_STATES:
            return self._reopen("the connection is closed")
        limit = self._idle_limit
        if limit is not None and time.monotonic() - self._last_write >= limit:
            # nsqd drops a client it has not heard from for two heartbeat intervals; a
            # write now could land on a closed socket and be lost. Decided before reading,
            # because a NOP sent while draining proves nothing about nsqd having read it.
            return self._reopen("the connection was idle past nsqd's heartbeat deadline")
        try:
            # Read what is waiting without blocking: heartbeats to answer, or nsqd's close.
            while self._readable() and self._read_once(0):
                if core.state in _CLOSED_STATES:
                    return self._reopen("nsqd closed the connection")
        except NSQConnectionError as exc:
            return self._reopen(str(exc))
        return core

    def _reopen(self, why: str) -> ClientConnection:
        if self._subscribed:
            raise NSQConnectionClosedError(
                f"subscribed connection to nsqd at {self.config.address} is unusable: {why}"
            )
        if self._core is not None:
            log.debug("reconnecting to nsqd at %s: %s", self.config.address, why)
        self.connect()
        assert self._core is not None
        return self._core

    # -- subscribing ---------------------------------------------------------------

    def subscribe(self, topic: str, channel: str) -> None:
        """SUB to ``topic``/``channel``; returns after nsqd's OK. Once per connection."""
        core = self._require_core()
        core.sub(topic, channel)
        self._subscribed = True
        self._request("SUB")

    def read_messages(self, timeout: float | None = None) -> list[NSQMessage]:
        """Wait up to ``timeout`` seconds (None: ``read_timeout``) for messages; return
        all that arrived (possibly none). Answers heartbeats while waiting."""
        if not self._messages:
            self._flush()
            wait = self.config.read_timeout if timeout is None else timeout
            deadline = time.monotonic() + wait
            while not self._messages:
                self._raise_failure("waiting for messages")
                if not self._read_once(deadline - time.monotonic()):
                    break
        return self.take_messages()

    def ping(self) -> None:
        """One round trip that nsqd answers only if it accepts commands on this connection
        (not subscribed yet); raises nsqd's refusal, e.g. ``E_INVALID cannot NOP in
        current state (TLS required)``. See :meth:`ClientConnection.ping`."""
        self._require_core().ping()
        self._request("PING")

    def start_close(self) -> None:
        """CLS: nsqd stops delivering (RDY 0) and answers CLOSE_WAIT; messages already
        in flight can still be FIN'd or REQ'd. Returns after CLOSE_WAIT."""
        self._require_core().cls()
        self._request("CLS")

    # -- for a selector over many connections (the consumer) -------------------

    def fileno(self) -> int:
        """The socket's file descriptor (-1 when not connected)."""
        return self._sock.fileno() if self._sock is not None else -1

    @property
    def has_buffered_input(self) -> bool:
        """TLS bytes already decrypted and not yet read: the socket will not show them
        as readable, so a selector would miss them."""
        sock = self._sock
        return isinstance(sock, ssl.SSLSocket) and sock.pending() > 0

    def read_available(self) -> bool:
        """Read what has arrived, without waiting, and act on it (answer heartbeats, keep
        messages for :meth:`take_messages`, record nsqd's close). False when nothing had
        arrived. Invalid bytes are recorded as the failure and raised."""
        return self._read_once(0)

    def _run_window(self, window: Window) -> list[NSQMessage]:
        self.subscribe(window.topic, window.channel)
        self.ready(window.max_messages)
        for remaining in window.waits():
            window.got.extend(self.read_messages(remaining))
        self.start_close()
        if self._readable():  # stragglers nsqd sent before it processed CLS
            self._read_once(0)
        return self._end_window(window)

    # -- I/O -----------------------------------------------------------------------

    def _request(self, command: str) -> bytes:
        self._flush()
        return self._wait_reply(command)

    def _wait_reply(self, command: str) -> bytes:
        deadline = time.monotonic() + self.config.read_timeout
        while True:
            if self._replies:
                return self._replies.popleft()
            self._raise_failure(command)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read_once(remaining):
                # A late reply would be matched to the next command: drop the connection.
                self._teardown()
                raise NSQTimeoutError(
                    f"nsqd at {self.config.address} did not answer {command} within "
                    f"{self.config.read_timeout:g}s"
                )

    def _raise_failure(self, doing: str) -> None:
        if self._failure is not None:
            raise self._failure
        if self._core is None or self._core.state in _CLOSED_STATES:
            raise NSQConnectionClosedError(
                f"the connection to nsqd at {self.config.address} closed during {doing}"
            )

    def _flush(self) -> None:
        core = self._core
        if core is None:
            return
        data = core.data_to_send()
        if not data:
            return
        assert self._sock is not None
        try:
            self._send(self._sock, data)
        except TimeoutError:
            # nsqd stopped reading (it may have answered first: say so if it did).
            unsent = self._unsent
            self._read_answer(0)
            self._teardown()
            raise NSQTimeoutError(
                f"nsqd at {self.config.address} stopped reading: {unsent} bytes of output "
                f"unsent after {self.config.read_timeout:g}s without progress"
            ) from None
        except OSError as exc:
            # nsqd may have refused the command and closed while we were still writing
            # (it checks a body's size before reading it: tests/conformance/transcripts/
            # FACTS.md section 3): its error frame is probably waiting to be read.
            self._read_answer(0.5)
            raise NSQConnectionClosedError(
                f"connection to nsqd at {self.config.address} broke while writing: "
                f"{exc.strerror or exc}"
            ) from None
        self._last_write = time.monotonic()

    def _send(self, sock: socket.socket, data: bytes) -> None:
        """Write all of ``data``, waiting up to ``read_timeout`` for each step of
        progress (unlike ``sendall``, whose timeout bounds the whole write: a large body
        on a slow link is not a stalled nsqd)."""
        self._set_timeout(sock, self.config.read_timeout)
        view = memoryview(data)
        while view:
            self._unsent = len(view)
            view = view[sock.send(view) :]
        self._unsent = 0

    def _read_answer(self, timeout: float) -> None:
        """After a failed write: read what nsqd sent before it stopped (its error frame)
        and raise that failure if there is one."""
        try:
            while self._core is not None and self._core.state not in _CLOSED_STATES:
                if not self._read_once(timeout):
                    break
        except NSQError:
            pass
        if self._failure is not None:
            raise self._failure from None

    def _readable(self) -> bool:
        sock = self._sock
        if sock is None:
            return False
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True  # let the read report what is wrong
        return bool(readable)

    def _set_timeout(self, sock: socket.socket, timeout: float) -> None:
        if timeout != self._timeout:  # each settimeout is a syscall
            sock.settimeout(timeout)
            self._timeout = timeout

    def _read_once(self, timeout: float) -> bool:
        """Read once (waiting up to ``timeout``) and handle the events; False on timeout."""
        sock = self._sock
        core = self._core
        if sock is None or core is None:
            return False
        try:
            self._set_timeout(sock, max(timeout, 0.0))
            # One buffer per connection: recv() would allocate (and free) 256 KiB per read.
            n = sock.recv_into(self._recv_buffer)
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            return False
        except ssl.SSLError as exc:
            self._fail(describe_tls_error(self._peer, exc))
            n = 0
        except OSError:
            n = 0  # reset: same as EOF after whatever was already read
        self._receive(self._recv_view[:n] if n else b"")
        return True

    def _reply_arrived(self, data: bytes) -> None:
        self._replies.append(data)

    def _start_tls(self) -> None:
        assert self._sock is not None and self._core is not None
        cfg = self.config
        context = build_ssl_context(cfg)
        with map_exceptions(self._peer, "upgrade to TLS with", cfg.connect_timeout, tls=True):
            self._set_timeout(self._sock, cfg.connect_timeout)
            self._sock = context.wrap_socket(
                self._sock, server_hostname=cfg.tls_server_name or cfg.host
            )
        self._core.tls_established()
