"""Exponential backoff, written once: how long to wait before the next try.

Every retry in the provider grows its wait the same way, each from its own first wait
and up to its own cap: the consumer (an nsqd it cannot reach), the event trigger (no
nsqd reachable yet), the message trigger (a dropped connection, and the pause between
checks) and the sensor (the pause after a TCP window that came back short).
"""

from __future__ import annotations

from ..protocol.errors import NSQValueError


class Backoff:
    """Waits of ``start``, ``start * factor``, ``start * factor**2`` ... seconds, never
    above ``cap``; :meth:`reset` starts again from ``start`` (after a success).

    :param start: the first wait, in seconds (> 0).
    :param cap: the longest wait, in seconds; a ``start`` above it waits ``cap``.
    :param factor: how much each wait grows (>= 1).
    """

    __slots__ = ("_next", "cap", "factor", "start")

    def __init__(self, start: float, cap: float, factor: float = 2.0) -> None:
        if not start > 0 or not cap > 0 or not factor >= 1:
            raise NSQValueError(
                f"backoff needs start > 0, cap > 0 and factor >= 1, got start={start!r}, "
                f"cap={cap!r}, factor={factor!r}"
            )
        self.start = float(start)
        self.cap = float(cap)
        self.factor = float(factor)
        self._next = min(self.start, self.cap)

    def __repr__(self) -> str:
        return f"Backoff(start={self.start:g}, cap={self.cap:g}, factor={self.factor:g})"

    def next(self) -> float:
        """The wait before the next try, in seconds (each call grows the following one)."""
        wait = self._next
        self._next = min(wait * self.factor, self.cap)
        return wait

    def reset(self) -> None:
        """The next wait is ``start`` again."""
        self._next = min(self.start, self.cap)

    def nth(self, n: int) -> float:
        """The ``n``-th wait (1 is the first) of a fresh backoff, without changing this
        one: for a process that knows how many tries came before it but not their waits."""
        if n < 1:
            raise NSQValueError(f"the first wait is n=1, got n={n!r}")
        return min(self.start * self.factor ** (n - 1), self.cap)
