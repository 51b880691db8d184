"""NSQ as deployed, for tests: an nsqlookupd and N nsqds registered with it.

- :class:`NSQLookupdServer`: an nsqlookupd's addresses and HTTP helpers (``lookup``,
  ``producers``, ``topics``, ``channels``, ``nodes``, the admin POSTs,
  ``wait_for_producers``) and :meth:`~NSQLookupdServer.announce`, which registers a
  producer over the ``"  V1"`` protocol as an nsqd would (e.g. one nobody can reach).
- :class:`NSQTopology`: the lookupd, the nsqds (:class:`~.pytest_plugin.NSQDServer`)
  and the address lists a connection or Spark option takes.

The same helpers work against the embedded servers and real daemons: they only use
nsqlookupd's HTTP API and TCP protocol, and nsqd's HTTP API. The pytest fixtures
``nsqlookupd`` and ``nsq_topology`` (:mod:`.pytest_plugin`) build them.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pytest

from .pytest_plugin import NSQDServer, http_exchange, wait_for

if TYPE_CHECKING:
    from .broker import EmbeddedNSQD
    from .lookupd import EmbeddedNSQLookupd


class NSQLookupdServer:
    """An nsqlookupd for a test: addresses and helpers over its HTTP API.

    ``embedded`` is True for the embedded lookupd (``server`` is the
    :class:`~airflow_provider_nsq.testing.lookupd.EmbeddedNSQLookupd`), False for a real
    one (``server`` is None).
    """

    def __init__(
        self,
        host: str,
        tcp_port: int,
        http_port: int,
        server: EmbeddedNSQLookupd | None = None,
        http_host: str | None = None,
    ) -> None:
        self.host = host
        self.http_host = http_host or host
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.server = server
        self.embedded = server is not None

    @property
    def tcp_address(self) -> str:
        """Where nsqds register (nsqd's ``--lookupd-tcp-address``)."""
        return f"{self.host}:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        """Where consumers look topics up (``lookupd_http_addresses``)."""
        return f"{self.http_host}:{self.http_port}"

    def __repr__(self) -> str:
        kind = "embedded" if self.embedded else "external"
        return f"NSQLookupdServer({kind}, tcp={self.tcp_address}, http={self.http_address})"

    # -- HTTP --------------------------------------------------------------------------

    def http(
        self, method: str, path: str, query: dict[str, Any] | None = None
    ) -> tuple[int, bytes]:
        """One request (with the v1 Accept header); returns (status, body) whatever the
        status."""
        return http_exchange(f"http://{self.http_address}", method, path, query)

    def _get_json(self, path: str, query: dict[str, Any] | None = None) -> Any:
        status, body = self.http("GET", path, query)
        if status != 200:
            raise AssertionError(f"GET {path} {query or ''} -> {status} {body[:200]!r}")
        return json.loads(body)

    def _post(self, path: str, query: dict[str, Any], ok: tuple[int, ...] = (200,)) -> None:
        status, body = self.http("POST", path, query)
        if status not in ok:
            raise AssertionError(f"POST {path} {query} -> {status} {body[:200]!r}")

    def ping(self) -> bool:
        try:
            return self.http("GET", "/ping") == (200, b"OK")
        except OSError:
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

    wait_for = staticmethod(wait_for)

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
        from .wire.registration import (
            MAGIC_V1,
            ReplyReader,
            encode_identify,
            encode_register,
            is_error_reply,
        )

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


@dataclass
class NSQTopology:
    """A lookupd and the nsqds registered with it.

    ``embedded`` is True when the nsqds are embedded brokers (then :meth:`stop_nsqd`
    works); the lookupd may still be a real one (``lookupd.embedded``).
    """

    lookupd: NSQLookupdServer
    nsqds: list[NSQDServer]
    brokers: list[EmbeddedNSQD | None] = field(default_factory=list)

    @property
    def embedded(self) -> bool:
        return all(b is not None for b in self.brokers)

    @property
    def lookupd_http_addresses(self) -> list[str]:
        """For the connection extra / Spark option ``lookupd_http_addresses``."""
        return [self.lookupd.http_address]

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        """For the connection extra ``nsqd_tcp_addresses`` (publisher failover)."""
        return [n.tcp_address for n in self.nsqds]

    @property
    def nsqd_http_addresses(self) -> list[str]:
        return [n.http_address for n in self.nsqds]

    def __repr__(self) -> str:
        return f"NSQTopology(lookupd={self.lookupd!r}, nsqds={self.nsqds!r})"

    def wait_for_producers(
        self, topic: str, count: int | None = None, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Until the lookupd lists ``count`` (default: every nsqd) producers of
        ``topic``: after publishing to each nsqd, before a consumer looks it up."""
        return self.lookupd.wait_for_producers(
            topic, len(self.nsqds) if count is None else count, timeout
        )

    def stop_nsqd(self, index: int) -> None:
        """Stop one embedded nsqd (its registration goes with its connection). Skips
        the test when the nsqds are real daemons."""
        broker = self.brokers[index] if index < len(self.brokers) else None
        if broker is None:
            pytest.skip("stopping an nsqd needs the embedded topology")
        broker.stop()


def registered_with(lookupd: NSQLookupdServer, nsqds: list[NSQDServer]) -> Callable[[], bool]:
    """A predicate: every nsqd is among the lookupd's ``/nodes`` (by its TCP port)."""

    def all_registered() -> bool:
        ports = {node["tcp_port"] for node in lookupd.nodes()}
        return all(n.tcp_port in ports for n in nsqds)

    return all_registered
