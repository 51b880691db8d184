"""A message as the broker keeps it, and the id generator.

Ids are 16 ASCII hex characters, as nsqd's (docs/nsqd-facts.md
section 1): here a counter, so they are unique for the broker's life and cheap to make.
"""

from __future__ import annotations

import itertools
import time

QUEUED = 0
IN_FLIGHT = 1
DEFERRED = 2
DONE = 3


#: Identifies each timer entry (in-flight deadline or deferral) so that stale ones,
#: left behind by FIN/REQ/TOUCH, are recognised and skipped.
timer_tokens = itertools.count(1)


class BrokerMessage:
    """One message in one channel (each channel holds its own copy, as nsqd's do)."""

    __slots__ = (
        "attempts",
        "body",
        "client",
        "defer_ms",
        "delivered_at",
        "id",
        "state",
        "timestamp",
        "token",
    )

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, defer_ms: int = 0) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp  # ns since the epoch, at publish time
        self.attempts = 0  # incremented on each delivery
        self.defer_ms = defer_ms  # DPUB deferral still to apply when it reaches a channel
        self.state = QUEUED
        self.token = 0  # identifies the live timer entry (in-flight timeout or deferral)
        self.client: object | None = None  # the connection it is in flight to
        self.delivered_at = 0.0  # loop time of the last delivery

    def copy(self) -> BrokerMessage:
        return BrokerMessage(self.id, self.body, self.timestamp, self.defer_ms)


class IdGenerator:
    """Message ids: 16 lowercase hex digits from a counter seeded by the clock."""

    def __init__(self) -> None:
        # Seeded from the clock so ids of successive brokers (tests) rarely collide.
        self._counter = itertools.count((time.time_ns() >> 12) & 0x0FFF_FFFF_FFFF_FFFF)

    def next_ids(self, n: int) -> list[bytes]:
        counter = self._counter
        return [b"%016x" % next(counter) for _ in range(n)]


#: A queued message: a fresh ``(id, body, timestamp)`` tuple never delivered yet (shared
#: by all channels), or a BrokerMessage (requeued, deferred, or a DPUB).
Item = tuple[bytes, bytes, int] | BrokerMessage


def now_ns() -> int:
    return time.time_ns()
