"""Bookkeeping for the delivery guarantee tests: which messages a publisher was told OK,
which met an error on the way, and what nsqd actually holds."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from airflow_provider_nsq.client import ClientConfig, NSQConnection
from airflow_provider_nsq.protocol import NSQError

RETRIES = 100


@dataclass
class Ledger:
    """One run's publishes: ``acked`` got nsqd's OK; ``errored`` met at least one error
    (and was retried) before that."""

    name: str
    acked: set[bytes] = field(default_factory=set)
    errored: set[bytes] = field(default_factory=set)
    calls: int = 0  # publish calls that returned OK (an MPUB is one call)
    errors: int = 0  # calls that raised
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def publish(self, bodies: list[bytes], call: Callable[[], object]) -> None:
        """Run ``call`` (which publishes ``bodies``) until it returns, retrying on NSQError."""
        for _ in range(RETRIES):
            try:
                call()
            except NSQError:
                with self._lock:
                    self.errors += 1
                    self.errored.update(bodies)
                continue
            with self._lock:
                self.calls += 1
                self.acked.update(bodies)
            return
        raise AssertionError(f"{self.name}: gave up after {RETRIES} attempts")

    async def apublish(self, bodies: list[bytes], call: Callable[[], Awaitable[object]]) -> None:
        for _ in range(RETRIES):
            try:
                await call()
            except NSQError:
                self.errors += 1
                self.errored.update(bodies)
                continue
            self.calls += 1
            self.acked.update(bodies)
            return
        raise AssertionError(f"{self.name}: gave up after {RETRIES} attempts")


@dataclass
class Outcome:
    """What nsqd held against what the publishers were told."""

    published: int  # distinct messages acked
    received: int  # messages read back, duplicates included
    lost: int  # acked, never read back
    duplicated: int  # read back more than once
    duplicated_without_error: int  # ... although every publish of it went through first time
    unexpected: int  # read back, never published by this test


def reconcile(ledgers: list[Ledger], received: Counter[bytes]) -> Outcome:
    acked = set().union(*(lg.acked for lg in ledgers))
    errored = set().union(*(lg.errored for lg in ledgers))
    dups = {body for body, n in received.items() if n > 1}
    return Outcome(
        published=len(acked),
        received=sum(received.values()),
        lost=len(acked - received.keys()),
        duplicated=len(dups),
        duplicated_without_error=len(dups - errored),
        unexpected=len(received.keys() - acked - errored),
    )


def drain(host: str, port: int, topic: str, channel: str, quiet: float = 1.0) -> Counter[bytes]:
    """Read and FIN everything on ``topic/channel`` until nothing arrives for ``quiet`` s."""
    got: Counter[bytes] = Counter()
    config = ClientConfig(host=host, port=port, read_timeout=10, heartbeat_interval_ms=5000)
    with NSQConnection(config) as conn:
        conn.subscribe(topic, channel)
        conn.ready(2500)
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < quiet:
            messages = conn.read_messages(0.2)
            if messages:
                got.update(m.body for m in messages)
                conn.finish(*messages)
                idle_since = time.monotonic()
        conn.start_close()
    return got


def run_async(coro: Awaitable[object]) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]
