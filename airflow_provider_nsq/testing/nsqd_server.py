"""An nsqd for a test (the ``nsqd`` fixture's value): addresses and HTTP helpers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .daemon_handle import DaemonHandle

if TYPE_CHECKING:
    from .broker import EmbeddedNSQD

__all__ = ["NSQDServer", "nsqd_server_for"]


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
