"""A consumer's in-flight budget and its split as RDY over the connections: the pure
policy is :mod:`..ready`; this keeps what it needs between plans (who was busy, whose
RDY was lowered and may still deliver, whose turn it is) and says which RDY to send."""

from __future__ import annotations

from typing import Any

from ..ready import keep_within, plan_ready
from .pool import Pool, Slot

#: How often the RDY split is looked at (only changes are sent).
REBALANCE_INTERVAL_S = 0.1
#: A connection that delivered nothing for this long is quiet: it keeps its share only
#: while no other connection is busy.
IDLE_AFTER_S = 0.25
#: After a connection's RDY is lowered, what nsqd may already have sent it at the old RDY
#: stays counted this long before it is given to another connection.
SETTLE_S = 0.25
#: With fewer spare RDY than connections, the turn moves on this often (the first time
#: this long after the first plan: a share just given is not taken away at once).
ROTATE_INTERVAL_S = 1.0

#: A change of RDY to send: the slot, and its new count.
Change = tuple[Slot[Any], int]


class RdyPlanner:
    """The budget (messages in flight across every connection) and its RDY split."""

    def __init__(self) -> None:
        self.budget = 0
        self._offset = 0  # where the round-robin starts
        self._next_rotation = 0.0  # 0: no plan yet
        self._next_rebalance = 0.0
        self._shape: tuple[Any, ...] = ()  # what the last plan was made for

    def due(self, now: float) -> bool:
        """Whether a re-plan is due (at most every :data:`REBALANCE_INTERVAL_S`)."""
        return now >= self._next_rebalance

    def make_due(self) -> None:
        """Let the next :meth:`plan` look at once."""
        self._next_rebalance = 0.0

    def invalidate(self) -> None:
        """The next :meth:`plan` is made even if nothing it depends on changed."""
        self._shape = ()

    def plan(self, pool: Pool[Any], now: float, streaming: bool, force: bool) -> list[Change]:
        """The RDY changes to send now: a new split when what it depends on changed (or
        ``force``), else none. A lowered RDY stays counted for :data:`SETTLE_S`."""
        self._next_rebalance = now + REBALANCE_INTERVAL_S
        if not self._next_rotation:
            self._next_rotation = now + ROTATE_INTERVAL_S
        slots = [s for s in pool.slots.values() if not s.closing and s.conn.alive]
        active = [s for s in slots if not s.draining]
        # What a draining connection still holds counts against the budget until answered.
        budget = max(self.budget - sum(s.conn.in_flight for s in slots if s.draining), 0)
        counts = self._split(pool.version, now, active, budget, streaming, force)
        if counts is None:
            return []
        changes: list[Change] = []
        for slot in slots:
            want = counts.get(slot.key, 0)
            if want != slot.rdy:
                if want < slot.rdy:
                    held = slot.reserved if now < slot.reserved_until else 0
                    slot.reserved = max(slot.rdy, held)
                    slot.reserved_until = now + SETTLE_S
                changes.append((slot, want))
        return changes

    def pause(self, pool: Pool[Any]) -> list[Change]:
        """After a full window: budget 0 and RDY 0 everywhere (nothing is reserved: nsqd
        has sent all it was allowed). The changes to send."""
        self.budget = 0
        self._shape = ()
        changes: list[Change] = [(s, 0) for s in pool.slots.values() if s.rdy and s.conn.alive]
        for slot in pool.slots.values():
            slot.rdy = slot.reserved = 0
        return changes

    def _split(
        self,
        version: int,
        now: float,
        active: list[Slot[Any]],
        budget: int,
        streaming: bool,
        force: bool,
    ) -> dict[str, int] | None:
        """The RDY count for each active connection, or None when nothing it depends on
        changed since the last plan."""
        in_flight = [s.conn.in_flight for s in active]
        # Busy: delivered lately, or took all its RDY allowed since that RDY was sent
        # (nsqd cannot send it more, so its silence says nothing about what it has). Not
        # a connection whose RDY was lowered to what it holds: it took nothing since.
        busy = [
            now - s.last_delivery < IDLE_AFTER_S or (0 < s.rdy <= f and s.last_delivery >= s.rdy_at)
            for s, f in zip(active, in_flight, strict=True)
        ]
        spare = budget - sum(in_flight)
        if 0 < spare < len(active) and now >= self._next_rotation:
            self._offset += max(spare, 1)
            self._next_rotation = now + ROTATE_INTERVAL_S
        settling = tuple(now < s.reserved_until for s in active)
        keys = tuple(s.key for s in active)
        shape = (version, budget, keys, tuple(busy), settling, self._offset)
        if shape == self._shape and not force:
            return None
        self._shape = shape
        planned = plan_ready(
            budget,
            in_flight,
            [s.limit for s in active],
            busy,
            self._offset,
            keep_one_each=streaming,
        )
        committed = [
            max(f, s.rdy, s.reserved if settle else 0)
            for s, f, settle in zip(active, in_flight, settling, strict=True)
        ]
        return dict(zip(keys, keep_within(budget, planned, committed), strict=True))
