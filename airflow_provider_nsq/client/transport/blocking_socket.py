"""One socket of the blocking driver: sends and receives with bounded waits, a receive
buffer, a check for input that does not wait, and the TLS upgrade.

Python's own timeout mode (``settimeout``) makes CPython ``poll()`` before every send and
every receive: two system calls more per request and reply, a third of a PUB's. So on
Linux a plaintext socket stays in blocking mode: the kernel bounds a receive's wait
(``SO_RCVTIMEO``: a receive that waited that long fails with ``EAGAIN``), and a send is
tried without waiting (``MSG_DONTWAIT``; it usually takes everything at once) and waits
for room with ``poll()`` only when it did not. TLS sockets use Python's timeout mode
(OpenSSL would retry a receive the kernel timed out, without end), and so does every
socket elsewhere than Linux.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import sys

from . import receive_buffers

#: Plaintext sockets have their waits bounded by the kernel (see the module docstring).
KERNEL_TIMEOUTS = sys.platform == "linux"
#: A wait may last this much longer than asked: a timeout is set again (a system call)
#: only when it changes by more, not for each wait's slightly smaller remainder.
SLACK_S = 0.01

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
        self.buffer, self.view = receive_buffers.take()
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
                if abs(timeout - self._recv_timeout) > SLACK_S:
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
            receive_buffers.give_back(buffer, view)

    def _python_timeout(self, timeout: float) -> None:
        current = self._timeout
        # Each settimeout is a system call: keep one that is close enough.
        if current is None or abs(timeout - current) > SLACK_S or (timeout == 0) != (current == 0):
            self.sock.settimeout(timeout)
            self._timeout = timeout
