"""A raw-socket NSQ peer for broker tests: send bytes, read frames, see how it closes.

Deliberately independent of ``airflow_provider_nsq.client``: the broker is checked
against the recorded bytes, not against our own client.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable

from airflow_provider_nsq.protocol.compression import DeflateCodec, SnappyCodec

MAGIC = b"  V2"


def cmd(line: str | bytes, body: bytes | None = None) -> bytes:
    """One command: the line, ``\\n``, and ``[u32be len][body]`` when there is a body."""
    raw = line.encode() if isinstance(line, str) else line
    out = raw + b"\n"
    if body is not None:
        out += struct.pack(">I", len(body)) + body
    return out


def mpub_body(*messages: bytes) -> bytes:
    return struct.pack(">I", len(messages)) + b"".join(
        struct.pack(">I", len(m)) + m for m in messages
    )


class Frame:
    __slots__ = ("at", "data", "type")

    def __init__(self, ftype: int, data: bytes, at: float) -> None:
        self.type = ftype
        self.data = data
        self.at = at  # time.monotonic() when it was decoded

    @property
    def attempts(self) -> int:
        return int(struct.unpack_from(">H", self.data, 8)[0])

    @property
    def timestamp(self) -> int:
        return int(struct.unpack_from(">q", self.data, 0)[0])

    @property
    def msg_id(self) -> bytes:
        return self.data[10:26]

    @property
    def body(self) -> bytes:
        return self.data[26:]

    def __repr__(self) -> str:
        return f"Frame({self.type}, {self.data[:80]!r})"


class Peer:
    """One client connection to the broker."""

    def __init__(self, address: tuple[str, int], timeout: float = 5.0) -> None:
        self.sock: socket.socket = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()  # decoded (decrypted, decompressed) bytes not yet framed
        self.closed: str | None = None  # "eof" or "reset" once seen
        self._compress: Callable[[bytes], bytes] | None = None
        self._decompress: Callable[[bytes], bytes] | None = None

    # -- sending ---------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if self._compress is not None:
            data = self._compress(data)
        self.sock.sendall(data)

    def send_quietly(self, data: bytes) -> None:
        """Send, ignoring a connection the server already closed (EPIPE/RST)."""
        try:
            self.send(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    # -- upgrades --------------------------------------------------------------------

    def start_tls(self, context: ssl.SSLContext, server_hostname: str = "127.0.0.1") -> None:
        assert not self.buf, f"plaintext bytes pending before TLS: {bytes(self.buf)!r}"
        self.sock = context.wrap_socket(self.sock, server_hostname=server_hostname)

    def start_compression(self, kind: str, level: int = 6) -> None:
        codec = SnappyCodec() if kind == "snappy" else DeflateCodec(level)
        self._compress = codec.compress
        self._decompress = codec.decompress
        # Whatever came after the last plain frame is already compressed.
        rest = bytes(self.buf)
        self.buf.clear()
        if rest:
            self.buf += codec.decompress(rest)

    # -- reading ---------------------------------------------------------------------

    def _fill(self, deadline: float) -> bool:
        """Read more; False on timeout. Sets ``closed`` on EOF or reset."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(262144)
        except TimeoutError:
            return False
        except ConnectionResetError:
            self.closed = "reset"
            return True
        except ssl.SSLError:
            self.closed = "eof"
            return True
        if not data:
            self.closed = "eof"
            return True
        if self._decompress is not None:
            data = self._decompress(data)
        self.buf += data
        return True

    def _take_frame(self) -> Frame | None:
        if len(self.buf) < 8:
            return None
        size, ftype = struct.unpack_from(">II", self.buf, 0)
        if len(self.buf) < 4 + size:
            return None
        data = bytes(self.buf[8 : 4 + size])
        del self.buf[: 4 + size]
        return Frame(ftype, data, time.monotonic())

    def read_frame(self, timeout: float = 5.0) -> Frame:
        deadline = time.monotonic() + timeout
        while True:
            frame = self._take_frame()
            if frame is not None:
                return frame
            if self.closed:
                raise AssertionError(f"connection closed ({self.closed}) while waiting for a frame")
            if not self._fill(deadline):
                raise AssertionError(f"no frame within {timeout}s (buffered {bytes(self.buf)!r})")

    def read_frames(self, n: int, timeout: float = 5.0) -> list[Frame]:
        deadline = time.monotonic() + timeout
        return [self.read_frame(max(0.001, deadline - time.monotonic())) for _ in range(n)]

    def expect_nothing(self, seconds: float) -> None:
        """Assert no frame arrives and the connection stays open for ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            frame = self._take_frame()
            assert frame is None, f"unexpected frame {frame!r}"
            assert not self.closed, f"connection closed ({self.closed})"
            self._fill(deadline)
        frame = self._take_frame()
        assert frame is None, f"unexpected frame {frame!r}"
        assert not self.closed, f"connection closed ({self.closed})"

    def expect_closed(self, timeout: float = 5.0) -> str:
        """Wait for the server to close; return "eof" or "reset"."""
        deadline = time.monotonic() + timeout
        while not self.closed:
            frame = self._take_frame()
            assert frame is None, f"unexpected frame {frame!r} before the close"
            if not self._fill(deadline):
                raise AssertionError(f"connection still open after {timeout}s")
        assert not self.buf, f"unread bytes before the close: {bytes(self.buf)!r}"
        return self.closed

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(address: tuple[str, int], magic: bytes = MAGIC) -> Peer:
    peer = Peer(address)
    peer.send(magic)
    return peer
