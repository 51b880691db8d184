"""``NSQMessageTrigger``: wait, in the triggerer, until a channel holds enough messages.

It takes nothing away. With nsqd's HTTP API known (the connection's ``http_port`` or
``https_port``), it reads the channel's depth from ``/stats`` and fires once
``min_messages`` are ready: no message is delivered, no ``attempts`` go up. Between checks
it waits with backoff.

Without the HTTP API (or when it cannot be reached) it peeks over TCP: it subscribes with
``RDY min_messages``, holds what arrives until ``min_messages`` have come (or the hold
ends: a little under the connection's msg_timeout, or the deadline), then hands them all
back at once (``RDY 0``, then ``REQ`` with no delay) and fires if there were enough.
The peek asks nsqd for a short msg_timeout of its own and TOUCHes what it holds
(:meth:`~airflow_provider_nsq.hooks.base.NSQBaseHook.held_consumer_options`): a
triggerer that dies mid-peek leaves the messages in flight for seconds, not a minute.
Each peek costs every held message one redelivery (``attempts + 1``); short peeks are
followed by a growing pause. It reads through
:class:`~airflow_provider_nsq.hooks.admin.NSQAdminHook`: nsqd's HTTP API, and the
connection's consumer settings for the peek.

Both checks cover every nsqd of the connection: with nsqlookupds, the HTTP depth is
summed over the producers they list; the TCP peek is one
:class:`~airflow_provider_nsq.client.consumer.AsyncNSQConsumer` that holds
``min_messages`` across every nsqd it reads (one, for a connection that names one).

While it waits it reports its health (:mod:`~airflow_provider_nsq.triggers.health`).

While nsqd cannot be reached it says so quietly (:class:`UnreachableReport`, which the
sensor uses too): one warning when the trouble starts, a reminder at most once a minute
with the tries so far and the next wait, one line when nsqd answers again.

Every wait is bounded: past ``deadline`` the trigger fires ``{"status": "timeout"}``
itself, so the sensor's timeout holds even where the triggerer's own timeout is not
applied (``dag.test()`` runs triggers inline without one).

It runs on the asyncio driver: no threads, and cancelling it (task timeout, task cleared,
triggerer shutdown) closes its connection.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..client import AsyncNSQConsumer, NSQMessage
from ..client.backoff import Backoff, nsqd_unreachable, reconnect_backoff
from ..client.holding.holder import AsyncMessageHolder
from ..client.http.nsqd_api import HTTP_UNREADABLE
from ..hooks.admin import NSQAdminHook
from ..metrics import emitter
from ..protocol.constants import DEFAULT_MSG_TIMEOUT_MS
from ..protocol.errors import NSQError
from ..protocol.value_checks import is_number
from .health import HealthReports, TriggerHealth

__all__ = ["NSQMessageTrigger", "UnreachableReport"]

#: The shortest pause between two checks (a poll_interval of 0 must not spin).
MIN_INTERVAL_S = 0.1
#: How much longer each wait after a short HTTP check is, up to HTTP_MAX_INTERVAL_S.
HTTP_BACKOFF = 1.5
HTTP_MAX_INTERVAL_S = 30.0
#: After a short TCP peek (which redelivered what it held): doubling, up to this.
TCP_BACKOFF = 2.0
TCP_MAX_INTERVAL_S = 120.0
#: A peek holds messages at most this share of the connection's msg_timeout (nsqd's
#: default when it sets none), TOUCHing them: the trigger's own msg_timeout is shorter
#: (NSQBaseHook.held_consumer_options), the peek as long as when it could not TOUCH.
HOLD_SHARE_OF_MSG_TIMEOUT = 0.8
#: The deferred sensor's checks count as the sensor's (nsq.sensor.checks.*, depth).
_METRICS = emitter("triggerer")
#: While nsqd cannot be reached: after the first warning, a reminder at most this often.
REMINDER_INTERVAL_S = 60.0
#: The shortest wait before trying an nsqd that could not be reached again: the
#: reconnect backoff's full jitter may draw a wait of almost nothing.
MIN_RETRY_S = 0.5


def deadline_iso(epoch: float) -> str:
    """A deadline (seconds since the epoch) as the ISO 8601 text events and kwargs carry."""
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat()


def deadline_epoch(value: object) -> float | None:
    """The deadline back from :func:`deadline_iso`'s text (or a number); None if absent."""
    if isinstance(value, str) and value:
        return datetime.datetime.fromisoformat(value).timestamp()
    if is_number(value):
        return float(value)
    return None


def duration_words(seconds: float) -> str:
    """A wait or a span for people: ``0.5s``, ``12s``, ``2m05s``; never ``0.0s``."""
    if seconds < 10:
        return f"{max(seconds, 0.1):.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s"


class UnreachableReport:
    """What a wait says while nsqd cannot be reached, and how often.

    A wait tries nsqd again and again while it is down (it may be restarting), in the
    sensor's pokes and in its trigger; a line per try would bury the task's log. So:
    a warning at the first failed try (the address and the refusal, when the next try
    comes), then a reminder at most every :data:`REMINDER_INTERVAL_S` (the tries so far,
    since when, the next wait), and one line when nsqd answers again.

    The count crosses processes: the worker's first check hands :meth:`carried` to the
    trigger it defers to, whose failures then continue it (no second warning).

    :param log: where to say it.
    :param what: what waits: ``topic/channel``.
    :param carried: :meth:`carried` of the report of the process before, if any.
    :param clock: seconds since the epoch (a wall clock: the count crosses processes).
    """

    def __init__(
        self,
        log: Any,
        what: str,
        carried: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.log, self.what, self.clock = log, what, clock
        carried = carried or {}
        self.tries: int = int(carried.get("tries") or 0)
        self.since: float | None = carried.get("since")
        self.said: float | None = carried.get("said")
        self.last: str | None = carried.get("last")

    def carried(self) -> dict[str, Any] | None:
        """The count so far, JSON-safe (a trigger's keyword argument); None when nsqd
        answered the last try."""
        if not self.tries:
            return None
        return {"tries": self.tries, "since": self.since, "said": self.said, "last": self.last}

    def failed(self, exc: BaseException, then: float | str | None) -> None:
        """A try could not reach nsqd; ``then``: the wait before the next try (seconds),
        what comes next in words, or None when no try comes before the deadline."""
        now = self.clock()
        self.tries += 1
        self.last = str(exc)
        if self.since is None:
            self.since = now
        if self.tries == 1:
            self.said = now
            self.log.warning(
                "nsqd cannot be reached for %s: %s; %s", self.what, exc, self._next(then)
            )
            return
        if self.said is not None and now - self.said < REMINDER_INTERVAL_S:
            return
        self.said = now
        self.log.warning(
            "nsqd still cannot be reached for %s: %s tries failed in %s (the last: %s); %s",
            *(self.what, self.tries, duration_words(now - self.since), exc, self._next(then)),
        )

    def answered(self) -> None:
        """nsqd answered a try: one line if it had not before, then the count starts over."""
        if not self.tries:
            return
        span = duration_words(self.clock() - (self.since or self.clock()))
        self.log.info(
            "nsqd answered again for %s, after %s failed tries in %s",
            *(self.what, self.tries, span),
        )
        self.tries, self.since, self.said, self.last = 0, None, None, None

    def gave_up(self) -> str:
        """The outage in words, for the line that ends the wait: the tries, how long,
        the last error."""
        span = duration_words(self.clock() - (self.since or self.clock()))
        return (
            f"nsqd could not be reached for {self.what}: {self.tries} tries failed in "
            f"{span} (the last: {self.last})"
        )

    @staticmethod
    def _next(then: float | str | None) -> str:
        if then is None:
            return "no further try before the deadline"
        if isinstance(then, str):
            return then
        return f"the next try in {duration_words(then)}"


class NSQMessageTrigger(BaseTrigger):
    """Fire once ``channel`` on ``topic`` holds ``min_messages`` ready messages, without
    consuming any; or fire a timeout at ``deadline``.

    Event payloads:

    - ``{"status": "ready", "topic", "channel", "ready": N, "checked_by": "http"|"tcp",
      "deadline"}``: at least ``min_messages`` were ready when checked;
    - ``{"status": "timeout", "topic", "channel", "ready": N, "deadline"}``: the deadline
      passed first (``ready`` is the last count seen, or None); with ``"unreachable"``
      (why) when the last check could not reach nsqd;
    - ``{"status": "error", "message": ...}``: nsqd refused the subscription (bad name,
      AUTH), TLS cannot be set up, or the connection's settings are invalid.

    An nsqd that cannot be reached (connection refused, dropped or timed out) is tried
    again, with the reconnect backoff (:func:`~..client.backoff.reconnect_backoff`: 1 s
    doubling to 60 s, full jitter, at least :data:`MIN_RETRY_S`), until the deadline:
    nsqd may be restarting. The log says so quietly (:class:`UnreachableReport`).

    :param topic: the topic name.
    :param channel: the channel name (a durable one: see the sensor's docs).
    :param nsq_conn_id: the ``nsq`` Connection to use.
    :param min_messages: ready messages needed to fire (default 1).
    :param deadline: when to give up, as seconds since the epoch (None: never).
    :param poll_interval: seconds before the second check; later waits grow (backoff).
    :param read_timeout: seconds per wait for a delivery during a TCP peek.
    :param unreachable: the sensor's tries that could not reach nsqd before it deferred
        (:meth:`UnreachableReport.carried`): the trigger's own continue the count.
    """

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        nsq_conn_id: str = NSQAdminHook.default_conn_name,
        min_messages: int = 1,
        deadline: float | None = None,
        poll_interval: float = 5.0,
        read_timeout: float = 30.0,
        unreachable: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.topic, self.channel, self.nsq_conn_id = topic, channel, nsq_conn_id
        self.min_messages = min_messages
        self.deadline = deadline
        self.poll_interval = poll_interval
        self.read_timeout = read_timeout
        self.unreachable = unreachable
        self.consumer: AsyncNSQConsumer | None = None  # the peek's, while it runs
        self._said_http_fallback = False
        self.health = TriggerHealth("sensor", _METRICS, topic=topic, channel=channel)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # The keyword arguments are the attributes of the same names.
        names = ("topic", "channel", "nsq_conn_id", "min_messages", "deadline")
        more = ("poll_interval", "read_timeout", "unreachable")
        kwargs = {name: getattr(self, name) for name in (*names, *more)}
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    # -- the wait ------------------------------------------------------------------------

    def _remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.time()

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "topic": self.topic,
                "channel": self.channel,
                **fields,
                "deadline": None if self.deadline is None else deadline_iso(self.deadline),
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Check until ready, the deadline, or an error (:meth:`_wait`), reporting the
        trigger's health (:mod:`~airflow_provider_nsq.triggers.health`) meanwhile."""
        reports = HealthReports(self.health, lambda: self.consumer, per_nsqd=False)
        reports.start()
        try:
            async for event in self._wait():
                yield event
        finally:
            # Nothing awaited here: Airflow, dag.test() or the garbage collector may close
            # this generator at its yield, where an await cannot run.
            reports.stop()

    async def _wait(self) -> AsyncIterator[TriggerEvent]:
        hook = NSQAdminHook(nsq_conn_id=self.nsq_conn_id)
        try:
            await hook.aget_client_config()
            hook.get_http_api()  # settings errors now, not at the first check
        except NSQError as exc:
            yield TriggerEvent({"status": "error", "message": str(exc)})
            return
        first = max(self.poll_interval, MIN_INTERVAL_S)
        pauses = {
            "http": Backoff(first, max(HTTP_MAX_INTERVAL_S, first), HTTP_BACKOFF),
            "tcp": Backoff(first, max(TCP_MAX_INTERVAL_S, first), TCP_BACKOFF),
        }
        reconnect = reconnect_backoff()
        report = UnreachableReport(self.log, f"{self.topic}/{self.channel}", self.unreachable)
        last_ready: int | None = None
        unreachable: str | None = None  # why the last check could not reach nsqd
        while True:
            remaining = self._remaining()
            if remaining is not None and remaining <= 0:
                self.log.info("%s", self._gave_up(last_ready, unreachable, report))
                extra = {} if unreachable is None else {"unreachable": unreachable}
                yield self._event("timeout", ready=last_ready, **extra)
                return
            try:
                last_ready, checked_by = await self._check(hook, remaining)
            except NSQError as exc:
                if not nsqd_unreachable(exc):  # refused SUB or AUTH, TLS: retrying cannot fix
                    yield TriggerEvent({"status": "error", "message": str(exc)})
                    return
                unreachable = str(exc)
                wait = max(reconnect.next(), MIN_RETRY_S)
                remaining = self._remaining()
                if remaining is not None and wait >= remaining:  # no try before the deadline
                    report.failed(exc, None)
                    wait = max(remaining, 0.0)
                else:
                    report.failed(exc, wait)
                await asyncio.sleep(wait)
                continue
            unreachable = None
            reconnect.reset()
            report.answered()
            _METRICS.incr(f"nsq.sensor.checks.{checked_by}", topic=self.topic, channel=self.channel)
            if checked_by == "http":
                _METRICS.gauge(
                    "nsq.sensor.depth", last_ready, topic=self.topic, channel=self.channel
                )
            if last_ready >= self.min_messages:
                yield self._ready(last_ready, checked_by)
                return
            await self._pause(pauses[checked_by].next(), last_ready, checked_by)

    def _gave_up(
        self, ready: int | None, unreachable: str | None, report: UnreachableReport
    ) -> str:
        """The wait's last line: what the last check saw, in words."""
        where = f"{self.topic}/{self.channel}"
        if unreachable is not None:
            return f"The deadline passed: {report.gave_up()}"
        if ready is None:
            return f"The deadline passed before a check of {where} could be made"
        return (
            f"The deadline passed: {where} held {ready} ready message(s) at the last "
            f"check, {self.min_messages} needed"
        )

    def _ready(self, ready: int, checked_by: str) -> TriggerEvent:
        self.log.info(
            "%s message(s) ready on %s/%s (%s needed, checked by %s)",
            ready,
            self.topic,
            self.channel,
            self.min_messages,
            checked_by,
        )
        return self._event("ready", ready=ready, checked_by=checked_by)

    async def _pause(self, seconds: float, ready: int, checked_by: str) -> None:
        """Say what the check saw and when the next comes, then wait for it (longer after
        each short check); past the deadline it never comes, and the log says so instead
        (the loop then fires the timeout)."""
        seen = f"{ready} of {self.min_messages} message(s) ready on {self.topic}/{self.channel}"
        seen = f"{seen} (checked by {checked_by})"
        remaining = self._remaining()
        if remaining is not None and seconds >= remaining:
            remaining = max(remaining, 0.0)
            self.log.info(
                "%s; no next check: the deadline is in %s", seen, duration_words(remaining)
            )
            await asyncio.sleep(remaining)
            return
        self.log.info("%s; next check in %s", seen, duration_words(seconds))
        await asyncio.sleep(seconds)

    async def _check(self, hook: NSQAdminHook, remaining: float | None) -> tuple[int, str]:
        """How many messages are ready, and how that was learnt: nsqd's ``/stats`` when
        the connection names its HTTP API and it answers, else a TCP peek."""
        http_error: Exception | None = None
        try:
            depth = await hook.achannel_depth(self.topic, self.channel)
        except HTTP_UNREADABLE as exc:
            depth, http_error = None, exc
        if depth is not None:
            self.health.heard()
            return depth.ready, "http"
        # An nsqd down altogether fails the peek too: that is one line, the caller's.
        ready = await self._peek(hook, remaining)
        self.health.heard()
        if http_error is not None and not self._said_http_fallback:
            self._said_http_fallback = True
            self.log.warning(
                "nsqd's HTTP API could not be read (%s): the checks peek over TCP instead "
                "(each peek redelivers the messages it sees)",
                http_error,
            )
        return ready, "tcp"

    async def _peek(self, hook: NSQAdminHook, remaining: float | None) -> int:
        """Hold up to ``min_messages`` deliveries (one in-flight budget over every nsqd of
        the connection, found through nsqlookupd when it names any) until that many came
        or the hold ends, then hand them all back; how many there were."""
        # A short msg_timeout of its own (what a dead triggerer held comes back soon),
        # and TOUCH: the peek lasts as long as the connection's msg_timeout allows.
        options = hook.held_consumer_options()
        consumer = self.consumer = AsyncNSQConsumer(self.topic, self.channel, **options)
        holder = AsyncMessageHolder(consumer)  # TOUCHes what it holds, on a task of its own
        held: list[NSQMessage] = []
        try:
            await holder.start(self.min_messages)
            # A share of the connection's msg_timeout (nsqd's default when it sets none):
            # a peek takes as long as when it could not TOUCH.
            hold = (
                (hook.consumer_options()["config"].msg_timeout_ms or DEFAULT_MSG_TIMEOUT_MS)
                / 1000
                * HOLD_SHARE_OF_MSG_TIMEOUT
            )
            hold = hold if remaining is None else min(hold, remaining)
            ends = time.monotonic() + hold
            self.log.info(
                "Peeking at %s/%s on %s nsqd(s) for up to %.0fs",
                self.topic,
                self.channel,
                len(consumer.connections),
                hold,
            )
            while len(held) < self.min_messages:
                left = ends - time.monotonic()
                if left <= 0:
                    break
                held += await holder.read(min(left, self.read_timeout))
            holder.set_max_in_flight(0)  # before the REQ: nsqd must not hand them back
            holder.requeue(*held)
            return len(held)
        finally:
            # Also on cancellation: the connections never outlive the trigger, and
            # close() REQs anything still held.
            await holder.close()
            self.consumer = None
