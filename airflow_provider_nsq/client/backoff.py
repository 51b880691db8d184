"""Exponential backoff, written once: how long to wait before the next try.

Every retry in the provider grows its wait the same way, each from its own first wait
and up to its own cap: the consumer (an nsqd it cannot reach), the event trigger (no
nsqd reachable yet), the message trigger (an nsqd it cannot reach, and the pause between
checks) and the sensor (the pause after a TCP window that came back short).

Reconnecting to an nsqd that cannot be reached is one policy, defined here once
(:data:`RECONNECT_START_S`, :data:`RECONNECT_MAX_S`, :func:`reconnect_backoff`), with
*full jitter* as go-nsq's ``FullJitterStrategy`` does: each wait is drawn uniformly from
0 to the exponential value, so many clients that lost the same nsqd (a restart) do not
come back at the same instants. A pause between two checks that a user set
(``poke_interval`` and its growth) is not jittered: it is the interval the user asked for.
"""

from __future__ import annotations

import math
import random

from ..protocol.errors import NSQConnectionError, NSQTimeoutError, NSQTLSError, NSQValueError

__all__ = [
    "RECONNECT_MAX_S",
    "RECONNECT_START_S",
    "Backoff",
    "nsqd_unreachable",
    "reconnect_backoff",
]

#: Reconnecting to an nsqd that cannot be reached (refused, dropped, timed out): the
#: first wait's ceiling, in seconds ...
RECONNECT_START_S = 1.0
#: ... and the longest, in seconds: 1, 2, 4 ... 32, 60, 60 ..., each drawn below that.
RECONNECT_MAX_S = 60.0


class Backoff:
    """Waits of ``start``, ``start * factor``, ``start * factor**2`` ... seconds, never
    above ``cap``; :meth:`reset` starts again from ``start`` (after a success).

    With ``jitter`` each wait is drawn uniformly from 0 to that value (full jitter): the
    values above are then the waits' ceilings (:meth:`ceiling`).

    :param start: the first wait, in seconds (> 0).
    :param cap: the longest wait, in seconds; a ``start`` above it waits ``cap``.
    :param factor: how much each wait grows (>= 1).
    :param jitter: draw each wait from 0 to its ceiling (default: wait the ceiling).
    :param rng: where the draws come from (tests pass a seeded ``random.Random``);
        default: the :mod:`random` module's own generator, which a forked process reseeds
        (Spark executors, Celery workers do not draw the same waits).
    """

    __slots__ = ("_tries", "cap", "factor", "jitter", "rng", "start")

    def __init__(
        self,
        start: float,
        cap: float,
        factor: float = 2.0,
        *,
        jitter: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        if not start > 0 or not cap > 0 or not factor >= 1:
            raise NSQValueError(
                f"backoff needs start > 0, cap > 0 and factor >= 1, got start={start!r}, "
                f"cap={cap!r}, factor={factor!r}"
            )
        self.start = float(start)
        self.cap = float(cap)
        self.factor = float(factor)
        self.jitter = jitter
        self.rng = rng
        self._tries = 0  # waits handed out since the last reset

    def __repr__(self) -> str:
        jitter = ", jitter=True" if self.jitter else ""
        return f"Backoff(start={self.start:g}, cap={self.cap:g}, factor={self.factor:g}{jitter})"

    def next(self) -> float:
        """The wait before the next try, in seconds (each call grows the following one)."""
        self._tries += 1
        return self.nth(self._tries)

    def reset(self) -> None:
        """The next wait is the first one again."""
        self._tries = 0

    def ceiling(self, n: int) -> float:
        """The ``n``-th wait's value before jitter (1 is the first): ``start *
        factor**(n - 1)``, at most ``cap``. Without jitter it is the wait itself."""
        if n < 1:
            raise NSQValueError(f"the first wait is n=1, got n={n!r}")
        try:
            grown = self.start * self.factor ** (n - 1)
        except OverflowError:
            grown = math.inf
        return min(grown, self.cap)

    def nth(self, n: int) -> float:
        """The ``n``-th wait (1 is the first) of a fresh backoff, without changing this
        one: for a process that knows how many tries came before it but not their waits.

        Without jitter it is exactly what the ``n``-th :meth:`next` returns. With jitter
        it is a new draw from 0 to :meth:`ceiling` ``(n)``: what the ``n``-th wait could
        have been, drawn independently of the waits this object handed out.
        """
        ceiling = self.ceiling(n)
        if not self.jitter:
            return ceiling
        draw = random.uniform if self.rng is None else self.rng.uniform
        return draw(0.0, ceiling)


def nsqd_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says an nsqd cannot be reached now (refused, dropped, timed out):
    worth another try after a :func:`reconnect_backoff` wait, as nsqd may be restarting.
    A TLS handshake that fails is not: it is a setting to fix, and retrying cannot."""
    return isinstance(exc, (NSQConnectionError, NSQTimeoutError)) and not isinstance(
        exc, NSQTLSError
    )


def reconnect_backoff(rng: random.Random | None = None) -> Backoff:
    """The backoff before reconnecting to an nsqd that cannot be reached: from
    :data:`RECONNECT_START_S` doubling to :data:`RECONNECT_MAX_S`, full jitter.

    :param rng: where the draws come from (tests pass a seeded ``random.Random``).
    """
    return Backoff(RECONNECT_START_S, RECONNECT_MAX_S, jitter=True, rng=rng)
