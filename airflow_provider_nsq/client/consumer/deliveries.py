"""Messages in: what a consumer's connections delivered, kept until ``read`` hands it out
(the buffer), and listed until it is answered (:mod:`.ledger`: what ``close`` REQs and
``touch_held`` TOUCHes)."""

from __future__ import annotations

from typing import Any

from ..message import NSQMessage
from .ledger import Ledger
from .pool import Pool


class Deliveries:
    """The buffer and the ledger of one consumer."""

    def __init__(self) -> None:
        self._buffer: list[NSQMessage] = []  # delivered, not yet returned by read()
        self.ledger = Ledger()  # delivered, maybe unanswered

    def collect(self, pool: Pool[Any], now: float) -> tuple[list[NSQMessage], bool]:
        """Take what every live connection delivered (into the ledger); the messages, and
        whether a connection broke (the caller drops it)."""
        got: list[NSQMessage] = []
        broken = False
        for slot in pool.slots.values():
            conn = slot.conn
            if not conn.has_news:
                continue
            if not conn.alive:
                broken = True
            else:
                got += conn.take_messages()
                slot.last_delivery = now
        if got:
            self.ledger.add(got, now, pool.in_flight)
        return got, broken

    def keep(self, messages: list[NSQMessage]) -> None:
        """Keep ``messages`` for the next :meth:`take`."""
        self._buffer += messages

    def take(self) -> list[NSQMessage]:
        """Everything kept, handed out (the buffer is empty afterwards)."""
        out, self._buffer = self._buffer, []
        return out

    def forget(self, conn: object) -> None:
        """``conn`` broke: its messages can never be answered, so nobody is given them
        and nobody TOUCHes them (nsqd redelivers them after its msg_timeout)."""
        if self._buffer:
            self._buffer = [m for m in self._buffer if m.connection is not conn]
        self.ledger.forget(conn)

    def unanswered(self, any_in_flight: bool) -> list[NSQMessage]:
        """Everything delivered and not yet answered (the buffer and the ledger are empty
        afterwards); ``any_in_flight`` False skips looking through the ledger."""
        self._buffer = []
        if not any_in_flight:
            self.ledger = Ledger()
            return []
        return self.ledger.take_unanswered()
