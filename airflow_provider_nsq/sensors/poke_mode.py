"""The sensor's poke and reschedule modes without nsqd's HTTP API: when the next window
may open.

Without the HTTP API the window is the check, and a short window hands back what it saw
(``REQ``, ``attempts + 1``), so windows back off (:mod:`~.tcp_backoff`). In poke mode
one process runs every window and :class:`PokeMode` counts them; in reschedule mode
each poke is a new process, the count comes from the task instance's reschedule
history, and the task asks to be rescheduled for its next window rather than
``poke_interval`` later.
"""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any

from ..client.backoff import Backoff
from .tcp_backoff import next_reschedule, tcp_backoff

if TYPE_CHECKING:
    import logging

    from airflow.exceptions import AirflowRescheduleException
    from airflow.providers.common.compat.sdk import Context


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class PokeMode:
    """When a sensor whose window is the check may open its next window.

    :param reschedule: the sensor runs in ``mode="reschedule"``.
    :param poke_interval: the sensor's ``poke_interval``, seconds.
    :param timeout: the sensor's ``timeout``, seconds.
    :param log: the task's logger.
    """

    def __init__(
        self, *, reschedule: bool, poke_interval: float, timeout: float, log: logging.Logger | Any
    ) -> None:
        self.reschedule = reschedule
        self.poke_interval = poke_interval
        self.timeout = timeout
        self.log = log
        # Poke mode: when the next window may open, and the backoff while windows come
        # back short in a row. Reschedule mode: when to wake up for the next window.
        self._next_window = 0.0
        self._backoff: Backoff | None = None
        self._reschedule_at: datetime.datetime | None = None
        self._poke_started: datetime.datetime | None = None

    def poke_starts(self) -> None:
        """Note that a poke starts now."""
        self._poke_started = utcnow()

    def window_due(self, context: Context) -> bool:
        """Whether a window may open now."""
        if self.reschedule:
            # Every reschedule wakes the task for a window (after_window chose the date),
            # except the last one, at the timeout.
            started, now = self._wait_started(context), utcnow()
            return (now - started).total_seconds() < self.timeout
        return time.monotonic() >= self._next_window

    def after_window(self, ok: bool, context: Context, window_timeout: float) -> None:
        """Count a window that was the check: ``ok`` when it held enough messages."""
        if ok:
            self._backoff = None
            self._next_window = 0.0
            self._reschedule_at = None
            return
        if self.reschedule:
            # A new process per poke: the count of short windows so far is the number of
            # times this try was rescheduled (each after one).
            self._reschedule_at = next_reschedule(
                reschedules=int(context.get("task_reschedule_count") or 0),
                started=self._wait_started(context),
                now=utcnow(),
                timeout=float(self.timeout),
                poke_interval=float(self.poke_interval),
                window_timeout=window_timeout,
            )
            self.log.info(
                "No HTTP API to check the channel: rescheduled for the next window at %s",
                self._reschedule_at.isoformat(),
            )
            return
        if self._backoff is None:
            self._backoff = tcp_backoff(self.poke_interval, window_timeout)
        pause = self._backoff.next()
        self._next_window = time.monotonic() + pause
        self.log.info(
            "No HTTP API to check the channel: the next window opens in %gs at the earliest",
            pause,
        )

    def reschedule_for_next_window(self, exc: AirflowRescheduleException) -> None:
        """Wake up for the next window, not every ``poke_interval``: each short window
        redelivered what it saw."""
        if self._reschedule_at is not None and self._reschedule_at > exc.reschedule_date:
            exc.reschedule_date = self._reschedule_at

    def _wait_started(self, context: Context) -> datetime.datetime:
        """When this try's first poke began: the first reschedule's start, or (not
        rescheduled yet) this poke's."""
        first = context["ti"].get_first_reschedule_date(context)
        return first or self._poke_started or utcnow()
