"""NSQ as deployed, for tests: an nsqlookupd and N nsqds registered with it.

- :class:`NSQTopology` (the ``nsq_topology`` fixture's value) holds the lookupd
  (:class:`~.handles.NSQLookupdServer`), the nsqds (:class:`~.handles.NSQDServer`) and
  the address lists a connection or Spark option takes. Its helpers work against the
  embedded servers and real daemons alike: they only use nsqlookupd's HTTP API and TCP
  protocol, and nsqd's HTTP API.
- :class:`EmbeddedTopology` runs it in-process: an embedded nsqlookupd and N embedded
  nsqds registered with it, each in its own background thread (for demos, benchmarks
  and tests, with no pytest)::

    with EmbeddedTopology(n=3) as topology:
        for nsqd in topology.nsqds:
            nsqd.publish("events", b"hello")
        topology.wait_for_producers("events")
        consume_from(topology.lookupd_http_addresses)  # ["127.0.0.1:PORT"]
"""

from __future__ import annotations

import unittest
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .broker import EmbeddedNSQD
from .handles import NSQDServer, NSQLookupdServer
from .lookupd import EmbeddedNSQLookupd
from .polling import wait_for
from .servers.lifecycle import StartStop

__all__ = ["EmbeddedTopology", "NSQTopology", "registered_with"]


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


class EmbeddedTopology(StartStop):
    """An :class:`EmbeddedNSQLookupd` and ``n`` :class:`EmbeddedNSQD` registered with it.

    ``broker_options`` are :class:`~.broker.BrokerOptions` fields for every nsqd. With
    ``lookupd_tcp_address`` the nsqds register with that (e.g. a real) nsqlookupd instead
    and no lookupd is started (``lookupd`` is None). ``stop()`` stops the nsqds first,
    so none of them logs a lost lookupd.
    """

    def __init__(
        self, n: int = 2, *, lookupd_tcp_address: str | None = None, **broker_options: Any
    ) -> None:
        if n < 1:
            raise ValueError(f"a topology needs at least one nsqd, got n={n}")
        self.n = n
        self.broker_options = broker_options
        self.external_lookupd = lookupd_tcp_address
        self.lookupd: EmbeddedNSQLookupd | None = None
        self.nsqds: list[EmbeddedNSQD] = []

    @property
    def lookupd_tcp_address(self) -> str:
        if self.external_lookupd is not None:
            return self.external_lookupd
        if self.lookupd is None:
            raise RuntimeError("the topology is not running; call start() first")
        return self.lookupd.tcp_address

    @property
    def lookupd_http_addresses(self) -> list[str]:
        """For ``lookupd_http_addresses`` (only with the embedded lookupd)."""
        if self.lookupd is None:
            raise RuntimeError("no embedded lookupd: ask the external one's HTTP address")
        return [self.lookupd.http_address]

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        return [n.tcp_address for n in self.nsqds]

    def start(self) -> EmbeddedTopology:
        try:
            if self.external_lookupd is None:
                self.lookupd = EmbeddedNSQLookupd().start()
            for _ in range(self.n):
                nsqd = EmbeddedNSQD(
                    lookupd_tcp_addresses=[self.lookupd_tcp_address], **self.broker_options
                )
                # start() returns once the nsqd is registered with the lookupd.
                self.nsqds.append(nsqd.start())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for nsqd in reversed(self.nsqds):
            nsqd.stop()
        self.nsqds.clear()
        if self.lookupd is not None:
            self.lookupd.stop()
            self.lookupd = None

    def wait_for_producers(
        self, topic: str, count: int | None = None, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Until the embedded lookupd lists ``count`` (default: all) producers of
        ``topic``; returns them (an ``AssertionError`` after ``timeout`` seconds)."""
        if self.lookupd is None:
            raise RuntimeError("no embedded lookupd to ask")
        lookupd = self.lookupd
        wanted = self.n if count is None else count

        def enough() -> list[dict[str, Any]]:
            found = lookupd.producers(topic)
            return found if len(found) >= wanted else []

        return wait_for(enough, timeout, 0.01, message=f"{wanted} producers of {topic!r} listed")

    def __repr__(self) -> str:
        return f"EmbeddedTopology(lookupd={self.lookupd!r}, nsqds={self.nsqds!r})"
