"""Blocking driver: one socket, pumped through :class:`ClientConnection`.

Safe for plain scripts, Airflow tasks, forked workers and Spark executors: no threads, no
event loop. Not thread-safe: use one connection per thread.

A publish is one write and, usually, one read: the reply is taken by the protocol
object's ``take_ok`` when the read is exactly nsqd's ``OK``, with no frame or event made
for it; anything else goes through the full dispatch. The socket's waits are bounded as
:mod:`..transport.blocking_socket` says.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable

from ...protocol.connection import ClientConnection, ConnectionState
from ...protocol.constants import OK
from ...protocol.errors import (
    NSQConnectionClosedError,
    NSQConnectionError,
    NSQError,
    NSQTimeoutError,
)
from ..message import NSQMessage
from ..settings.client_config import ClientConfig
from ..transport.blocking_socket import BlockingSocket, connect_tcp
from ..transport.io_errors import describe_tls_error, map_exceptions
from ..transport.tls import build_ssl_context
from .answering import AnsweringDriver
from .base import CLOSED_STATES, mpub_failed, queue_mpub

log = logging.getLogger(__name__)

#: How long a :meth:`NSQConnection.prepare_publish` check stands for the publish after it.
_PREPARED_FOR_S = 0.001
_HANDSHAKING = ConnectionState.HANDSHAKING


class BlockingIO(AnsweringDriver):
    """The blocking driver's I/O: one socket (:class:`BlockingSocket`), the writes of what
    the core queued, the reads and their dispatch, and the wait for a command's reply.
    Every wait is bounded; a reply that does not come drops the connection."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        super().__init__(config)
        self._io: BlockingSocket | None = None
        self._replies: deque[bytes] = deque()

    # -- for a selector over many connections (the consumer) -------------------------

    def fileno(self) -> int:
        """The socket's file descriptor (-1 when not connected)."""
        return self._io.fileno() if self._io is not None else -1

    @property
    def has_buffered_input(self) -> bool:
        """TLS bytes already decrypted and not yet read: the socket will not show them
        as readable, so a selector would miss them."""
        return self._io is not None and self._io.has_buffered_input

    def read_available(self) -> bool:
        """Read what has arrived, without waiting, and act on it (answer heartbeats, keep
        messages for :meth:`take_messages`, record nsqd's close). False when nothing had
        arrived. Invalid bytes are recorded as the failure and raised."""
        return self._read_once(0)

    # -- I/O -----------------------------------------------------------------------

    def _teardown(self) -> None:
        self._reset_state()
        io = self._io
        if io is not None:
            self._io = None
            io.close()
        self._replies.clear()

    def _wait_reply(self, command: str) -> bytes:
        """nsqd's reply to ``command``, the oldest command waiting for one."""
        replies = self._replies
        if not replies:
            if self._failure is not None:
                raise self._failure
            timeout = self.config.read_timeout
            deadline = time.monotonic() + timeout
            remaining = timeout
            # Usually one read brings the reply and nothing else.
            while self._read_once(remaining) and not replies:
                self._raise_failure(command)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
            if not replies:
                # A late reply would be matched to the next command: drop the connection.
                self._teardown()
                raise NSQTimeoutError(
                    f"nsqd at {self.config.address} did not answer {command} within {timeout:g}s"
                )
        return replies.popleft()

    def _raise_failure(self, doing: str) -> None:
        if self._failure is not None:
            raise self._failure
        if self._core is None or self._core.state in CLOSED_STATES:
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
        io = self._io
        assert io is not None
        try:
            io.send_all(data, self.config.read_timeout)
        except TimeoutError:
            # nsqd stopped reading (it may have answered first: say so if it did).
            unsent = io.unsent
            self._read_answer(0)
            self._teardown()
            raise NSQTimeoutError(
                f"nsqd at {self.config.address} stopped reading: {unsent} bytes of output "
                f"unsent after {self.config.read_timeout:g}s without progress"
            ) from None
        except OSError as exc:
            # nsqd may have refused the command and closed while we were still writing
            # (it checks a body's size before reading it: docs/nsqd-facts.md
            # section 3): its error frame is probably waiting to be read.
            self._read_answer(0.5)
            raise NSQConnectionClosedError(
                f"connection to nsqd at {self.config.address} broke while writing: "
                f"{exc.strerror or exc}"
            ) from None
        self._last_write = time.monotonic()

    def _read_answer(self, timeout: float) -> None:
        """After a failed write: read what nsqd sent before it stopped (its error frame)
        and raise that failure if there is one."""
        try:
            while self._core is not None and self._core.state not in CLOSED_STATES:
                if not self._read_once(timeout):
                    break
        except NSQError:
            pass
        if self._failure is not None:
            raise self._failure from None

    def _read_once(self, timeout: float) -> bool:
        """Read once (waiting up to ``timeout``) and handle what came; False on timeout."""
        io = self._io
        core = self._core
        if io is None or core is None:
            return False
        try:
            n = io.recv(timeout)
        except ssl.SSLError as exc:
            self._fail(describe_tls_error(self._peer, exc))
            n = 0
        except OSError:
            n = 0  # reset: same as EOF after whatever was already read
        if n < 0:
            return False
        if n:
            self.last_received = time.monotonic()
        # A reply and nothing else, the usual read of a publisher (an OK frame is 10
        # bytes: a consumer's reads skip the call).
        if n == 10 and core.take_ok(io.buffer, n):
            self._replies.append(OK)
            return True
        self._receive(io.view[:n] if n else b"")
        return True

    def _reply_arrived(self, data: bytes) -> None:
        self._replies.append(data)

    def _start_tls(self) -> None:
        assert self._io is not None and self._core is not None
        cfg = self.config
        context = build_ssl_context(cfg)
        with map_exceptions(self._peer, "upgrade to TLS with", cfg.connect_timeout, tls=True):
            self._io.start_tls(context, cfg.tls_server_name or cfg.host, cfg.connect_timeout)
        self._core.tls_established()


class NSQConnection(BlockingIO):
    """A blocking connection to one nsqd.

    Publishing methods return only after nsqd's ``OK`` and raise :class:`NSQServerError`
    with nsqd's code and text otherwise. A publishing connection that nsqd closed (after
    an error, or because it sat idle past two heartbeat intervals) is reopened before the
    next publish is written; a subscribed connection is never silently reopened.
    """

    def __init__(self, config: ClientConfig | None = None) -> None:
        super().__init__(config)
        self._prepared_at = float("-inf")  # when prepare_publish() last checked

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> NSQConnection:
        if self._io is None:
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
            sock = connect_tcp(cfg.host, cfg.port, cfg.connect_timeout)
        try:
            core = self._begin_handshake(sock)
            while core.state is _HANDSHAKING:
                if not self._read_once(deadline - time.monotonic()):
                    raise self.handshake_timeout()
                self._raise_failure("the handshake")
        except BaseException:
            if self._io is None:
                sock.close()
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
        self._begin_handshake(sock)

    def _begin_handshake(self, sock: socket.socket) -> ClientConnection:
        """Wrap ``sock`` (connected, Nagle off) and send the handshake's opening."""
        self._io = BlockingSocket(sock)
        core = self._new_core()
        core.initiate()
        self._flush()
        return core

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
        """Close the connection. Messages delivered and not taken are REQ'd first (when
        the connection is alive) so nsqd redelivers them at once, not after msg_timeout."""
        self._requeue_unanswered()
        self._teardown()

    # -- publishing ----------------------------------------------------------------

    def publish(self, topic: str, body: bytes) -> None:
        """PUB one message; returns after nsqd's OK."""
        self._publisher().pub(topic, body)
        self._flush()
        self._wait_reply("PUB")

    def defer_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        """DPUB: nsqd delivers the message ``delay_ms`` after it is published."""
        self._publisher().dpub(topic, delay_ms, body)
        self._flush()
        self._wait_reply("DPUB")

    def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> int:
        """MPUB ``bodies`` in as few frames as fit nsqd's limits; returns the frame count.

        Every body is checked before anything is sent. The frames are pipelined; if nsqd
        refuses one, the error says how many frames (and messages) it had accepted.
        """
        counts = queue_mpub(self._publisher(), topic, bodies)
        self._flush()
        for done in range(len(counts)):
            try:
                self._wait_reply("MPUB")
            except NSQError as exc:
                raise mpub_failed(exc, done, counts) from exc if done else None
        return len(counts)

    def prepare_publish(self) -> None:
        """Make the connection ready for the next publish without sending anything:
        answer the heartbeats waiting, and reopen it when nsqd closed it or it sat idle
        past nsqd's heartbeat deadline. Raises what reopening raises. A publish that
        follows at once trusts this check instead of making its own."""
        self._publisher()
        self._prepared_at = time.monotonic()

    def _publisher(self) -> ClientConnection:
        """The core to publish on, after the checks of :meth:`prepare_publish`."""
        core = self._core
        if core is None or core.state in CLOSED_STATES:
            return self._reopen("the connection is closed")
        now = time.monotonic()
        limit = self._idle_limit
        if limit is not None and now - self._last_write >= limit:
            # nsqd drops a client it has not heard from for two heartbeat intervals; a
            # write now could land on a closed socket and be lost. Decided before reading,
            # because a NOP sent while draining proves nothing about nsqd having read it.
            return self._reopen("the connection was idle past nsqd's heartbeat deadline")
        if now - self._prepared_at < _PREPARED_FOR_S:
            self._prepared_at = float("-inf")  # one publish per check
            return core
        io = self._io
        try:
            # Read what is waiting without blocking: heartbeats to answer, or nsqd's close.
            while io is not None and io.readable() and self._read_once(0):
                if core.state in CLOSED_STATES:
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
        self._require_core().sub(topic, channel, self._message_class())
        self._subscribed = True
        self._flush()
        self._wait_reply("SUB")

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
        self._flush()
        self._wait_reply("PING")

    def start_close(self) -> None:
        """CLS: nsqd stops delivering (RDY 0) and answers CLOSE_WAIT; messages already
        in flight can still be FIN'd or REQ'd. Returns after CLOSE_WAIT."""
        self._require_core().cls()
        self._flush()
        self._wait_reply("CLS")
