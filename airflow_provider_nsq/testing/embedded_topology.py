"""NSQ as deployed, in-process: an embedded nsqlookupd and N embedded nsqds registered
with it, each in its own background thread (for demos, benchmarks and tests).

::

    with EmbeddedTopology(n=3) as topology:
        for nsqd in topology.nsqds:
            nsqd.publish("events", b"hello")
        topology.wait_for_producers("events")
        consume_from(topology.lookupd_http_addresses)  # ["127.0.0.1:PORT"]

The pytest fixture ``nsq_topology`` builds the same (or uses real daemons).
"""

from __future__ import annotations

import time
from typing import Any

from .broker import EmbeddedNSQD
from .lookupd import EmbeddedNSQLookupd
from .servers.lifecycle import StartStop


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
        ``topic``; returns them."""
        if self.lookupd is None:
            raise RuntimeError("no embedded lookupd to ask")
        wanted = self.n if count is None else count
        deadline = time.monotonic() + timeout
        while len(found := self.lookupd.producers(topic)) < wanted:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{len(found)} of {wanted} producers of {topic!r} listed after {timeout}s"
                )
            time.sleep(0.01)
        return found

    def __repr__(self) -> str:
        return f"EmbeddedTopology(lookupd={self.lookupd!r}, nsqds={self.nsqds!r})"
