"""A TCP proxy that records both directions, like the recorder's (README.md), for tests.

Forwards every byte at once; records what the client (an nsqd) sent and what the
server (an nsqlookupd) answered, per connection; can cut a connection (both sides), as
the recorder did in ``nsqd_reconnect``. Binds 127.0.0.1 only.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass
class ProxiedConnection:
    client: socket.socket
    server: socket.socket
    sent: bytearray = field(default_factory=bytearray)  # client -> server
    received: bytearray = field(default_factory=bytearray)  # server -> client
    closed_by: str | None = None  # "client", "server" or "proxy"
    #: This connection as the server sees it (its ``remote_address``).
    server_address: str = ""

    def __post_init__(self) -> None:
        host, port = self.server.getsockname()[:2]
        self.server_address = f"{host}:{port}"

    def cut(self) -> None:
        self.closed_by = self.closed_by or "proxy"
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class RecordingProxy:
    """``RecordingProxy(upstream).start()``; point the nsqd at :attr:`address`."""

    def __init__(self, upstream: tuple[str, int], port: int = 0) -> None:
        self.upstream = upstream
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.connections: list[ProxiedConnection] = []
        self.changed = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stopping = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RecordingProxy:
        self._spawn(self._accept)
        return self

    def stop(self) -> None:
        self._stopping = True
        self.listener.close()
        for conn in list(self.connections):
            conn.cut()
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.05)  # closing a socket does not wake accept()
        while not self._stopping:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            server = socket.create_connection(self.upstream, timeout=5)
            server.settimeout(None)
            conn = ProxiedConnection(client, server)
            with self.changed:
                self.connections.append(conn)
                self.changed.notify_all()
            self._spawn(self._pump, conn, client, server, conn.sent, "client")
            self._spawn(self._pump, conn, server, client, conn.received, "server")

    def _pump(
        self,
        conn: ProxiedConnection,
        src: socket.socket,
        dst: socket.socket,
        record: bytearray,
        side: str,
    ) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                with self.changed:
                    conn.closed_by = conn.closed_by or side
                    self.changed.notify_all()
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            with self.changed:
                record += data
                self.changed.notify_all()
            try:
                dst.sendall(data)
            except OSError:
                return

    def wait_for(self, predicate: Callable[[], T], timeout: float = 10.0) -> T:
        """Until ``predicate()`` (run under the lock) is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not (result := predicate()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"proxy: condition not met within {timeout}s")
                self.changed.wait(remaining)
            return result
