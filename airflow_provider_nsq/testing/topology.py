"""NSQ as deployed, for tests: an nsqlookupd and N nsqds registered with it.

:class:`NSQTopology` (the ``nsq_topology`` fixture's value) holds the lookupd
(:class:`~.lookupd_server.NSQLookupdServer`), the nsqds
(:class:`~.nsqd_server.NSQDServer`) and the address lists a connection or Spark option
takes. The same helpers work against the embedded servers and real daemons: they only
use nsqlookupd's HTTP API and TCP protocol, and nsqd's HTTP API.
"""

from __future__ import annotations

import unittest
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .lookupd_server import NSQLookupdServer
from .nsqd_server import NSQDServer

if TYPE_CHECKING:
    from .broker import EmbeddedNSQD

__all__ = ["NSQTopology", "registered_with"]


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
        the test (``unittest.SkipTest``, which pytest reports as a skip) when the nsqds
        are real daemons."""
        broker = self.brokers[index] if index < len(self.brokers) else None
        if broker is None:
            raise unittest.SkipTest("stopping an nsqd needs the embedded topology")
        broker.stop()


def registered_with(lookupd: NSQLookupdServer, nsqds: list[NSQDServer]) -> Callable[[], bool]:
    """A predicate: every nsqd is among the lookupd's ``/nodes`` (by its TCP port)."""

    def all_registered() -> bool:
        ports = {node["tcp_port"] for node in lookupd.nodes()}
        return all(n.tcp_port in ports for n in nsqds)

    return all_registered
