"""Who holds what: every message a consumer delivered and may not have answered yet, and
the one TOUCH policy that keeps held messages in flight.

The consumer lists each delivery here: ``close()`` REQs what is still unanswered,
and ``touch_held()`` TOUCHes what has been in flight for a third of msg_timeout since it
was delivered or last TOUCHed. Answered messages are dropped from the list in bulk, not
one by one, so listing costs a delivery one append.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..message import NSQMessage

#: A held message is TOUCHed once it has been in flight this share of nsqd's msg_timeout
#: since it was delivered or last TOUCHed: two thirds of the timeout are left for the
#: TOUCH to reach nsqd, however busy its holder is.
TOUCH_AFTER_SHARE = 1 / 3
#: How soon, at the soonest, the holder is asked to look again (seconds).
TOUCH_CHECK_MIN_S = 0.1
#: The ledger is compacted once it lists this many more messages than are in flight.
LEDGER_SLACK = 1024


class _Delivery:
    """Messages delivered together, and when they were last started in flight (their
    delivery, or their last TOUCH)."""

    __slots__ = ("messages", "touched")

    def __init__(self, messages: list[NSQMessage], touched: float) -> None:
        self.messages = messages
        self.touched = touched


class Ledger:
    """The messages a consumer delivered, in deliveries, answered ones included until the
    next compaction. Not thread-safe: the consumer's owner thread uses it."""

    def __init__(self) -> None:
        self._deliveries: deque[_Delivery] = deque()
        self._count = 0  # messages listed (answered ones included)

    def add(self, messages: list[NSQMessage], now: float, in_flight: Callable[[], int]) -> None:
        """List a delivery made at ``now``; ``in_flight()`` counts the consumer's
        unanswered messages (asked only when the list is long: compacted when it is far
        longer)."""
        self._deliveries.append(_Delivery(messages, now))
        self._count += len(messages)
        if self._count > LEDGER_SLACK and self._count > 2 * in_flight() + LEDGER_SLACK:
            self._keep(lambda m: not m.responded)

    def forget(self, conn: object) -> None:
        """Drop what ``conn`` delivered (it broke: nobody can answer those any more)."""
        self._keep(lambda m: m.connection is not conn)

    def take_unanswered(self) -> list[NSQMessage]:
        """Every listed message not yet answered; the ledger is empty afterwards."""
        held = [m for d in self._deliveries for m in d.messages if not m.responded]
        self._deliveries.clear()
        self._count = 0
        return held

    def due(self, now: float, msg_timeout_s: float) -> tuple[list[NSQMessage], float]:
        """The unanswered messages to TOUCH now (marked as TOUCHed at ``now``), and the
        seconds until the next ones are due, by the one policy: a message is due once
        ``TOUCH_AFTER_SHARE`` of ``msg_timeout_s`` passed since its last start."""
        after = msg_timeout_s * TOUCH_AFTER_SHARE
        deliveries = self._deliveries
        while deliveries and all(m.responded for m in deliveries[0].messages):
            self._count -= len(deliveries.popleft().messages)
        due = [d for d in deliveries if now - d.touched >= after]
        for d in due:
            d.touched = now
        messages = [m for d in due for m in d.messages if not m.responded]
        oldest = min((d.touched for d in deliveries), default=now)
        return messages, max(oldest + after - now, TOUCH_CHECK_MIN_S)

    def _keep(self, keep: Callable[[NSQMessage], bool]) -> None:
        kept: deque[_Delivery] = deque()
        count = 0
        for delivery in self._deliveries:
            delivery.messages = [m for m in delivery.messages if keep(m)]
            if delivery.messages:
                kept.append(delivery)
                count += len(delivery.messages)
        self._deliveries = kept
        self._count = count
