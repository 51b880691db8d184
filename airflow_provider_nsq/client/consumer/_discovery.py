"""Finding the nsqds: which ones a consumer should read from (a static list, or every
nsqlookupd asked again each poll interval), and when to try again one that could not be
reached. The consumer core (:mod:`._core`) comes here only when a lookup or a retry is
due (it reads :attr:`Discovery.next_poll`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from ...protocol.errors import NSQError
from ..backoff import Backoff, reconnect_backoff
from ..http.lookupd_api import LookupdClient, Producer
from ..runners.steps import HTTPSteps

log = logging.getLogger("airflow_provider_nsq.client.consumer")

#: go-nsq's default LookupdPollInterval.
DEFAULT_LOOKUPD_POLL_INTERVAL_S = 60.0
#: While no producer is known, nsqlookupd is asked at least this often.
EMPTY_POLL_INTERVAL_S = 5.0


class Discovery:
    """Where ``topic`` is: ``static`` (nsqd TCP addresses) or, with ``lookupd``, what
    nsqlookupd answered last, asked again every ``poll_interval`` seconds.

    :attr:`wanted` is every nsqd address to read from, as last known; :attr:`producers`
    the last lookup's answer (lookupd only); :attr:`next_poll` when nsqlookupd is to be
    asked again (``time.monotonic()`` seconds; never without a lookupd).
    """

    def __init__(
        self,
        topic: str,
        static: Sequence[str],
        lookupd: LookupdClient | None,
        poll_interval: float,
    ) -> None:
        self.topic = topic
        self.static = list(static)
        self.lookupd = lookupd
        self.poll_interval = poll_interval
        self.wanted: list[str] = []
        self.producers: list[Producer] = []
        self.next_poll = 0.0 if lookupd is not None else math.inf

    def __repr__(self) -> str:
        return f"lookupd {self.lookupd!r}" if self.lookupd else ", ".join(self.static)

    def discover_steps(self, now: float) -> HTTPSteps[list[str]]:
        """Ask every nsqlookupd (or take the static list); every address to read from.
        A lookup error is raised (none answered)."""
        if self.lookupd is None:
            return self._record(None, now)
        producers = yield from self.lookupd.lookup_steps(self.topic)
        return self._record(producers, now)

    def lookup_failed(self, exc: NSQError, now: float, connected: int) -> None:
        """A re-poll found no lookupd: keep what is connected, try again sooner."""
        log.warning("%s; keeping the %s connection(s) open", exc, connected)
        self.next_poll = now + min(self.poll_interval, EMPTY_POLL_INTERVAL_S)

    def _record(self, producers: Sequence[Producer] | None, now: float) -> list[str]:
        if producers is None:
            self.wanted = list(self.static)
        else:
            self.producers = list(producers)
            self.wanted = [p.tcp_address for p in producers]
        interval = self.poll_interval
        if not self.wanted:
            interval = min(interval, EMPTY_POLL_INTERVAL_S)
        if self.lookupd is not None:
            self.next_poll = now + interval
        return list(self.wanted)


class RetrySchedule:
    """When to try again a connection that could not be opened (or dropped): each with
    its own :func:`~..backoff.reconnect_backoff` (1 s doubling to 60 s, full jitter)."""

    def __init__(self) -> None:
        self._due: dict[str, tuple[float, Backoff]] = {}  # key -> (when, backoff)

    def __contains__(self, key: str) -> bool:
        return key in self._due

    def due(self, keys: Sequence[str], now: float) -> list[str]:
        """The ``keys`` whose next try is due (or that never failed)."""
        return [k for k in keys if k not in self._due or self._due[k][0] <= now]

    def failed(self, key: str, now: float) -> float:
        """``key`` could not be opened at ``now``: the seconds until its next try."""
        backoff = self._due.get(key, (0.0, None))[1] or reconnect_backoff()
        wait = backoff.next()
        self._due[key] = (now + wait, backoff)
        return wait

    def succeeded(self, key: str) -> None:
        """``key`` is open: its backoff starts afresh next time."""
        self._due.pop(key, None)
