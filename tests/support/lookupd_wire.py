"""A raw-socket ``"  V1"`` peer for lookupd tests: send bytes, read replies, see closes.

Deliberately independent of ``airflow_provider_nsq.testing.wire.registration``: the lookupd is
checked against the recorded bytes, not against our own codec.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

MAGIC = b"  V1"


def identify_bytes(**fields: Any) -> bytes:
    body = json.dumps(dict(sorted(fields.items())), separators=(",", ":")).encode()
    return b"IDENTIFY\n" + struct.pack(">I", len(body)) + body


RAW_CLIENT = {
    "broadcast_address": "127.0.0.1",
    "hostname": "raw-client",
    "http_port": 4151,
    "tcp_port": 4150,
    "version": "1.3.0",
}


class V1Peer:
    """One registration connection to a lookupd."""

    def __init__(self, address: tuple[str, int], timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.closed: str | None = None  # "eof" or "reset" once seen
        self.closed_by_us = False
        host, port = self.sock.getsockname()[:2]
        #: How the lookupd sees this connection (``remote_address``).
        self.local_address = f"{host}:{port}"

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown_write(self) -> None:
        self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.closed_by_us = True
        self.sock.close()

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or self.closed:
            return False
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except ConnectionResetError:
            self.closed = "reset"
            return True
        if not data:
            self.closed = "eof"
            return True
        self.buf += data
        return True

    def read_reply(self, timeout: float = 5.0) -> bytes:
        """One ``[u32be size][data]`` reply's data."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack_from(">I", self.buf)
                if len(self.buf) >= 4 + size:
                    data = bytes(self.buf[4 : 4 + size])
                    del self.buf[: 4 + size]
                    return data
            if not self._fill(deadline):
                raise AssertionError(
                    f"no complete reply within {timeout}s (closed={self.closed}, "
                    f"buffered={bytes(self.buf)!r})"
                )

    def command(self, data: bytes, timeout: float = 5.0) -> bytes:
        self.send(data)
        return self.read_reply(timeout)

    def expect_closed(self, timeout: float = 5.0) -> str:
        """Wait for the server to close; returns ``"eof"`` or ``"reset"``."""
        deadline = time.monotonic() + timeout
        while self.closed is None:
            if not self._fill(deadline):
                raise AssertionError(f"connection still open after {timeout}s")
        assert not self.buf, f"unexpected bytes before the close: {bytes(self.buf)!r}"
        return self.closed

    def expect_nothing(self, seconds: float) -> None:
        """Nothing arrives and the connection stays open for ``seconds``."""
        deadline = time.monotonic() + seconds
        while self._fill(deadline):
            pass
        assert not self.buf and self.closed is None, (bytes(self.buf), self.closed)
