"""Run the broker in a background thread with its own event loop (for tests)."""

from __future__ import annotations

from typing import Any

from ..servers.embedded_daemon import EmbeddedDaemon
from .options import BrokerOptions
from .server import Broker


class EmbeddedNSQD(EmbeddedDaemon[BrokerOptions, Broker]):
    """An nsqd-compatible broker on free 127.0.0.1 ports, in a background thread.

    ::

        with EmbeddedNSQD(max_msg_size=1024) as nsqd:
            connect_to(nsqd.tcp_address)          # "127.0.0.1:PORT"
            urlopen(f"http://{nsqd.http_address}/ping")

    Keyword arguments are :class:`BrokerOptions` fields (nsqd's flag names with
    underscores). For tests and demos only: in memory, no disk persistence.
    """

    thread_name = "embedded-nsqd"

    def __init__(self, options: BrokerOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options or BrokerOptions(), kwargs, Broker)

    @property
    def broker(self) -> Broker | None:
        """The running broker (None when stopped): use it on its loop only, via :meth:`call`."""
        return self.daemon

    @property
    def https_port(self) -> int | None:
        return self._started().https_port

    @property
    def https_address(self) -> str | None:
        port = self.https_port
        return f"{self.host}:{port}" if port else None

    # -- thread-safe access ------------------------------------------------------------

    def stats(self, topic: str | None = None, channel: str | None = None) -> dict[str, Any]:
        """The ``/stats?format=json`` document, read without HTTP."""
        return self.call(lambda b: b.stats(topic, channel))

    def publish(self, topic: str, *bodies: bytes, defer_ms: int = 0) -> None:
        """Publish directly (no TCP), e.g. to prepare a test."""
        self.call(lambda b: b.get_topic(topic).publish(list(bodies), defer_ms))
