"""Blocking driver: one socket, pumped through :class:`ClientConnection`.

Safe for plain scripts, Airflow tasks, forked workers and Spark executors: no threads, no
event loop. Not thread-safe: use one connection per thread.

A publish is one write and, usually, one read: the reply is taken by the protocol
object's ``take_ok`` when the read is exactly nsqd's ``OK``, with no frame or event made
for it; anything else goes through the full dispatch (:mod:`.base`).

Whether a publishing connection is usable is decided once per publish, before anything
of it is written: heartbeats waiting are answered, and a connection that nsqd closed or
that sat idle past nsqd's heartbeat deadline is reopened. :meth:`NSQConnection.publish`
asks on its own; a caller that must know that the check passed before the command is
written (the producer's failover) asks :meth:`NSQConnection.prepare_publish`, and the
publish right after it (``prepared=True``) trusts that answer.

The socket (:class:`BlockingSocket`) bounds every wait. Python's own timeout mode
(``settimeout``) makes CPython ``poll()`` before every send and every receive: two
system calls more per request and reply, a third of a PUB's. So on Linux a plaintext
socket stays in blocking mode: the kernel bounds a receive's wait (``SO_RCVTIMEO``: a
receive that waited that long fails with ``EAGAIN``), and a send is tried without
waiting (``MSG_DONTWAIT``; it usually takes everything at once) and waits for room with
``poll()`` only when it did not. TLS sockets use Python's timeout mode (OpenSSL would
retry a receive the kernel timed out, without end), and so does every socket elsewhere
than Linux.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import struct
import sys
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
from ..transport.io_errors import describe_tls_error, error_from_io, map_exceptions
from ..transport.tls import build_ssl_context
from .base import (
    CLOSED_STATES,
    AnsweringDriver,
    give_back_buffer,
    mpub_failed,
    queue_mpub,
    take_buffer,
)

__all__ = ["NSQConnection"]

log = logging.getLogger(__name__)

_HANDSHAKING = ConnectionState.HANDSHAKING

#: Plaintext sockets have their waits bounded by the kernel (see the module docstring).
KERNEL_TIMEOUTS = sys.platform == "linux"
#: A wait may last this much longer than asked: a timeout is set again (a system call)
#: only when it changes by more, not for each wait's slightly smaller remainder.
SLACK_S = 0.01
_MINUS_SLACK_S = -SLACK_S

_TIMEVAL = struct.Struct("@ll")  # Linux's struct timeval: seconds, microseconds
_NO_BUFFER = bytearray()  # what a closed socket holds instead of its buffer


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    micros = int((seconds - whole) * 1_000_000)
    return _TIMEVAL.pack(whole, micros or (0 if whole else 1))  # 0 would mean "forever"


def connect_tcp(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to ``host``:``port`` opened within ``timeout`` seconds, with
    Nagle off: ``socket.create_connection``, except that an IP address goes straight to
    ``connect`` (the resolver's call and its enum conversions cost a tenth of a
    loopback handshake)."""
    sock = _connect_ip(host, port, timeout)
    if sock is None:
        sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


def _connect_ip(host: str, port: int, timeout: float) -> socket.socket | None:
    """The connection to an IPv4 or IPv6 address; None when ``host`` is a name."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
        return sock
    return None


class BlockingSocket:
    """``sock``, connected, with the buffer it reads into (:attr:`buffer`, :attr:`view`).

    Every wait is bounded by the timeout its call gives: a receive that times out
    returns -1, a send that makes no progress raises :class:`TimeoutError` (what was
    left is in :attr:`unsent`). Other socket and TLS errors propagate.
    """

    __slots__ = (
        "_kernel",
        "_poll",
        "_poll_out",
        "_recv_timeout",
        "_timeout",
        "_tls",
        "buffer",
        "sock",
        "unsent",
        "view",
    )

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._kernel = KERNEL_TIMEOUTS and not self._tls
        self._timeout: float | None = sock.gettimeout()  # Python's timeout mode
        if self._kernel and self._timeout is not None:
            sock.settimeout(None)
            self._timeout = None
        self._recv_timeout = -1.0  # the kernel's receive timeout: none set yet
        self.buffer, self.view = take_buffer()
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self._poll_out: select.poll | None = None  # made when a send first waits
        #: Bytes of the last :meth:`send_all` that the socket had not taken when it failed.
        self.unsent = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def has_buffered_input(self) -> bool:
        """TLS bytes already decrypted and not yet read: the socket will not show them
        as readable, so a selector would miss them."""
        return self._tls and self.sock.pending() > 0  # type: ignore[attr-defined]

    def readable(self) -> bool:
        """Input is waiting (or the peer closed, or the socket failed): a read will not
        wait. One ``poll`` with no timeout."""
        if self._tls and self.sock.pending():  # type: ignore[attr-defined]
            return True
        return bool(self._poll.poll(0))

    def recv(self, timeout: float) -> int:
        """Read what arrives within ``timeout`` seconds (at most 0: only what is there)
        into :attr:`buffer`: the byte count, 0 when the peer closed, -1 when nothing
        came."""
        sock = self.sock
        try:
            if self._kernel:
                if timeout <= 0:
                    return sock.recv_into(self.buffer, 0, socket.MSG_DONTWAIT)
                change = timeout - self._recv_timeout
                if change > SLACK_S or change < _MINUS_SLACK_S:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(timeout))
                    self._recv_timeout = timeout
                return sock.recv_into(self.buffer)
            self._python_timeout(max(timeout, 0.0))
            return sock.recv_into(self.buffer)
        except (BlockingIOError, TimeoutError, ssl.SSLWantReadError):
            return -1

    def send_all(self, data: bytes, timeout: float) -> None:
        """Write all of ``data``, waiting up to ``timeout`` seconds for each step of
        progress (unlike ``sendall``, whose timeout bounds the whole write: a large body
        on a slow link is not a peer that stopped reading). :class:`TimeoutError` when a
        step makes none."""
        sock = self.sock
        if not self._kernel:
            self._python_timeout(timeout)
            view = memoryview(data)
            while view:
                self.unsent = len(view)
                view = view[sock.send(view) :]
            self.unsent = 0
            return
        try:
            sent = sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        if sent == len(data):  # the usual case: all of it at once
            return
        view = memoryview(data)[sent:]
        poll = self._poll_out
        if poll is None:
            poll = self._poll_out = select.poll()
            poll.register(sock.fileno(), select.POLLOUT)
        while view:
            self.unsent = len(view)
            if not poll.poll(timeout * 1000):
                raise TimeoutError
            try:
                view = view[sock.send(view, socket.MSG_DONTWAIT) :]
            except BlockingIOError:
                pass
        self.unsent = 0

    def start_tls(self, context: ssl.SSLContext, server_hostname: str, timeout: float) -> None:
        """Run the TLS client handshake (within ``timeout``); this socket is TLS after."""
        self.sock.settimeout(timeout)  # Python's timeout mode from here on
        self._timeout = timeout
        self._kernel = False
        self.sock = context.wrap_socket(self.sock, server_hostname=server_hostname)
        self._tls = True

    def close(self) -> None:
        """Close the socket (errors ignored) and give its buffer back."""
        try:
            self.sock.close()
        except OSError:
            pass
        buffer, view = self.buffer, self.view
        if buffer is not _NO_BUFFER:
            self.buffer, self.view = _NO_BUFFER, memoryview(_NO_BUFFER)
            give_back_buffer(buffer, view)

    def _python_timeout(self, timeout: float) -> None:
        current = self._timeout
        # Each settimeout is a system call: keep one that is close enough.
        if current is None or abs(timeout - current) > SLACK_S or (timeout == 0) != (current == 0):
            self.sock.settimeout(timeout)
            self._timeout = timeout


class BlockingIO(AnsweringDriver):
    """The blocking driver's I/O: one socket (:class:`BlockingSocket`), the writes of what
    the core queued, the reads and their dispatch, and the wait for a command's reply.
    Every wait is bounded; a reply that does not come drops the connection."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        super().__init__(config)
        self._io: BlockingSocket | None = None
        self._replies: deque[bytes] = deque()
        self._read_timeout = self.config.read_timeout  # read per command

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
            timeout = self._read_timeout
            # Counted from the last progress: the command's write (just now), or a reply
            # since (an MPUB's earlier frames). Both were stamped already: no clock call.
            last = self._last_write
            if self.last_received > last:
                last = self.last_received
            deadline = last + timeout
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
            io.send_all(data, self._read_timeout)
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
        if core.state not in CLOSED_STATES:
            self._flush()  # the NOP for a heartbeat; AUTH once IDENTIFY asked for it
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
    next publish is written (:meth:`prepare_publish`); a subscribed connection is never
    silently reopened.
    """

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
        if self._io is not None or self._core is not None:
            self._teardown()
        cfg = self.config
        deadline = time.monotonic() + cfg.connect_timeout
        try:
            sock = connect_tcp(cfg.host, cfg.port, cfg.connect_timeout)
        except OSError as exc:
            raise error_from_io(exc, self._peer, "connect to", cfg.connect_timeout) from None
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
        if self._subscribed:
            self._requeue_unanswered()
        self._teardown()

    # -- publishing ----------------------------------------------------------------

    def prepare_publish(self) -> None:
        """Decide whether the connection is usable for a publish, and make it so, without
        writing anything of that publish: answer the heartbeats waiting, and (re)open
        the connection when it is not open yet, nsqd closed it, or it sat idle past
        nsqd's heartbeat deadline. Raises what opening raises.

        A publish made right after it with ``prepared=True`` trusts this answer instead
        of asking again: so the producer knows that a failure here came before any byte
        of the command was written (it may fail over to another nsqd), and a failure of
        the publish after.
        """
        self._usable_core()

    def publish(self, topic: str, body: bytes, *, prepared: bool = False) -> None:
        """PUB one message; returns after nsqd's OK.

        :param prepared: :meth:`prepare_publish` was called just before; otherwise the
            publish asks the same question itself.
        """
        core = self._core if prepared and self._core is not None else self._usable_core()
        core.pub(topic, body)
        self._flush()
        self._wait_reply("PUB")

    def defer_publish(
        self, topic: str, body: bytes, delay_ms: int, *, prepared: bool = False
    ) -> None:
        """DPUB: nsqd delivers the message ``delay_ms`` after it is published
        (``prepared``: as :meth:`publish` says)."""
        core = self._core if prepared and self._core is not None else self._usable_core()
        core.dpub(topic, delay_ms, body)
        self._flush()
        self._wait_reply("DPUB")

    def multi_publish(self, topic: str, bodies: Iterable[bytes], *, prepared: bool = False) -> int:
        """MPUB ``bodies`` in as few frames as fit nsqd's limits; returns the frame count
        (``prepared``: as :meth:`publish` says).

        Every body is checked before anything is sent. The frames are pipelined; if nsqd
        refuses one, the error says how many frames (and messages) it had accepted.
        """
        core = self._core if prepared and self._core is not None else self._usable_core()
        counts = queue_mpub(core, topic, bodies)
        self._flush()
        for done in range(len(counts)):
            try:
                self._wait_reply("MPUB")
            except NSQError as exc:
                raise mpub_failed(exc, done, counts) from exc if done else None
        return len(counts)

    def _usable_core(self) -> ClientConnection:
        """The answer of :meth:`prepare_publish`: the core, ready for a publish."""
        core = self._core
        if core is None or core.state in CLOSED_STATES:
            return self._reopen("the connection is closed")
        limit = self._idle_limit
        if limit is not None and time.monotonic() - self._last_write >= limit:
            # nsqd drops a client it has not heard from for two heartbeat intervals; a
            # write now could land on a closed socket and be lost. Decided before reading,
            # because a NOP sent while draining proves nothing about nsqd having read it.
            return self._reopen("the connection was idle past nsqd's heartbeat deadline")
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
