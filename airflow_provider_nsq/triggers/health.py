"""Is a trigger alive? What an event watcher or a deferred sensor reports about its
subscription, every :data:`HEALTH_INTERVAL_S` seconds, as metrics to alert on
(docs/metrics.md, docs/operations.md):

- ``nsq.<kind>.health.reports``: one per report. Its rate drops to 0 when the trigger
  stops running anywhere (its triggerer died and no other took it over, or it ended);
- ``nsq.<kind>.health.last_contact``: seconds since the trigger last heard from nsqd;
- ``nsq.<kind>.health.connections``: its connections to nsqd that are up;
- ``nsq.<kind>.health.held``: messages it holds (delivered, not yet FINished or REQ'd).

``kind`` is ``event`` (the event trigger: ``last_contact`` per nsqd, tag ``nsqd``) or
``sensor`` (a deferred sensor's trigger, which reads the depth over HTTP between TCP
peeks: ``last_contact`` is since nsqd last answered one of its checks).

"Heard from" is the consumer's own account (``contact(now)``, :func:`last_contacts`):
when each nsqd last sent anything on a connection, heartbeats included. So an nsqd that
froze without closing the connection shows: its ``last_contact`` grows past its
heartbeat interval (30 s by default) while ``connections`` still counts it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from ..client import AsyncNSQConsumer
from ..client.settings.address import DEFAULT_NSQD_TCP_PORT, format_address, parse_address
from ..metrics import Emitter

#: Internal to the provider: no public names (the API reference lists this module under
#: Internals; other modules of the provider import from it).
__all__: list[str] = []

#: Seconds between two health reports of one trigger (StatsD's usual flush interval).
HEALTH_INTERVAL_S = 10.0

Kind = Literal["event", "sensor"]
#: What :meth:`TriggerHealth.heard` records when it does not matter which nsqd answered.
ANY_NSQD = "any"


def last_contacts(
    consumer: AsyncNSQConsumer, heard: Mapping[str, float], now: float, since: float
) -> dict[str, float]:
    """When (monotonic seconds) the trigger last heard from each nsqd it reads, as the
    consumer says (``contact(now)``: every nsqd it should read from, its static list or
    what nsqlookupd lists now, and every one it is connected to). One the consumer never
    heard from keeps what ``heard`` remembers (an earlier consumer of the trigger's), else
    counts from ``since`` (the trigger's start); one it stopped listing is no longer
    watched."""
    out: dict[str, float] = {}
    for nsqd, contact in consumer.contact(now).items():
        silent_for = contact.silent_for
        out[nsqd] = heard.get(nsqd, since) if silent_for is None else now - silent_for
    return out


class TriggerHealth:
    """The health one trigger reports (see the module docstring).

    :param kind: ``event`` or ``sensor``: the metrics' middle name.
    :param emitter: the triggerer's metrics emitter.
    :param nsqds: the nsqds the trigger reads when they are a fixed list (no nsqlookupd):
        one never heard from counts from now.
    :param tags: the trigger's tags (topic, channel).
    """

    def __init__(
        self, kind: Kind, emitter: Emitter, nsqds: Iterable[str] = (), **tags: str
    ) -> None:
        self.kind = kind
        self.emitter = emitter
        self.tags = tags
        self._since = time.monotonic()
        self._heard: dict[str, float] = {
            format_address(*parse_address(a, DEFAULT_NSQD_TCP_PORT)): self._since for a in nsqds
        }
        self._next_report = 0.0

    def heard(self, nsqd: str = ANY_NSQD) -> None:
        """``nsqd`` (``host:port``; by default: one of them) answered the trigger."""
        self._heard[nsqd] = time.monotonic()

    def seconds_to_report(self) -> float:
        """Seconds until the next report is due (0: now)."""
        return max(self._next_report - time.monotonic(), 0.0)

    def report(self, consumer: AsyncNSQConsumer | None, *, per_nsqd: bool = True) -> None:
        """Send the gauges and count a report; the next is due :data:`HEALTH_INTERVAL_S`
        from now.

        :param consumer: the trigger's consumer while it has one (None: no connection).
        :param per_nsqd: one ``last_contact`` per nsqd (tag ``nsqd``); False: since the
            most recent contact with any of them (or the trigger's start).
        """
        now = time.monotonic()
        self._next_report = now + HEALTH_INTERVAL_S
        if consumer is not None and per_nsqd:
            self._heard = last_contacts(consumer, self._heard, now, self._since)
        elif consumer is not None:
            silent = [
                c.silent_for for c in consumer.contact(now).values() if c.silent_for is not None
            ]
            if silent:
                self._heard[ANY_NSQD] = now - min(silent)
        name = f"nsq.{self.kind}.health"
        send = self.emitter
        send.incr(f"{name}.reports", 1, **self.tags)
        send.gauge(f"{name}.connections", len(consumer.connections) if consumer else 0, **self.tags)
        send.gauge(f"{name}.held", consumer.in_flight() if consumer else 0, **self.tags)
        if not per_nsqd:
            last = max(self._heard.values(), default=self._since)
            send.gauge(f"{name}.last_contact", now - last, **self.tags)
            return
        for nsqd, when in sorted(self._heard.items()):
            send.gauge(f"{name}.last_contact", now - when, nsqd=nsqd, **self.tags)


class HealthReports:
    """A trigger's :class:`TriggerHealth` reported on time while it waits, from the event
    loop's timer (``call_later``), not from a task of its own.

    Stopping it is one call that awaits nothing, so it is safe in the ``finally`` of a
    trigger's ``run()`` however the generator ends: finished, cancelled, closed with
    ``aclose()``, or closed by the garbage collector outside any event loop (where an
    ``await`` would make Python report "async generator ignored GeneratorExit").

    :param health: what to report.
    :param consumer: the trigger's consumer at the time of a report (None: none).
    :param per_nsqd: as :meth:`TriggerHealth.report` takes it.
    """

    def __init__(
        self,
        health: TriggerHealth,
        consumer: Callable[[], AsyncNSQConsumer | None],
        *,
        per_nsqd: bool = True,
    ) -> None:
        self.health = health
        self.consumer = consumer
        self.per_nsqd = per_nsqd
        self._next: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Report now, then every :data:`HEALTH_INTERVAL_S` on the running loop."""
        self._report(asyncio.get_running_loop())

    def stop(self) -> None:
        """No more reports (the loop may be running, closed, or gone)."""
        if self._next is not None:
            self._next.cancel()
            self._next = None

    def _report(self, loop: asyncio.AbstractEventLoop) -> None:
        self.health.report(self.consumer(), per_nsqd=self.per_nsqd)
        self._next = loop.call_later(self.health.seconds_to_report(), self._report, loop)
