"""When a sensor that cannot read nsqd's HTTP API may open its next window.

Without the HTTP API the window is the check, and a window that comes back short hands
back (REQ, ``attempts + 1``) every message it saw. So after the n-th short window in a
row the next one waits ``max(poke_interval, window_timeout) x 2^(n+1)``, up to
:data:`TCP_WINDOW_MAX_BACKOFF_S`.

In poke mode one process runs every window, and the sensor counts them itself. In
reschedule mode each poke is a new process, and the count comes from Airflow: the task
instance's reschedule history (``task_reschedule_count`` in the context: how many times
this try was rescheduled, each after a poke that found too little) and the start of the
wait (``ti.get_first_reschedule_date``), both on Airflow 3.0 to 3.3. The sensor then
asks to be rescheduled no sooner than its next window, so every reschedule wakes it for
one.
"""

from __future__ import annotations

import datetime

from ..client.backoff import Backoff

#: The longest pause between two windows (unless poke_interval is longer).
TCP_WINDOW_MAX_BACKOFF_S = 300.0


def tcp_backoff(poke_interval: float, window_timeout: float) -> Backoff:
    """The pauses after the 1st, 2nd ... short window in a row: ``max(poke_interval,
    window_timeout) x 4, x 8 ...``, up to :data:`TCP_WINDOW_MAX_BACKOFF_S`."""
    return Backoff(
        max(poke_interval, window_timeout) * 4, max(TCP_WINDOW_MAX_BACKOFF_S, poke_interval)
    )


def tcp_pause(short_windows: int, poke_interval: float, window_timeout: float) -> float:
    """Seconds to wait after ``short_windows`` short windows in a row (>= 1)."""
    return tcp_backoff(poke_interval, window_timeout).nth(short_windows)


def next_reschedule(
    *,
    reschedules: int,
    started: datetime.datetime,
    now: datetime.datetime,
    timeout: float,
    poke_interval: float,
    window_timeout: float,
) -> datetime.datetime:
    """When a rescheduled sensor whose window just came back short should wake up.

    :param reschedules: how often this try was rescheduled before this poke; each of
        those pokes opened a window (or read the HTTP API: then the count, and so the
        pause, errs on the long side).
    :param started: when this try's first poke started.
    :param timeout: the sensor's timeout, seconds: it never sleeps past it (plus a
        second, so that the poke then finds the timeout passed and opens no window).
    """
    pause = tcp_pause(reschedules + 1, poke_interval, window_timeout)
    deadline = started + datetime.timedelta(seconds=timeout + 1)
    return min(now + datetime.timedelta(seconds=pause), deadline)
