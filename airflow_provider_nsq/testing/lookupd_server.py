"""An nsqlookupd for a test (the ``nsqlookupd`` fixture's value): addresses, helpers over
its HTTP API, and :meth:`~NSQLookupdServer.announce`, which registers a producer over the
``"  V1"`` protocol as an nsqd would (e.g. one nobody can reach).

The helpers work against the embedded lookupd and a real nsqlookupd alike: they only use
nsqlookupd's HTTP API and TCP protocol.
"""

from __future__ import annotations

import json
import socket
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..protocol.errors import NSQError
from .daemon_handle import DaemonHandle
from .wire.registration import (
    MAGIC_V1,
    ReplyReader,
    encode_identify,
    encode_register,
    is_error_reply,
)

if TYPE_CHECKING:
    from .lookupd import EmbeddedNSQLookupd

__all__ = ["Announcement", "NSQLookupdServer", "lookupd_server_for"]


class NSQLookupdServer(DaemonHandle):
    """An nsqlookupd for a test: addresses and helpers over its HTTP API.

    ``embedded`` is True for the embedded lookupd (``server`` is the
    :class:`~airflow_provider_nsq.testing.lookupd.EmbeddedNSQLookupd`), False for a real
    one (``server`` is None). ``tcp_address`` is where nsqds register (nsqd's
    ``--lookupd-tcp-address``), ``http_address`` where consumers look topics up
    (``lookupd_http_addresses``).
    """

    def __init__(
        self,
        host: str,
        tcp_port: int,
        http_port: int,
        server: EmbeddedNSQLookupd | None = None,
        http_host: str | None = None,
    ) -> None:
        super().__init__(
            host, tcp_port, http_port, embedded=server is not None, http_host=http_host
        )
        self.server = server

    def ping(self) -> bool:
        """Whether the lookupd answers ``/ping`` with ``OK``."""
        try:
            return self.http("GET", "/ping") == (200, b"OK")
        except (OSError, NSQError):
            return False

    def lookup(self, topic: str) -> dict[str, Any] | None:
        """``/lookup?topic=``: ``{"channels": [...], "producers": [...]}``, or None when
        the lookupd has never heard of the topic (404 ``TOPIC_NOT_FOUND``)."""
        status, body = self.http("GET", "/lookup", {"topic": topic})
        if status == 404:
            return None
        if status != 200:
            raise AssertionError(f"GET /lookup?topic={topic} -> {status} {body[:200]!r}")
        doc: dict[str, Any] = json.loads(body)
        return doc

    def producers(self, topic: str) -> list[dict[str, Any]]:
        """The topic's producers now listed (``[]`` for an unknown topic)."""
        doc = self.lookup(topic)
        return list(doc["producers"]) if doc else []

    def topics(self) -> list[str]:
        return list(self._get_json("/topics")["topics"])

    def channels(self, topic: str) -> list[str]:
        return list(self._get_json("/channels", {"topic": topic})["channels"])

    def nodes(self) -> list[dict[str, Any]]:
        """``/nodes``: every identified nsqd with its ``topics`` and ``tombstones``."""
        return list(self._get_json("/nodes")["producers"])

    def create_topic(self, topic: str) -> None:
        self._post("/topic/create", {"topic": topic})

    def create_channel(self, topic: str, channel: str) -> None:
        """Known to the lookupd only: nsqds creating ``topic`` later pre-create it."""
        self._post("/channel/create", {"topic": topic, "channel": channel})

    def delete_topic(self, topic: str) -> None:
        """From the lookupd's registry only (no nsqd is told, as in nsqlookupd)."""
        self._post("/topic/delete", {"topic": topic})

    def delete_channel(self, topic: str, channel: str) -> None:
        self._post("/channel/delete", {"topic": topic, "channel": channel}, ok=(200, 404))

    def tombstone(self, topic: str, node: str) -> None:
        """Hide the producer ``node`` (``broadcast_address:http_port``) of ``topic`` from
        ``/lookup`` for the lookupd's tombstone lifetime."""
        self._post("/topic/tombstone", {"topic": topic, "node": node})

    # -- waiting -------------------------------------------------------------------------

    def wait_for_producers(
        self, topic: str, count: int = 1, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Until ``/lookup`` lists at least ``count`` producers of ``topic``."""

        def enough() -> list[dict[str, Any]]:
            found = self.producers(topic)
            return found if len(found) >= count else []

        enough.__name__ = f"{count}_producers_of_{topic}"
        return self.wait_for(enough, timeout)

    # -- registering like an nsqd ---------------------------------------------------------

    def announce(
        self,
        topic: str,
        channel: str | None = None,
        *,
        tcp_port: int,
        http_port: int | None = None,
        broadcast_address: str = "127.0.0.1",
        hostname: str = "announced-by-test",
    ) -> Announcement:
        """Register a producer of ``topic`` (and ``channel``) as an nsqd would, over the
        TCP protocol; it stays listed until the returned handle is closed. With a
        ``tcp_port`` nothing listens on, it is an nsqd that lookupds list and nobody
        can reach. Works with a real nsqlookupd too (give its TCP address)."""
        sock = socket.create_connection((self.host, self.tcp_port), timeout=10)
        reader = ReplyReader()

        def command(data: bytes) -> bytes:
            sock.sendall(data)
            while (reply := reader.next_reply()) is None:
                chunk = sock.recv(65536)
                if not chunk:
                    raise AssertionError(f"nsqlookupd {self.tcp_address} closed the connection")
                reader.feed(chunk)
            if is_error_reply(reply):
                raise AssertionError(f"nsqlookupd {self.tcp_address} answered {reply!r}")
            return reply

        try:
            sock.sendall(MAGIC_V1)
            command(
                encode_identify(
                    {
                        "broadcast_address": broadcast_address,
                        "hostname": hostname,
                        "http_port": http_port or tcp_port + 1,
                        "tcp_port": tcp_port,
                        "version": "1.3.0",
                    }
                )
            )
            command(encode_register(topic, channel))
        except BaseException:
            sock.close()
            raise
        return Announcement(sock, f"{broadcast_address}:{tcp_port}")


class Announcement:
    """A producer registered by :meth:`NSQLookupdServer.announce`; close to withdraw it
    (the lookupd drops it as its connection closes)."""

    def __init__(self, sock: socket.socket, tcp_address: str) -> None:
        self._sock = sock
        self.tcp_address = tcp_address

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Announcement:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def lookupd_server_for(server: EmbeddedNSQLookupd) -> NSQLookupdServer:
    """The handle of a running embedded lookupd."""
    return NSQLookupdServer(server.host, server.tcp_port, server.http_port, server)
