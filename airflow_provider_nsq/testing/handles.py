"""The handles a fixture gives, for embedded and real daemons alike: an nsqd
(:class:`NSQDServer`, the ``nsqd`` fixture's value), an nsqlookupd
(:class:`NSQLookupdServer`, the ``nsqlookupd`` fixture's value) and what both share
(:class:`DaemonHandle`: addresses and one-request helpers over the HTTP API).

Requests go through the client's own HTTP/1.1 client
(:func:`airflow_provider_nsq.client.transport.http_request.http_request`, on h11), with
the ``Accept`` header nsqd's and nsqlookupd's clients send. :meth:`NSQLookupdServer.announce`
registers a producer over nsqlookupd's ``"  V1"`` protocol as an nsqd would (e.g. one
nobody can reach). The helpers only use the daemons' HTTP API and TCP protocol, so they
work against the embedded daemons and real ones alike.
"""

from __future__ import annotations

import json
import socket
import ssl
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from ..client.transport.http_request import NSQ_V1_ACCEPT, http_request
from ..protocol.errors import NSQError
from .polling import wait_for
from .servers.addresses import DaemonAddresses
from .wire.registration import (
    MAGIC_V1,
    ReplyReader,
    encode_identify,
    encode_register,
    is_error_reply,
)

if TYPE_CHECKING:
    from .broker import EmbeddedNSQD
    from .lookupd import EmbeddedNSQLookupd

__all__ = [
    "Announcement",
    "DaemonHandle",
    "NSQDServer",
    "NSQLookupdServer",
    "lookupd_server_for",
    "nsqd_server_for",
]

#: The bound on one request of a test helper.
HTTP_TIMEOUT_S = 10.0


def _unverified_context() -> ssl.SSLContext:
    # The embedded broker serves HTTPS with a throw-away certificate.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class DaemonHandle(DaemonAddresses):
    """A daemon's addresses and one-request helpers over its HTTP API.

    ``embedded`` is True when the daemon is an embedded one run by the test session,
    False for a real daemon named by the environment. ``https`` asks the HTTP API over
    TLS (without verifying the certificate: tests use throw-away ones).
    """

    def __init__(
        self,
        host: str,
        tcp_port: int,
        http_port: int,
        *,
        embedded: bool,
        http_host: str | None = None,
        https: bool = False,
    ) -> None:
        self.host = host
        self.http_host = http_host or host
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.embedded = embedded
        self.https = https

    def __repr__(self) -> str:
        kind = "embedded" if self.embedded else "external"
        name = type(self).__name__
        return f"{name}({kind}, tcp={self.tcp_address}, http={self.http_address})"

    # -- HTTP --------------------------------------------------------------------------

    def http(
        self, method: str, path: str, query: dict[str, Any] | None = None, body: bytes = b""
    ) -> tuple[int, bytes]:
        """One request to the HTTP API; returns (status, body) whatever the status."""
        target = path + ("?" + urlencode(query) if query else "")
        response = http_request(
            self.http_host,
            self.http_port,
            target,
            timeout=HTTP_TIMEOUT_S,
            method=method,
            headers=[("Accept", NSQ_V1_ACCEPT)],
            body=body,
            ssl_context=_unverified_context() if self.https else None,
        )
        return response.status, response.body

    def _get_json(self, path: str, query: dict[str, Any] | None = None) -> Any:
        status, data = self.http("GET", path, query)
        if status != 200:
            raise AssertionError(f"GET {path} {query or ''} -> {status} {data[:200]!r}")
        return json.loads(data)

    def _post(
        self, path: str, query: dict[str, Any], body: bytes = b"", ok: tuple[int, ...] = (200,)
    ) -> None:
        status, data = self.http("POST", path, query, body)
        if status not in ok:
            raise AssertionError(f"POST {path} {query} -> {status} {data[:200]!r}")

    # -- waiting -------------------------------------------------------------------------

    wait_for = staticmethod(wait_for)


class NSQDServer(DaemonHandle):
    """An NSQ server for a test: its addresses and a few HTTP helpers.

    Works the same against the embedded broker (``embedded=True``, ``broker`` is the
    :class:`~airflow_provider_nsq.testing.broker.EmbeddedNSQD`) and a real nsqd
    (``embedded=False``, ``broker=None``): the helpers only use nsqd's HTTP API.
    """

    def __init__(
        self,
        host: str,
        tcp_port: int,
        http_port: int,
        broker: EmbeddedNSQD | None = None,
        http_scheme: str = "http",
        http_host: str | None = None,
    ) -> None:
        super().__init__(
            host,
            tcp_port,
            http_port,
            embedded=broker is not None,
            http_host=http_host,
            https=http_scheme == "https",
        )
        self.broker = broker

    def stats(self, topic: str | None = None) -> dict[str, Any]:
        """``/stats?format=json`` (nsqd 1.3 shape: ``version``, ``topics`` ... at the top)."""
        query: dict[str, Any] = {"format": "json"}
        if topic is not None:
            query["topic"] = topic
        status, data = self.http("GET", "/stats", query)
        if status != 200:
            raise AssertionError(f"GET /stats -> {status} {data[:200]!r}")
        doc: dict[str, Any] = json.loads(data)
        return doc.get("data", doc)  # nsqd < 1.0 wrapped it in "data"

    def topic_stats(self, topic: str) -> dict[str, Any] | None:
        for t in self.stats(topic).get("topics") or []:
            if t.get("topic_name") == topic:
                return t
        return None

    def channel_stats(self, topic: str, channel: str) -> dict[str, Any] | None:
        t = self.topic_stats(topic)
        for c in (t or {}).get("channels") or []:
            if c.get("channel_name") == channel:
                return c
        return None

    def http_publish(self, topic: str, body: bytes, defer_ms: int | None = None) -> None:
        query: dict[str, Any] = {"topic": topic}
        if defer_ms is not None:
            query["defer"] = defer_ms
        self._post("/pub", query, body)

    def create_topic(self, topic: str) -> None:
        self._post("/topic/create", {"topic": topic})

    def create_channel(self, topic: str, channel: str) -> None:
        """Create the topic and the channel, so messages published from now on wait."""
        self.create_topic(topic)
        self._post("/channel/create", {"topic": topic, "channel": channel})

    def delete_topic(self, topic: str) -> None:
        self._post("/topic/delete", {"topic": topic}, ok=(200, 404))


def nsqd_server_for(broker: EmbeddedNSQD) -> NSQDServer:
    """The handle of a running embedded broker (its HTTPS API when it requires TLS)."""
    if broker.options.http_tls_required and broker.https_port:
        return NSQDServer(broker.host, broker.tcp_port, broker.https_port, broker, "https")
    return NSQDServer(broker.host, broker.tcp_port, broker.http_port, broker)


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
