"""A consumer's pool of connections: one slot per connection (one per nsqd, and the
extra ones a large budget needs), which ones are draining, and what an owner may read of
them."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ...protocol.value_checks import is_int
from ..drivers.asyncio_driver import AsyncNSQConnection
from ..drivers.blocking_driver import NSQConnection

log = logging.getLogger("airflow_provider_nsq.client.consumer")

Conn = TypeVar("Conn", NSQConnection, AsyncNSQConnection)


@dataclass(eq=False)
class Slot(Generic[Conn]):
    """One connection to an nsqd and what the consumer knows about it."""

    key: str  # the nsqd's address; "address#2", "#3" ... for its extra connections
    address: str  # the nsqd's address (host:port)
    conn: Conn
    limit: int  # nsqd's max_rdy_count
    msg_timeout: int | None  # nsqd's msg_timeout for this connection (ms), if it said
    last_delivery: float
    rdy: int = 0  # the RDY last sent ...
    rdy_at: float = 0.0  # ... and when
    draining: bool = False  # not wanted any more: RDY 0, closed once answered
    closing: bool = False  # CLS sent
    reserved: int = 0  # the RDY before it was lowered: nsqd may still send that many ...
    reserved_until: float = 0.0  # ... until about then


@dataclass(frozen=True, slots=True)
class Contact:
    """What a consumer last heard from one nsqd (:meth:`Pool.contact`)."""

    nsqd: str  # host:port
    connected: bool  # a connection to it is up
    silent_for: float | None  # seconds since it last sent anything (None: never heard)


def nsqd_of(key: str) -> str:
    """The nsqd address of a connection key (``host:port`` or ``host:port#n``)."""
    return key.partition("#")[0]


class Pool(Generic[Conn]):
    """The connections, by key (:class:`Slot`).

    :param max_per_nsqd: streaming only: up to this many connections to each nsqd, as
        many as it takes for one nsqd to hold the whole budget.
    """

    def __init__(self, max_per_nsqd: int) -> None:
        self.max_per_nsqd = max_per_nsqd
        self.slots: dict[str, Slot[Conn]] = {}
        #: Every slot's connection (rebuilt when a slot comes or goes): what a wait
        #: watches; the runner knows it is the same set while it is the same tuple.
        self.live: tuple[Conn, ...] = ()
        #: Bumped whenever a slot comes, goes or starts or stops draining: the RDY plan
        #: is made again.
        self.version = 0
        self._heard: dict[str, float] = {}  # nsqd -> last heard, for connections gone

    def __len__(self) -> int:
        return len(self.slots)

    def add(self, key: str, conn: Conn, now: float) -> Slot[Conn]:
        timeout = conn.server_info.get("msg_timeout")
        negotiated = timeout if is_int(timeout) and timeout > 0 else None
        slot = Slot(key, nsqd_of(key), conn, conn.max_rdy_count, negotiated, now)
        self.slots[key] = slot
        self._changed()
        return slot

    def remove(self, slots: Iterable[Slot[Conn]]) -> tuple[Conn, ...]:
        """Forget ``slots``; their connections (for the caller to close)."""
        conns = []
        for slot in slots:
            del self.slots[slot.key]
            self._remember(slot)
            conns.append(slot.conn)
        if conns:
            self._changed()
        return tuple(conns)

    def broken(self) -> list[Slot[Conn]]:
        """The slots whose connection failed or closed."""
        return [s for s in self.slots.values() if not s.conn.alive]

    def drained(self) -> list[Slot[Conn]]:
        """Draining slots whose messages are all answered (ready to close)."""
        return [s for s in self.slots.values() if s.draining and s.conn.in_flight == 0]

    def release_all(self) -> tuple[Conn, ...]:
        """Forget every connection (the caller closes them)."""
        return self.remove(list(self.slots.values()))

    def missing(self, keys: Sequence[str]) -> list[str]:
        """The ``keys`` with no connection."""
        return [k for k in keys if k not in self.slots]

    def wanted_keys(self, wanted: Sequence[str], budget: int, streaming: bool) -> list[str]:
        """Every connection the consumer should have: one per wanted nsqd, plus, while
        streaming, the extra ones ``budget`` needs (``max_per_nsqd``)."""
        if self.max_per_nsqd == 1 or not streaming:
            return list(wanted)
        limits: dict[str, int] = {}
        for slot in self.slots.values():
            if slot.conn.alive:
                limits.setdefault(slot.address, max(slot.limit, 1))
        keys: list[str] = []
        for address in wanted:
            keys.append(address)
            limit = limits.get(address)
            if limit is None:
                continue  # its max_rdy_count is known once its first connection is up
            count = min(self.max_per_nsqd, math.ceil(budget / limit))
            keys += [f"{address}#{i}" for i in range(2, count + 1)]
        return keys

    def mark_draining(self, keys: Sequence[str], wanted: Sequence[str], topic: str) -> bool:
        """Stop reading from connections not in ``keys`` (their nsqd is no longer in
        ``wanted``, or the budget needs fewer); read again from those in it. Whether any
        slot changed."""
        keep = set(keys)
        changed = False
        for key, slot in self.slots.items():
            if key in keep and slot.draining:
                slot.draining = False  # wanted again before it was closed
                changed = True
            elif key not in keep and not slot.draining:
                if slot.address not in wanted:
                    log.info(
                        "nsqd at %s no longer has %s (nsqlookupd): reading from it stops",
                        slot.address,
                        topic,
                    )
                else:
                    log.debug("extra connection %s not needed for the budget: closing it", key)
                slot.draining = True
                changed = True
        if changed:
            self.version += 1
        return changed

    # -- what an owner reads -----------------------------------------------------------

    def connections(self) -> dict[str, Conn]:
        """The live connections by key."""
        return {k: s.conn for k, s in self.slots.items() if s.conn.alive}

    def ready_counts(self) -> dict[str, int]:
        """The RDY count last sent on each connection."""
        return {k: s.rdy for k, s in self.slots.items()}

    def in_flight(self) -> int:
        """Messages delivered and not yet FIN'd or REQ'd, over every connection."""
        return sum(s.conn.in_flight for s in self.slots.values())

    def has_news(self) -> bool:
        """A connection delivered or failed since its messages were last taken."""
        return any(s.conn.has_news for s in self.slots.values())

    def capacity(self) -> int:
        """What the connections may hold in flight at most (their max_rdy_counts)."""
        return sum(s.limit for s in self.slots.values())

    def negotiated_msg_timeout(self) -> int | None:
        """The shortest msg_timeout the live connections negotiated (ms), if any did."""
        known = [s.msg_timeout for s in self.slots.values() if s.msg_timeout and s.conn.alive]
        return min(known, default=None)

    def contact(self, nsqds: Iterable[str], now: float) -> dict[str, Contact]:
        """For each nsqd in ``nsqds`` (and each one connected): whether a connection to it
        is up, and how long since it last sent anything (heartbeats included)."""
        heard = dict(self._heard)
        up: set[str] = set()
        for slot in self.slots.values():
            conn = slot.conn
            if conn.alive:
                up.add(slot.address)
            if conn.last_received:
                heard[slot.address] = max(heard.get(slot.address, 0.0), conn.last_received)
        out: dict[str, Contact] = {}
        for nsqd in [*nsqds, *(s.address for s in self.slots.values())]:
            last = heard.get(nsqd)
            out[nsqd] = Contact(nsqd, nsqd in up, None if last is None else max(now - last, 0.0))
        return out

    def _remember(self, slot: Slot[Conn]) -> None:
        last = slot.conn.last_received
        if last:
            self._heard[slot.address] = max(self._heard.get(slot.address, 0.0), last)

    def _changed(self) -> None:
        self.live = tuple(s.conn for s in self.slots.values())
        self.version += 1
