"""nsqlookupd's registration DB: keys, and the producers registered under each.

As ``nsqlookupd/registration_db.go`` 1.3.0 keeps it
(docs/nsqlookupd-facts.md sections 4 and 7):

- A key is ``(category, key, subkey)``: ``("client", "", "")`` for every identified
  connection, ``("topic", T, "")`` and ``("channel", T, C)``. REGISTER, ``/topic/create``
  and ``/channel/create`` create keys; removing a producer never removes its key (only
  the admin deletes, and an UNREGISTER emptying an ``#ephemeral`` key, do).
- Producers are keyed by their connection's remote address (``id``), so the same nsqd
  on two connections is two producers.
- Each key holds its own :class:`Producer` entry around the connection's shared
  :class:`PeerInfo`: a tombstone marks one topic's entry, and an UNREGISTER throws it away.
- Liveness: a producer whose last IDENTIFY or PING is older than the inactive-producer
  timeout is filtered out (REGISTER does not count); a tombstone hides it from
  ``/lookup`` for the tombstone lifetime.

Single-threaded: it lives on the lookupd's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: Go's zero ``time.Time`` run through ``UnixNano()``: ``/debug``'s ``tombstoned_at`` for a
#: producer that was never tombstoned (docs/nsqlookupd-facts.md
#: section 2).
GO_ZERO_TIME_UNIX_NANO = -6795364578871345152


@dataclass(frozen=True, slots=True)
class Registration:
    category: str  # "client", "topic" or "channel"
    key: str
    subkey: str

    def matches(self, category: str, key: str, subkey: str) -> bool:
        """``"*"`` matches any key or subkey, as ``Registration.IsMatch``."""
        return (
            self.category == category
            and (key == "*" or self.key == key)
            and (subkey == "*" or self.subkey == subkey)
        )

    @property
    def debug_name(self) -> str:
        return f"{self.category}:{self.key}:{self.subkey}"


CLIENT = Registration("client", "", "")


@dataclass(slots=True)
class PeerInfo:
    """One identified connection: what its IDENTIFY said, and when it was last heard."""

    id: str  # the connection's remote address, "ip:port"
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    last_update: float = field(default_factory=time.monotonic)  # IDENTIFY or PING
    last_update_ns: int = field(default_factory=time.time_ns)  # the same, for /debug

    def touch(self) -> None:
        self.last_update = time.monotonic()
        self.last_update_ns = time.time_ns()

    def lookup_entry(self) -> dict[str, Any]:
        """A ``/lookup`` producer: exactly these six keys, in this order
        (docs/nsqlookupd-facts.md 3)."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }


@dataclass(slots=True)
class Producer:
    """A peer's entry under one key (the tombstone belongs to the entry, not the peer)."""

    peer: PeerInfo
    tombstoned: bool = False
    tombstoned_at: float = 0.0  # monotonic
    tombstoned_at_ns: int = GO_ZERO_TIME_UNIX_NANO

    def tombstone(self) -> None:
        self.tombstoned = True
        self.tombstoned_at = time.monotonic()
        self.tombstoned_at_ns = time.time_ns()

    def is_tombstoned(self, lifetime_s: float) -> bool:
        return self.tombstoned and time.monotonic() - self.tombstoned_at < lifetime_s


class RegistrationDB:
    """Keys to ``{peer id: Producer}``, with ``registration_db.go``'s operations."""

    def __init__(self) -> None:
        self._map: dict[Registration, dict[str, Producer]] = {}

    def add_registration(self, key: Registration) -> None:
        self._map.setdefault(key, {})

    def add_producer(self, key: Registration, peer: PeerInfo) -> bool:
        """Add ``peer`` under ``key``; False (and the old entry kept) if already there."""
        producers = self._map.setdefault(key, {})
        if peer.id in producers:
            return False
        producers[peer.id] = Producer(peer)
        return True

    def remove_producer(self, key: Registration, peer_id: str) -> tuple[bool, int]:
        """Remove the peer's entry; returns (whether it was there, producers left).
        The key stays, even when empty."""
        producers = self._map.get(key)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, key: Registration) -> None:
        self._map.pop(key, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if key != "*" and subkey != "*":
            exact = Registration(category, key, subkey)
            return [exact] if exact in self._map else []
        return [k for k in self._map if k.matches(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """Producers under the matching keys, each peer once."""
        if key != "*" and subkey != "*":
            return list(self._map.get(Registration(category, key, subkey), {}).values())
        seen: set[str] = set()
        found: list[Producer] = []
        for k, producers in self._map.items():
            if not k.matches(category, key, subkey):
                continue
            for peer_id, producer in producers.items():
                if peer_id not in seen:
                    seen.add(peer_id)
                    found.append(producer)
        return found

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every key the peer is registered under."""
        return [k for k, producers in self._map.items() if peer_id in producers]

    def items(self) -> Iterable[tuple[Registration, dict[str, Producer]]]:
        return self._map.items()


def filter_active(
    producers: Iterable[Producer], inactive_timeout_s: float, tombstone_lifetime_s: float
) -> list[Producer]:
    """``Producers.FilterByActive``: drop the inactive and the (still) tombstoned."""
    now = time.monotonic()
    return [
        p
        for p in producers
        if now - p.peer.last_update <= inactive_timeout_s
        and not p.is_tombstoned(tombstone_lifetime_s)
    ]
