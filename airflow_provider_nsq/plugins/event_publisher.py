"""Publishing events without making anyone wait: a bounded queue and one background
thread per process.

Who may call what: :meth:`EventPublisher.submit` from any thread, never blocking (the
scheduler's loop, a task's listener hooks); the thread alone talks to nsqd;
:meth:`EventPublisher.flush` from a process about to stop. The rules:

- an event that does not fit (``max_queued`` waiting) is dropped at once: ``queue_full``;
- the thread sends what waits in order, as one MPUB per batch, through a
  :class:`~..client.producer.NSQProducer` (the connection's nsqds as a failover list,
  each connect and answer bounded by ``timeout``);
- when no nsqd takes a batch, it waits (0.5 s, doubling to 5 s) and tries again, and an
  event not published ``timeout`` seconds after it was submitted is dropped:
  ``unreachable``. A batch written whose OK never came is dropped too, not sent again
  (``unconfirmed``: it may have been published);
- :meth:`~EventPublisher.flush` waits up to ``timeout`` for what was submitted, but not
  once a try failed (nsqd is down: nobody waits for it); what is left is dropped:
  ``not_sent`` (a batch still being sent then may yet go out: the process is stopping,
  and it is counted once, as not sent).

Every drop is reported through ``on_dropped(kind, reason, count)``, every publish
through ``on_published(kind, count)``. No Airflow here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..client.producer import NSQProducer
from ..client.settings.client_config import ClientConfig
from ..protocol.errors import NSQConnectionError, NSQError, NSQTimeoutError

log = logging.getLogger(__name__)

#: Most events in one MPUB.
BATCH = 100
_FIRST_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 5.0


@dataclass(frozen=True, slots=True)
class Event:
    """One message to publish: its kind (for the counts), body and when it must be out."""

    kind: str
    body: bytes
    deadline: float  # time.monotonic()


class EventPublisher:
    """Publishes events to ``topic`` from a background thread (see the module's rules).

    :param topic: the topic.
    :param nsqds: the nsqds' TCP addresses, in order of preference.
    :param config: the connection's settings (its timeouts are capped at ``timeout``).
    :param max_queued: events that may wait.
    :param timeout: seconds an event may wait to be published, and a flush to finish.
    :param on_published: told ``(kind, count)`` after nsqd's OK.
    :param on_dropped: told ``(kind, reason, count)`` for what will not be published.
    """

    def __init__(
        self,
        topic: str,
        nsqds: Sequence[str],
        config: ClientConfig,
        *,
        max_queued: int,
        timeout: float,
        on_published: Callable[[str, int], None],
        on_dropped: Callable[[str, str, int], None],
    ) -> None:
        self.topic = topic
        self.timeout = timeout
        self.max_queued = max_queued
        self._on_published = on_published
        self._on_dropped = on_dropped
        config = config.replace(
            connect_timeout=min(config.connect_timeout, timeout),
            read_timeout=min(config.read_timeout, timeout),
        )
        self._producer = NSQProducer(list(nsqds), config)
        self._waiting: deque[Event] = deque()
        self._in_hand: list[Event] = []
        self._changed = threading.Condition()
        self._down = False  # the last try failed
        self._given_up = False  # flush() reported the batch in hand: the thread does not
        self._tries = 0  # batches tried, for flush() to see progress
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<EventPublisher {self.topic} over {', '.join(self._producer.addresses)}>"

    # -- callers ---------------------------------------------------------------------

    def submit(self, kind: str, body: bytes) -> None:
        """Queue one event (never blocks; dropped when ``max_queued`` wait already)."""
        with self._changed:
            if len(self._waiting) + len(self._in_hand) >= self.max_queued:
                full = True
            else:
                full = False
                self._waiting.append(Event(kind, body, time.monotonic() + self.timeout))
                self._changed.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name=f"nsq-event-producer-{self.topic}", daemon=True
                )
                self._thread.start()
        if full:
            self._dropped([Event(kind, body, 0.0)], "queue_full")

    def flush(self) -> None:
        """Wait up to ``timeout`` for what was submitted to be published, but not once
        a try failed; drop (and report) what is left."""
        deadline = time.monotonic() + self.timeout
        with self._changed:
            tries = self._tries
            while self._waiting or self._in_hand:
                failed = self._down and self._tries > tries
                left = deadline - time.monotonic()
                if failed or (self._down and not self._in_hand) or left <= 0:
                    break
                self._changed.wait(left)
            left_over = [*self._waiting, *self._in_hand]
            self._waiting.clear()
            # A batch still being sent is reported here (the process may stop before the
            # try ends); the thread then neither reports nor retries it.
            self._given_up = bool(self._in_hand)
        self._dropped(left_over, "not_sent")

    # -- the thread ------------------------------------------------------------------

    def _serve(self) -> None:
        backoff = 0.0
        retry_at = 0.0
        while True:
            expired: list[Event] = []
            with self._changed:
                while True:
                    now = time.monotonic()
                    expired += self._take_expired(now)
                    if self._waiting and now >= retry_at:
                        break
                    if expired:
                        break  # reported before waiting on
                    wait = None
                    if self._waiting:
                        wait = min(retry_at, self._waiting[0].deadline) - now
                    self._changed.wait(wait)
                batch = [self._waiting.popleft() for _ in range(min(BATCH, len(self._waiting)))]
                if time.monotonic() < retry_at:
                    self._waiting.extendleft(reversed(batch))  # only expired ones to report
                    batch = []
                self._in_hand = batch
            self._dropped(expired, "unreachable")
            if batch:
                backoff = self._send(batch, backoff)
                retry_at = time.monotonic() + backoff

    def _take_expired(self, now: float) -> list[Event]:
        expired = []
        while self._waiting and self._waiting[0].deadline <= now:
            expired.append(self._waiting.popleft())
        return expired

    def _send(self, batch: list[Event], backoff: float) -> float:
        """Publish ``batch``; the next backoff (0 after a success)."""
        outcome: str | None = None
        try:
            self._producer.connection()  # every nsqd in turn; nothing written yet
        except NSQError as exc:
            outcome = "retry"
            self._log_down(exc)
        else:
            try:
                self._producer.multi_publish(self.topic, [event.body for event in batch])
            except (NSQConnectionError, NSQTimeoutError) as exc:
                outcome = "unconfirmed"  # written, no OK: it may be on the topic
                self._log_down(exc)
            except NSQError as exc:  # nsqd refused it (E_BAD_TOPIC, E_MPUB_FAILED ...)
                outcome = "refused"
                self._log_down(exc)
        with self._changed:
            self._tries += 1
            self._down = outcome is not None
            given_up, self._given_up = self._given_up, False
            if outcome == "retry" and not given_up:
                self._waiting.extendleft(reversed(batch))  # in order, at the front
            self._in_hand = []
            self._changed.notify_all()
        if given_up:
            return 0.0 if outcome is None else _FIRST_BACKOFF_S
        if outcome is None:
            for kind, count in _by_kind(batch):
                self._on_published(kind, count)
            return 0.0
        if outcome != "retry":
            self._dropped(batch, outcome)
        return min(max(backoff * 2, _FIRST_BACKOFF_S), _MAX_BACKOFF_S)

    def _log_down(self, exc: NSQError) -> None:
        if not self._down:  # once per outage (read unlocked: a log line at worst twice)
            log.warning(
                "NSQ event producer: could not publish to %s (%s); events that wait more "
                "than %gs are dropped and counted in nsq.event_producer.dropped",
                self.topic,
                exc,
                self.timeout,
            )

    def _dropped(self, events: list[Event], reason: str) -> None:
        for kind, count in _by_kind(events):
            self._on_dropped(kind, reason, count)


def _by_kind(events: Sequence[Event]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for event in events:
        counts[event.kind] = counts.get(event.kind, 0) + 1
    return list(counts.items())
