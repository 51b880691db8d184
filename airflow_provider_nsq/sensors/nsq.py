"""``NSQSensor``: wait until a subscribe window on a channel yields enough messages, then
hand them to downstream tasks through XCom.

What is here, in the order a poke runs it:

- the check: the channel's depth from nsqd's HTTP API (nothing is taken), through the
  admin role of the sensor's one :class:`~airflow_provider_nsq.hooks.nsq.NSQHook` (its
  Connection read once per task);
- the window (:class:`_ChannelWindow`): ``SUB``, ``RDY max_messages``, collect for
  ``window_timeout``, ``CLS``, through that hook's consumer role; it keeps what the filter
  accepted and what fits in XCom (``max_xcom_bytes``) in flight, and hands the rest back;
- the delivery (:class:`_HeldMessages`): the task TOUCHes the messages, pushes their
  records to XCom itself, and only then FINs them; if the push fails they are REQ'd, so
  nsqd redelivers them (attempts + 1); a process killed outright leaves them to nsqd's
  msg_timeout, which redelivers them too;
- when the next window may open without the HTTP API (:class:`_PokeSchedule`, poke and
  reschedule modes: a short window redelivers what it saw, so windows back off);
- the deferrable mode (:class:`_Deferral`): the wait in the triggerer
  (:class:`~airflow_provider_nsq.triggers.nsq.NSQMessageTrigger`), one deadline across
  deferrals.

An nsqd that cannot be reached is "not yet" in every mode, until the sensor's timeout
(nsqd may be restarting), and the log says so quietly
(:class:`~airflow_provider_nsq.triggers.nsq.UnreachableReport`): a warning when the
trouble starts, a reminder at most once a minute, a line when nsqd answers again.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from airflow.exceptions import AirflowRescheduleException
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowSensorTimeout,
    BaseSensorOperator,
    conf,
)

from ..client.backoff import Backoff, nsqd_unreachable, reconnect_backoff
from ..client.http.nsqd_api import HTTP_UNREADABLE, ChannelDepth
from ..client.message import (
    MessageFilter,
    NSQMessage,
    import_callable,
    message_record,
    message_records,
)
from ..client.settings.values import Delay, delay_to_ms, duration_to_seconds
from ..hooks.consumer import NSQConsumerHook
from ..hooks.nsq import NSQHook
from ..lineage import sensor_lineage
from ..links import NSQAdminChannelLink
from ..metrics import Emitter, task_emitter
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT
from ..protocol.errors import NSQError, NSQValueError
from ..protocol.names import is_ephemeral, validate_channel_name, validate_topic_name
from ..protocol.value_checks import check_int
from ..templated import is_templated, rendered_count
from ..triggers.nsq import (
    NSQMessageTrigger,
    UnreachableReport,
    deadline_epoch,
    deadline_iso,
    duration_words,
)

if TYPE_CHECKING:
    import logging

    from airflow.providers.common.compat.sdk import Context

__all__ = ["NSQSensor"]

Rejected = Literal["finish", "requeue"]
WindowTimeout = datetime.timedelta | float | str

XCOM_RETURN_KEY = "return_value"
#: nsqd's default --max-rdy-count: a window holds all its messages in flight at once.
MAX_WINDOW_MESSAGES = DEFAULT_MAX_RDY_COUNT
_DEFAULT_WINDOW_TIMEOUT_S = 5.0
#: The longest pause between two windows without the HTTP API (unless poke_interval is
#: longer).
TCP_WINDOW_MAX_BACKOFF_S = 300.0

# -- the window's sizes ------------------------------------------------------------------
# Checked the same way when the DAG is parsed (literal values) and when the task runs
# (values rendered from templates, which arrive as strings such as "10" or "2.5").


def _window_sizes(
    min_messages: object, max_messages: object, window_timeout: object
) -> tuple[int, int, float]:
    """``(min_messages, max_messages, window_timeout seconds)``, each checked and against
    each other; the error names the bad value."""
    low = rendered_count("min_messages", min_messages)
    high = rendered_count("max_messages", max_messages)
    if high > MAX_WINDOW_MESSAGES:
        raise NSQValueError(
            f"max_messages={high} exceeds nsqd's max RDY count of "
            f"{MAX_WINDOW_MESSAGES}: a window holds all its messages in flight"
        )
    if low > high:
        raise NSQValueError(f"min_messages={low} is more than max_messages={high}")
    return low, high, duration_to_seconds(window_timeout, "window_timeout")


def _check_literal_window_sizes(
    min_messages: object, max_messages: object, window_timeout: object
) -> None:
    """At DAG parse: check what is not a template now (each value, and the pair when both
    are literal); templated values are checked once rendered."""
    if not any(map(is_templated, (min_messages, max_messages, window_timeout))):
        _window_sizes(min_messages, max_messages, window_timeout)
        return
    for name, value in (("min_messages", min_messages), ("max_messages", max_messages)):
        if not is_templated(value):
            rendered_count(name, value)
    if not is_templated(window_timeout):
        duration_to_seconds(window_timeout, "window_timeout")
    if not is_templated(max_messages):
        _window_sizes(1, max_messages, 1.0)


# -- how much of one window fits in XCom -------------------------------------------------
# Airflow keeps an XCom value in the ``xcom.value`` column as JSON (SQLAlchemy ``JSON``,
# ``JSONB`` on PostgreSQL; the ``XComModel`` of Airflow 3.0 to 3.3). What one value may
# weigh is set by the database, not by Airflow:
# - MySQL 8: a ``JSON`` document is limited by the server's ``max_allowed_packet``,
#   64 MiB by default (https://dev.mysql.com/doc/refman/8.4/en/json.html and
#   https://dev.mysql.com/doc/refman/8.4/en/packet-too-large.html);
# - PostgreSQL: a ``jsonb`` value holds at most 255 MiB of string data ("jsonb strings
#   cannot exceed 268435455 bytes"), any field at most 1 GB;
# - SQLite: a ``TEXT`` value is at most ``SQLITE_MAX_LENGTH``, 1,000,000,000 bytes by
#   default (https://sqlite.org/limits.html).
# The size counted is that of the JSON text the column receives: Airflow's serde leaves
# a list of plain dicts as it is, and the column type encodes it with ``json.dumps``'s
# defaults (``ensure_ascii``, ``", "`` and ``": "`` separators), as here.

#: The smallest cap: one small record must fit.
MIN_MAX_XCOM_BYTES = 256
#: A sixteenth of MySQL's default max_allowed_packet (64 MiB), the smallest limit of the
#: metadata databases Airflow supports: downstream tasks load the whole value into
#: memory and the UI renders it, so a window's XCom stays small even where the database
#: would take more. A batch of big messages belongs in object storage, its keys in XCom.
DEFAULT_MAX_XCOM_BYTES = 4 * 1024 * 1024


def record_bytes(record: dict[str, Any]) -> int:
    """One record's size in the stored JSON list (without its separator)."""
    return len(json.dumps(record).encode())


def list_bytes(sizes: Iterable[int]) -> int:
    """The stored size of a JSON list whose items have these sizes: ``[`` and ``]``,
    and ``", "`` between items."""
    sizes = list(sizes)
    return 2 + sum(sizes) + 2 * max(len(sizes) - 1, 0)


def records_that_fit(sizes: Sequence[int], max_bytes: int) -> int:
    """How many leading records (in delivery order) fit in one XCom value of at most
    ``max_bytes``; 0 when even the first does not."""
    total = 2  # the brackets
    for count, size in enumerate(sizes):
        total += size + (2 if count else 0)
        if total > max_bytes:
            return count
    return len(sizes)


# -- the window, and what it holds -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _WindowRules:
    """What one window takes, keeps and hands back: the sensor's arguments, rendered and
    checked."""

    topic: str
    channel: str
    min_messages: int
    max_messages: int
    window_timeout: float  # seconds
    max_xcom_bytes: int
    message_filter: MessageFilter | str | None
    rejected: Rejected
    rejected_requeue_delay_ms: int


@dataclass
class _HeldMessages:
    """The messages one window accepted, kept in flight (unanswered) until
    :meth:`deliver`; ``hook`` (whose window took them) answers them."""

    hook: NSQConsumerHook
    rules: _WindowRules
    messages: list[NSQMessage]
    records: list[dict[str, Any]]
    metrics: Emitter

    def deliver(self, ti: Any, log: logging.Logger | Any) -> None:
        """TOUCH the messages, push their records to ``ti``'s XCom (``return_value``),
        then FIN them; REQ them if the push fails (and re-raise its error)."""
        batch, records, hook = self.messages, self.records, self.hook
        where = f"{self.rules.topic}/{self.rules.channel}"
        try:
            hook.touch(*batch)  # a full msg_timeout for the push, counted from now
            ti.xcom_push(key=XCOM_RETURN_KEY, value=records)
        except BaseException:
            log.warning(
                "Could not record %s message(s) from %s in XCom; requeueing them",
                *(len(batch), where),
            )
            self.metrics.incr("nsq.sensor.window.requeued", len(batch))
            try:
                hook.requeue(*batch)
            except Exception as exc:  # keep the push's error; nsqd's msg_timeout still applies
                log.warning("REQ failed too (%s): nsqd redelivers after msg_timeout", exc)
            raise
        self.metrics.incr("nsq.sensor.window.delivered", len(batch))
        self.metrics.gauge(
            "nsq.sensor.window.xcom_bytes", list_bytes(record_bytes(r) for r in records)
        )
        try:
            hook.finish(*batch)
        except Exception as exc:
            # The XCom is recorded, so the task succeeds; nsqd redelivers the messages
            # when their msg_timeout expires: a later run sees them again (duplicates).
            log.warning(
                "Pushed %s message(s) to XCom but could not FIN them (%s); nsqd will "
                "redeliver them after msg_timeout",
                *(len(batch), exc),
            )
            return
        log.info("Pushed %s message(s) from %s to XCom and finished them", len(batch), where)


class _ChannelWindow:
    """One check of a sensor's channel, and the window it opens.

    A window that yields fewer than ``min_messages`` accepted messages hands them back at
    once (``REQ``, no delay, ``attempts + 1``). What the filter rejected is FINished or
    REQ'd as ``rejected`` says. Over ``max_xcom_bytes`` the window keeps what fits, in
    delivery order, and hands the rest back before anything is FINished.
    """

    def __init__(self, sensor: NSQSensor, rules: _WindowRules, metrics: Emitter) -> None:
        self.hook = sensor.hook
        self.admin = sensor.hook
        self.log = sensor.log
        self.rules = rules
        self.metrics = metrics
        #: Why nsqd's HTTP API could not be read at :meth:`depth`, if it could not (the
        #: sensor says so once the window, the check then, reached nsqd).
        self.http_error: Exception | None = None

    def depth(self) -> ChannelDepth | None:
        """The channel's depth from nsqd's HTTP API; None when the connection has no HTTP
        port, the channel is ephemeral (it exists only while a window is open), or the API
        cannot be read (:attr:`http_error`; then the window is the check)."""
        if is_ephemeral(self.rules.channel):
            return None
        try:
            depth = self.admin.channel_depth(self.rules.topic, self.rules.channel)
        except HTTP_UNREADABLE as exc:
            self.http_error = exc
            return None
        if depth is not None:
            self.metrics.incr("nsq.sensor.checks.http")
            self.metrics.gauge("nsq.sensor.depth", depth.ready)
        return depth

    def enough(self, depth: ChannelDepth) -> bool:
        """Whether ``depth`` holds ``min_messages`` ready ones (logged when not)."""
        rules = self.rules
        if depth.ready >= rules.min_messages:
            return True
        self.log.info(
            "%s of %s message(s) ready on %s/%s (nsqd's /stats at %s); no window opened",
            *(depth.ready, rules.min_messages, rules.topic, rules.channel, depth.nsqd),
        )
        return False

    def open(self) -> _HeldMessages | None:
        """One consume window: the accepted messages that fit in XCom, held in flight;
        None when fewer than ``min_messages`` were accepted (they went back)."""
        hook, rules, metrics = self.hook, self.rules, self.metrics
        messages = hook.consume(
            rules.topic,
            rules.channel,
            max_messages=rules.max_messages,
            timeout=rules.window_timeout,
            ack="manual",
        )
        metrics.incr("nsq.sensor.window.taken", len(messages))
        try:
            accepted, rejected = self._split(messages)
            if len(accepted) < rules.min_messages:
                self._answer_rejected(rejected)
                hook.requeue(*accepted)
                metrics.incr("nsq.sensor.window.requeued", len(accepted))
                self.log.info(
                    "%s accepted message(s) on %s/%s, %s needed%s",
                    *(len(accepted), rules.topic, rules.channel, rules.min_messages),
                    "; requeued them" if accepted else "",
                )
                hook.close()
                return None
            # The XCom cap, before anything is FINished (also the rejected messages).
            records = message_records(accepted, rules.topic, rules.channel)
            keep = self._fit_xcom(accepted, records)
            if keep < len(accepted):
                hook.requeue(*accepted[keep:])
                metrics.incr("nsq.sensor.window.requeued", len(accepted) - keep)
            self._answer_rejected(rejected)
        except BaseException:
            hook.close()  # REQs every unanswered message
            raise
        return _HeldMessages(hook, rules, accepted[:keep], records[:keep], metrics)

    def _fit_xcom(self, accepted: list[NSQMessage], records: list[dict[str, Any]]) -> int:
        """How many of the accepted messages (in delivery order) go to XCom within
        ``max_xcom_bytes``; raises when not even the first fits."""
        rules = self.rules
        sizes = [record_bytes(r) for r in records]
        keep = records_that_fit(sizes, rules.max_xcom_bytes)
        if keep == 0:
            first = accepted[0]
            raise NSQValueError(
                f"message {first.id} on {rules.topic}/{rules.channel} is "
                f"{list_bytes(sizes[:1])} bytes as an XCom value (its body is "
                f"{len(first.body)} bytes), more than max_xcom_bytes={rules.max_xcom_bytes}: "
                "raise max_xcom_bytes (the metadata database's limit permitting, see "
                "docs/operations.md), or publish a reference (an object-storage key) "
                "instead of the payload. Nothing was FINished: the window's "
                f"{len(accepted)} message(s) go back to nsqd."
            )
        if keep < len(accepted):
            self.log.warning(
                "The window took %s message(s) (%s bytes as XCom), more than "
                "max_xcom_bytes=%s: keeping the first %s (%s bytes), handing %s back to nsqd "
                "(REQ, no delay) for a later run%s",
                *(len(accepted), list_bytes(sizes), rules.max_xcom_bytes, keep),
                *(list_bytes(sizes[:keep]), len(accepted) - keep),
                f"; that is fewer than min_messages={rules.min_messages}"
                if keep < rules.min_messages
                else "",
            )
        return keep

    def _answer_rejected(self, rejected: list[NSQMessage]) -> None:
        """FIN or REQ what the filter rejected, as ``rejected`` says."""
        if not rejected:
            return
        if self.rules.rejected == "finish":
            self.hook.finish(*rejected)
            self.metrics.incr("nsq.sensor.window.filtered", len(rejected))
        else:
            self.hook.requeue(*rejected, delay_ms=self.rules.rejected_requeue_delay_ms)
            self.metrics.incr("nsq.sensor.window.requeued", len(rejected))
        self.log.info(
            "message_filter rejected %s message(s); %s them",
            len(rejected),
            "finished" if self.rules.rejected == "finish" else "requeued",
        )

    def _split(self, messages: list[NSQMessage]) -> tuple[list[NSQMessage], list[NSQMessage]]:
        keep = self.rules.message_filter
        if isinstance(keep, str):
            keep = import_callable(keep)
        if keep is None:
            return messages, []
        accepted: list[NSQMessage] = []
        rejected: list[NSQMessage] = []
        for message in messages:
            record = message_record(message, self.rules.topic, self.rules.channel)
            (accepted if keep(record) else rejected).append(message)
        return accepted, rejected


# -- when the next window may open without the HTTP API -----------------------------------
# Without the HTTP API the window is the check, and a window that comes back short hands
# back (REQ, attempts + 1) every message it saw. So after the n-th short window in a row
# the next one waits max(poke_interval, window_timeout) x 2^(n+1), up to
# TCP_WINDOW_MAX_BACKOFF_S. In poke mode one process runs every window, and the sensor
# counts them itself. In reschedule mode each poke is a new process, and the count comes
# from Airflow: the task instance's reschedule history (``task_reschedule_count`` in the
# context: how many times this try was rescheduled, each after a poke that found too
# little) and the start of the wait (``ti.get_first_reschedule_date``), both on Airflow
# 3.0 to 3.3. The sensor then asks to be rescheduled no sooner than its next window, so
# every reschedule wakes it for one.


def _tcp_backoff(poke_interval: float, window_timeout: float) -> Backoff:
    """The pauses after the 1st, 2nd ... short window in a row: ``max(poke_interval,
    window_timeout) x 4, x 8 ...``, up to :data:`TCP_WINDOW_MAX_BACKOFF_S`."""
    return Backoff(
        max(poke_interval, window_timeout) * 4, max(TCP_WINDOW_MAX_BACKOFF_S, poke_interval)
    )


def tcp_pause(short_windows: int, poke_interval: float, window_timeout: float) -> float:
    """Seconds to wait after ``short_windows`` short windows in a row (>= 1)."""
    return _tcp_backoff(poke_interval, window_timeout).nth(short_windows)


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


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class _PokeSchedule:
    """When a sensor whose window is the check (no HTTP API) may open its next window,
    in poke and reschedule modes (see the comment above :func:`tcp_pause`)."""

    def __init__(self, sensor: NSQSensor) -> None:
        self.reschedule = sensor.reschedule
        self.poke_interval = float(sensor.poke_interval)
        self.exponential_backoff = bool(sensor.exponential_backoff)
        self.timeout = float(sensor.timeout)
        self.log = sensor.log
        # Poke mode: when the next window may open, and the backoff while windows come
        # back short in a row. Reschedule mode: when to wake up for the next window.
        self._next_window = 0.0
        self._backoff: Backoff | None = None
        self._reschedule_at: datetime.datetime | None = None
        self._poke_started: datetime.datetime | None = None

    def poke_starts(self) -> None:
        self._poke_started = _utcnow()

    def window_due(self, context: Context) -> bool:
        """Whether a window may open now."""
        if self.reschedule:
            # Every reschedule wakes the task for a window (after_window chose the date),
            # except the last one, at the timeout.
            started, now = self._wait_started(context), _utcnow()
            return (now - started).total_seconds() < self.timeout
        return time.monotonic() >= self._next_window

    def after_window(self, ok: bool, context: Context, window_timeout: float) -> None:
        """Count a window that was the check: ``ok`` when it held enough messages."""
        if ok:
            self._backoff, self._next_window, self._reschedule_at = None, 0.0, None
            return
        if self.reschedule:
            # A new process per poke: the count of short windows so far is the number of
            # times this try was rescheduled (each after one).
            self._reschedule_at = next_reschedule(
                reschedules=int(context.get("task_reschedule_count") or 0),
                started=self._wait_started(context),
                now=_utcnow(),
                timeout=self.timeout,
                poke_interval=self.poke_interval,
                window_timeout=window_timeout,
            )
            self.log.info(
                "No HTTP API to check the channel: rescheduled for the next window at %s",
                self._reschedule_at.isoformat(),
            )
            return
        if self._backoff is None:
            self._backoff = _tcp_backoff(self.poke_interval, window_timeout)
        pause = self._backoff.next()
        self._next_window = time.monotonic() + pause
        self.log.info(
            "No HTTP API to check the channel: the next window opens in %gs at the earliest",
            pause,
        )

    def after_unreachable(self, exc: NSQError, context: Context, report: UnreachableReport) -> None:
        """A poke that could not reach nsqd: say so through ``report`` and, in reschedule
        mode, wake up for the next try with the reconnect backoff (1 s doubling to 60 s,
        at least ``poke_interval``) by the poke's number in this try, not sooner."""
        if not self.reschedule:
            report.failed(
                exc,
                "the next try at the next poke" if self.exponential_backoff else self.poke_interval,
            )
            return
        # A new process per poke: it says its own line, with the poke's number.
        poke = int(context.get("task_reschedule_count") or 0) + 1
        pause = max(self.poke_interval, reconnect_backoff().ceiling(poke))
        started, now = self._wait_started(context), _utcnow()
        deadline = started + datetime.timedelta(seconds=self.timeout + 1)
        self._reschedule_at = min(now + datetime.timedelta(seconds=pause), deadline)
        wait = max((self._reschedule_at - now).total_seconds(), self.poke_interval)
        report.failed(
            exc, f"rescheduled: the next try in {duration_words(wait)} (poke {poke} of this wait)"
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
        return first or self._poke_started or _utcnow()


# -- the deferrable mode ----------------------------------------------------------------


def _check_deferrable_channel(channel: str) -> None:
    """Refuse an ``#ephemeral`` channel: it cannot keep messages while the task waits."""
    if is_ephemeral(channel):
        raise NSQValueError(
            f"channel {channel!r} is ephemeral: nsqd deletes it when the last window "
            "closes, so messages cannot wait for the task while it is deferred; use a "
            "durable channel with deferrable=True"
        )


class _Deferral:
    """What a deferrable sensor does between its windows: check once on the worker, then
    wait in the triggerer until the channel holds enough messages, and open one window
    when the task resumes; defer again when that window comes back short.

    One deadline bounds the whole wait, across deferrals: set by the first try from the
    sensor's ``timeout``, carried in the deferral's kwargs (and in the trigger's events,
    where ``dag.test()`` drops those). An nsqd that cannot be reached counts as "not
    yet": the trigger tries it again with backoff until the deadline, nsqd may be
    restarting.
    """

    def __init__(self, sensor: NSQSensor) -> None:
        self.sensor = sensor
        self.timeout = float(sensor.timeout)
        self.report = sensor.unreachable_report

    def first_deadline(self) -> float:
        """The deadline of a wait that starts now (seconds since the epoch)."""
        return time.time() + self.timeout

    def resumed_deadline(self, event: dict[str, Any], deadline: str | None) -> float:
        """The deadline the first try set, on resume after the trigger fired ``event``;
        raises the sensor's timeout, or the trigger's error, when that is what it says."""
        status = event.get("status")
        when = deadline_epoch(deadline or event.get("deadline"))
        if when is None:  # no deadline came back: bound the wait from now
            when = self.first_deadline()
        if status == "timeout":
            self.timeout_if_past(
                when, event.get("ready"), force=True, unreachable=event.get("unreachable")
            )
        if status != "ready":
            detail = event.get("message", "the trigger ended without an event")
            raise AirflowException(f"NSQSensor trigger failed: {detail}")
        return when

    def unless_unreachable(self, check: Callable[[], bool]) -> bool:
        """``check()`` before a deferral; an nsqd that cannot be reached counts as "not
        yet" (False), and the trigger tries it again with backoff until the deadline:
        nsqd may be restarting. Any other error fails the task."""
        try:
            ready = check()
        except NSQError as exc:
            if not nsqd_unreachable(exc):
                raise
            self.report.failed(
                exc,
                "waiting in the triggerer, which tries again with backoff until the "
                "sensor's timeout",
            )
            return False
        self.report.answered()
        return ready

    def timeout_if_past(
        self,
        deadline: float,
        ready: int | None,
        force: bool = False,
        unreachable: str | None = None,
    ) -> None:
        """Raise the sensor's timeout when ``deadline`` passed (or ``force``)."""
        if force or time.time() >= deadline:
            seen = "" if ready is None else f" ({ready} were ready at the last check)"
            if unreachable:
                seen += f"; nsqd could not be reached at the last try: {unreachable}"
            sensor = self.sensor
            raise AirflowSensorTimeout(
                f"Sensor has timed out: {sensor.topic}/{sensor.channel} did not yield "
                f"{sensor.min_messages} message(s) within {self.timeout}s{seen}"
            )

    def defer(self, deadline: float) -> None:
        """Defer the sensor until the channel is ready or ``deadline``: the trigger, the
        method to resume in, the deadline for it, Airflow's timeout."""
        sensor = self.sensor
        remaining = max(deadline - time.time(), 1.0)
        sensor.defer(
            trigger=NSQMessageTrigger(
                topic=sensor.topic,
                channel=sensor.channel,
                nsq_conn_id=sensor.nsq_conn_id,
                min_messages=sensor.min_messages,
                deadline=deadline,
                poll_interval=float(sensor.poke_interval),
                unreachable=self.report.carried(),
            ),
            method_name="execute_complete",
            kwargs={"deadline": deadline_iso(deadline)},
            # The trigger also fires its own timeout event at the deadline: dag.test()
            # runs triggers without applying this one.
            timeout=datetime.timedelta(seconds=remaining),
        )


# -- the sensor -------------------------------------------------------------------------


class NSQSensor(BaseSensorOperator):
    """Wait for messages on an NSQ channel and pass them downstream via XCom.

    The sensor succeeds when one subscribe window of ``window_timeout`` on
    ``topic``/``channel`` yields at least ``min_messages`` messages that
    ``message_filter`` accepts (a window takes up to ``max_messages``). Its XCom value
    (``return_value``) is the list of those messages, each a dict: ``id``, ``body`` (str;
    base64 text when ``body_encoding == "base64"``), ``body_encoding`` (``"utf-8"`` or
    ``"base64"``), ``attempts``, ``timestamp`` (ns since the epoch, set by nsqd at
    publish), ``topic``, ``channel``, ``nsqd`` (the ``host:port`` that delivered it: a
    message ``id`` is unique per nsqd).

    NSQ as deployed: when the connection names nsqlookupds (``lookupd_http_addresses``)
    or several nsqds (``nsqd_tcp_addresses``), the check and the window cover every nsqd
    that has the topic: the depth is summed over the producers nsqlookupd lists (each on
    the HTTP port it announced), and one window shares ``max_messages`` across them.

    How it waits: when the connection names nsqd's HTTP API (``http_port``, or
    ``https_port`` with TLS), every check reads the channel's depth from ``/stats`` and a
    window is opened only once ``min_messages`` are ready, so waiting takes nothing and
    redelivers nothing. Without it, the window itself is the check: a short window hands
    its messages back (``REQ``, ``attempts + 1``) and the next window waits longer (see
    docs/sensors.md), in ``mode="reschedule"`` too (the pause then comes from the task
    instance's reschedule history). In deferrable mode the checks run in the triggerer.
    ``timeout`` bounds the whole wait, across deferrals and reschedules.

    What one window hands to XCom is capped at ``max_xcom_bytes`` (of JSON, as the
    metadata database stores it), before anything is FINished: over the cap the window
    keeps the messages that fit, in delivery order (at least one), and hands the rest
    back to nsqd at once (``REQ``, no delay); when even the first message does not fit
    the task fails with an error naming both sizes, and every message goes back.

    The task pushes the XCom itself and only then FINs the messages; on any failure
    before that they are REQ'd and nsqd redelivers them. Delivery is at-least-once:
    downstream tasks may see a message twice (same ``id``, higher ``attempts``).

    :param topic: the topic name (templated).
    :param channel: the channel this sensor consumes from; required. A durable name keeps
        messages between runs; a ``#ephemeral`` channel only sees messages published while
        a window is open, so it cannot be deferrable (templated).
    :param min_messages: accepted messages one window must yield to succeed (default 1)
        (templated).
    :param max_messages: most messages one window takes (default 100, at most 2500)
        (templated).
    :param window_timeout: how long one subscribe window listens: ``timedelta`` or
        seconds (default 5 s). Must be shorter than nsqd's msg_timeout (60 s by default)
        (templated: a rendered number is seconds).
    :param max_xcom_bytes: most bytes of JSON one window pushes to XCom (default 4 MiB,
        a sixteenth of MySQL's default packet, the smallest limit of the metadata
        databases Airflow supports; docs/operations.md has the databases' limits).
    :param message_filter: optional ``callable(record) -> bool`` or a dotted path to one;
        ``record`` is the dict described above. Rejected messages are handled per
        ``rejected``.
    :param rejected: what happens to messages the filter rejects: ``"finish"`` (default:
        FIN, gone from this channel; other channels keep their copies) or ``"requeue"``
        (REQ after ``rejected_requeue_delay``, so they come back to this channel).
    :param rejected_requeue_delay: REQ delay for rejected messages with
        ``rejected="requeue"``: ``timedelta`` or milliseconds (default 0).
    :param nsq_conn_id: the ``nsq`` Connection to use (templated).
    :param deferrable: wait in the triggerer between checks instead of holding a worker
        slot (default: ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = (
        "topic",
        "channel",
        "nsq_conn_id",
        "min_messages",
        "max_messages",
        "window_timeout",
    )
    ui_color = "#9fd5e6"
    operator_extra_links = (NSQAdminChannelLink(),)

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        min_messages: int | str = 1,
        max_messages: int | str = 100,
        window_timeout: WindowTimeout = _DEFAULT_WINDOW_TIMEOUT_S,
        max_xcom_bytes: int = DEFAULT_MAX_XCOM_BYTES,
        message_filter: MessageFilter | str | None = None,
        rejected: Rejected = "finish",
        rejected_requeue_delay: Delay = 0,
        nsq_conn_id: str = NSQConsumerHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_templated(topic):
            validate_topic_name(topic)
        if not is_templated(channel):
            validate_channel_name(channel)
        _check_literal_window_sizes(min_messages, max_messages, window_timeout)
        if message_filter is not None and not (
            callable(message_filter) or isinstance(message_filter, str)
        ):
            raise NSQValueError(
                f"message_filter must be a callable or a dotted path, got {message_filter!r}"
            )
        if rejected not in ("finish", "requeue"):
            raise NSQValueError(f"rejected must be 'finish' or 'requeue', got {rejected!r}")
        if deferrable and not is_templated(channel):
            _check_deferrable_channel(channel)
        self.topic = topic
        self.channel = channel
        # ints and float seconds; template strings until _check_rendered() converts them
        self.min_messages: Any = min_messages
        self.max_messages: Any = max_messages
        self.window_timeout: Any = (
            window_timeout
            if is_templated(window_timeout)
            else duration_to_seconds(window_timeout, "window_timeout")
        )
        self.max_xcom_bytes = check_int(
            max_xcom_bytes, "max_xcom_bytes", minimum=MIN_MAX_XCOM_BYTES
        )
        self.message_filter = message_filter
        self.rejected: Rejected = rejected
        self.rejected_requeue_delay_ms = delay_to_ms(
            rejected_requeue_delay, "rejected_requeue_delay"
        )
        self.nsq_conn_id = nsq_conn_id
        self.deferrable = deferrable
        # Carried from a poke to execute: what the last window holds, and (no HTTP API,
        # poke and reschedule modes) when the next window may open.
        self._held: _HeldMessages | None = None
        self._schedule: _PokeSchedule | None = None
        self._said_http_fallback = False

    @cached_property
    def unreachable_report(self) -> UnreachableReport:
        """What this task says while nsqd cannot be reached (see the module's docstring)."""
        return UnreachableReport(self.log, f"{self.topic}/{self.channel}")

    @cached_property
    def hook(self) -> NSQHook:
        """The sensor's one hook (its Connection read once): the check (the channel's
        depth from nsqd's HTTP API) and the windows; closing it REQs what a window
        still holds."""
        return NSQHook(nsq_conn_id=self.nsq_conn_id)

    def _check_rendered(self) -> None:
        """Check (and convert) what templates rendered: names, and the window's sizes
        with the errors a literal value gets when the DAG is parsed."""
        validate_topic_name(self.topic)
        validate_channel_name(self.channel)
        self.min_messages, self.max_messages, self.window_timeout = _window_sizes(
            self.min_messages, self.max_messages, self.window_timeout
        )

    def _channel_window(self, context: Context) -> _ChannelWindow:
        """The check and the window, with the rendered arguments."""
        rules = _WindowRules(
            topic=self.topic,
            channel=self.channel,
            min_messages=self.min_messages,
            max_messages=self.max_messages,
            window_timeout=float(self.window_timeout),
            max_xcom_bytes=self.max_xcom_bytes,
            message_filter=self.message_filter,
            rejected=self.rejected,
            rejected_requeue_delay_ms=self.rejected_requeue_delay_ms,
        )
        metrics = task_emitter(context, topic=self.topic, channel=self.channel)
        return _ChannelWindow(self, rules, metrics)

    # -- checks and windows -------------------------------------------------------------

    def poke(self, context: Context) -> bool:
        """One check, then a window if the check allows it. True when the window yielded
        at least ``min_messages`` accepted messages; they stay in flight (unanswered)
        until :meth:`execute` delivers them. An nsqd that cannot be reached is "not yet"
        (poke and reschedule modes; the deferrable mode's first check leaves that to
        :class:`_Deferral`)."""
        if self._schedule is None:
            self._schedule = _PokeSchedule(self)
        schedule = self._schedule
        schedule.poke_starts()
        self._check_rendered()
        if self.deferrable:
            return self._check_then_window(context, schedule)
        try:
            ready = self._check_then_window(context, schedule)
        except NSQError as exc:
            if not nsqd_unreachable(exc):
                raise
            schedule.after_unreachable(exc, context, self.unreachable_report)
            return False
        self.unreachable_report.answered()
        return ready

    def _check_then_window(self, context: Context, schedule: _PokeSchedule) -> bool:
        window = self._channel_window(context)
        depth = window.depth()
        if depth is not None:
            if not window.enough(depth):
                return False
        elif not schedule.window_due(context):
            return False  # backing off after a short window: it redelivered what it saw
        else:
            window.metrics.incr("nsq.sensor.checks.tcp")  # the window is the check
        self._held = window.open()
        if window.http_error is not None and not self._said_http_fallback:
            self._said_http_fallback = True  # the window reached nsqd: only HTTP failed
            self.log.warning(
                "nsqd's HTTP API could not be read (%s): the window was the check (a short "
                "window redelivers the messages it sees)",
                window.http_error,
            )
        if depth is None:
            schedule.after_window(self._held is not None, context, float(self.window_timeout))
        return self._held is not None

    def _window(self, context: Context) -> bool:
        """One window, no check first (the trigger found the messages ready)."""
        self._held = self._channel_window(context).open()
        return self._held is not None

    def _deliver(self, context: Context) -> None:
        """Push what the last window holds to XCom, then FIN it; REQ it if the push
        fails."""
        held, self._held = self._held, None
        if held is None:
            raise AirflowException(
                f"NSQSensor: no window holds messages of {self.topic}/{self.channel} to deliver"
            )
        held.deliver(context["ti"], self.log)

    # -- task entry points -------------------------------------------------------------

    def execute(self, context: Context) -> None:
        """Check (and window) until the channel delivers (or defer between checks), then
        deliver.

        Returns None: the XCom was pushed by :meth:`_deliver` before the FIN, so the task
        runner has nothing left to push.
        """
        self._check_no_mapped_dependants()
        self._check_rendered()
        try:
            if self.deferrable:
                _check_deferrable_channel(self.channel)
                deferral = _Deferral(self)
                deadline = deferral.first_deadline()
                if not deferral.unless_unreachable(lambda: self.poke(context)):
                    deferral.timeout_if_past(deadline, None)
                    deferral.defer(deadline)
            else:
                try:
                    super().execute(context)
                except AirflowRescheduleException as exc:
                    if self._schedule is not None:
                        self._schedule.reschedule_for_next_window(exc)
                    raise
                except AirflowSensorTimeout as exc:
                    if not self.unreachable_report.tries:
                        raise
                    raise AirflowSensorTimeout(
                        f"{exc} {self.unreachable_report.gave_up()}"
                    ) from None
            self._deliver(context)
        finally:
            self.hook.close()

    def execute_complete(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        deadline: str | None = None,
    ) -> None:
        """Resume after the trigger fired: on ``ready``, one window; defer again if it
        comes back short. The deadline set by the first try carries over (from the
        deferral's kwargs, or from the event where ``dag.test()`` drops those)."""
        self._check_rendered()
        deferral = _Deferral(self)
        when = deferral.resumed_deadline(event or {}, deadline)
        try:
            if not deferral.unless_unreachable(lambda: self._window(context)):
                deferral.timeout_if_past(when, None)
                deferral.defer(when)
            self._deliver(context)
        finally:
            self.hook.close()

    def _check_no_mapped_dependants(self) -> None:
        if self.has_dag() and next(self.iter_mapped_dependants(), None) is not None:
            raise NSQValueError(
                "NSQSensor's output cannot be mapped over directly (.expand(...)): the task "
                "pushes its XCom before it FINs the messages. Map over a task that takes "
                "the sensor's output and returns it."
            )

    def on_kill(self) -> None:
        self.hook.close()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the topic this sensor read, as an input dataset (needs the
        ``openlineage`` extra)."""
        return sensor_lineage(self.hook, self.topic)
