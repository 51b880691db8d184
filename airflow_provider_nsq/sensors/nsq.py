"""``NSQSensor``: wait until a subscribe window on a channel yields enough messages, then
hand them to downstream tasks through XCom.

Ack discipline (at-least-once, nothing lost): a window takes messages in flight and
keeps them unanswered; the task pushes them to XCom itself, and only then FINs them. If
anything fails before the push is recorded, they are REQ'd, so nsqd redelivers them
(attempts + 1). A process killed outright leaves them to nsqd's msg_timeout, which
redelivers them too.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from airflow.exceptions import AirflowRescheduleException
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowSensorTimeout,
    BaseSensorOperator,
    conf,
)

from ..client import NSQMessage
from ..client.backoff import Backoff, nsqd_unreachable
from ..client.http.nsqd_api import HTTP_UNREADABLE, ChannelDepth
from ..client.records import MessageFilter, decode_record_body, import_callable, message_record
from ..client.settings.values import Delay, delay_to_ms, is_templated
from ..hooks.nsq import NSQHook
from ..lineage import sensor_lineage
from ..links import NSQAdminChannelLink
from ..metrics import emitter, task_tags
from ..protocol.errors import NSQError, NSQValueError
from ..protocol.names import is_ephemeral, validate_channel_name, validate_topic_name
from ..triggers.nsq import NSQMessageTrigger, deadline_epoch, deadline_iso
from .tcp_backoff import TCP_WINDOW_MAX_BACKOFF_S, next_reschedule, tcp_backoff
from .window_settings import (
    MAX_WINDOW_MESSAGES,
    check_literal_window_settings,
    check_window_settings,
    stored_window,
)
from .xcom_budget import (
    DEFAULT_MAX_XCOM_BYTES,
    check_max_xcom_bytes,
    list_bytes,
    record_bytes,
    records_that_fit,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

XCOM_RETURN_KEY = "return_value"
_METRICS = emitter("task")
_WINDOW_INSTEAD = "opening a window instead (a short window redelivers the messages it sees)"

Rejected = Literal["finish", "requeue"]

# Re-exported for DAGs that import them from here (the docs use client.records).
__all__ = [
    "DEFAULT_MAX_XCOM_BYTES",
    "MAX_WINDOW_MESSAGES",
    "TCP_WINDOW_MAX_BACKOFF_S",
    "MessageFilter",
    "NSQSensor",
    "decode_record_body",
    "import_callable",
    "message_record",
]


class NSQSensor(BaseSensorOperator):
    """Wait for messages on an NSQ channel and pass them downstream via XCom.

    The sensor succeeds when one subscribe window of ``window`` on ``topic``/``channel``
    yields at least ``min_messages`` messages that ``message_filter`` accepts (a window
    takes up to ``max_messages``). Its XCom value (``return_value``) is the list of those
    messages, each a dict: ``id``, ``body`` (str; base64 text when ``body_encoding ==
    "base64"``), ``body_encoding`` (``"utf-8"`` or ``"base64"``), ``attempts``,
    ``timestamp`` (ns since the epoch, set by nsqd at publish), ``topic``, ``channel``,
    ``nsqd`` (the ``host:port`` that delivered it: a message ``id`` is unique per nsqd).

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
    :param window: how long one subscribe window listens: ``timedelta`` or seconds
        (default 5 s). Must be shorter than nsqd's msg_timeout (60 s by default)
        (templated: a rendered number is seconds).
    :param max_xcom_bytes: most bytes of JSON one window pushes to XCom (default 4 MiB;
        see :mod:`~airflow_provider_nsq.sensors.xcom_budget` for the databases' limits).
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
        "window",
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
        window: datetime.timedelta | float | str = 5.0,
        max_xcom_bytes: int = DEFAULT_MAX_XCOM_BYTES,
        message_filter: MessageFilter | str | None = None,
        rejected: Rejected = "finish",
        rejected_requeue_delay: Delay = 0,
        nsq_conn_id: str = NSQHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_templated(topic):
            validate_topic_name(topic)
        if not is_templated(channel):
            validate_channel_name(channel)
        check_literal_window_settings(min_messages, max_messages, window)
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
        self.window: Any = stored_window(window)
        self.max_xcom_bytes = check_max_xcom_bytes(max_xcom_bytes)
        self.message_filter = message_filter
        self.rejected = rejected
        self.rejected_requeue_delay_ms = delay_to_ms(
            rejected_requeue_delay, "rejected_requeue_delay"
        )
        self.nsq_conn_id = nsq_conn_id
        self.deferrable = deferrable
        self._batch: list[NSQMessage] = []
        self._records: list[dict[str, Any]] = []
        # Without nsqd's HTTP API, poke mode: when the next window may open, and the
        # backoff while windows come back short in a row (each one redelivered what it
        # saw). Reschedule mode: when to wake up for the next window (tcp_backoff).
        self._next_tcp_window = 0.0
        self._tcp_backoff: Backoff | None = None
        self._reschedule_at: datetime.datetime | None = None
        self._poke_started: datetime.datetime | None = None
        self._metric_tags: dict[str, Any] = {}

    @cached_property
    def hook(self) -> NSQHook:
        return NSQHook(nsq_conn_id=self.nsq_conn_id)

    def _filter(self) -> MessageFilter | None:
        if isinstance(self.message_filter, str):
            return import_callable(self.message_filter)
        return self.message_filter

    # -- settings rendered from templates -----------------------------------------------

    def _check_rendered(self) -> None:
        """Check (and convert) what templates rendered: names, and the window's sizes
        with the errors a literal value gets when the DAG is parsed."""
        validate_topic_name(self.topic)
        validate_channel_name(self.channel)
        settings = check_window_settings(self.min_messages, self.max_messages, self.window)
        self.min_messages = settings.min_messages
        self.max_messages = settings.max_messages
        self.window = settings.window

    def _tags(self) -> dict[str, Any]:
        return {**self._metric_tags, "topic": self.topic, "channel": self.channel}

    # -- checks and windows -------------------------------------------------------------

    def poke(self, context: Context) -> bool:
        """One check, then a window if the check allows it. True when the window yielded
        at least ``min_messages`` accepted messages; they stay in flight (unanswered)
        until :meth:`execute` delivers them."""
        self._poke_started = _utcnow()
        self._check_rendered()
        self._metric_tags = task_tags(context)
        depth = self._channel_depth()
        if depth is not None:
            _METRICS.incr("nsq.sensor.checks.http", **self._tags())
            _METRICS.gauge("nsq.sensor.depth", depth.ready, **self._tags())
            if depth.ready < self.min_messages:
                self.log.info(
                    "%s of %s message(s) ready on %s/%s (nsqd's /stats at %s); no window opened",
                    depth.ready,
                    self.min_messages,
                    self.topic,
                    self.channel,
                    depth.nsqd,
                )
                return False
        elif not self._tcp_window_due(context):
            return False  # backing off after a short window: it redelivered what it saw
        else:
            _METRICS.incr("nsq.sensor.checks.tcp", **self._tags())
        ok = self._window()
        if depth is None:
            self._after_tcp_window(ok, context)
        return ok

    def _channel_depth(self) -> ChannelDepth | None:
        """The channel's depth from nsqd's HTTP API; None when the connection has no HTTP
        port, the channel is ephemeral (it exists only while a window is open), or the API
        cannot be read (then the window is the check)."""
        if is_ephemeral(self.channel):
            return None
        try:
            return self.hook.channel_depth(self.topic, self.channel)
        except HTTP_UNREADABLE as exc:
            self.log.warning("nsqd's HTTP API could not be read (%s); %s", exc, _WINDOW_INSTEAD)
            return None

    def _tcp_window_due(self, context: Context) -> bool:
        """Whether a window may open now, when it is the check (tcp_backoff)."""
        if self.reschedule:
            # Every reschedule wakes the task for a window (_after_tcp_window chose the
            # date), except the last one, at the timeout.
            started, now = self._wait_started(context), _utcnow()
            return (now - started).total_seconds() < self.timeout
        return time.monotonic() >= self._next_tcp_window

    def _wait_started(self, context: Context) -> datetime.datetime:
        """When this try's first poke began: the first reschedule's start, or (not
        rescheduled yet) this poke's."""
        first = context["ti"].get_first_reschedule_date(context)
        return first or self._poke_started or _utcnow()

    def _after_tcp_window(self, ok: bool, context: Context) -> None:
        if ok:
            self._tcp_backoff = None
            self._next_tcp_window = 0.0
            self._reschedule_at = None
            return
        if self.reschedule:
            # A new process per poke: the count of short windows so far is the number of
            # times this try was rescheduled (each after one).
            self._reschedule_at = next_reschedule(
                reschedules=int(context.get("task_reschedule_count") or 0),
                started=self._wait_started(context),
                now=_utcnow(),
                timeout=float(self.timeout),
                poke_interval=float(self.poke_interval),
                window=float(self.window),
            )
            self.log.info(
                "No HTTP API to check the channel: rescheduled for the next window at %s",
                self._reschedule_at.isoformat(),
            )
            return
        if self._tcp_backoff is None:
            self._tcp_backoff = tcp_backoff(self.poke_interval, float(self.window))
        pause = self._tcp_backoff.next()
        self._next_tcp_window = time.monotonic() + pause
        self.log.info(
            "No HTTP API to check the channel: the next window opens in %gs at the earliest",
            pause,
        )

    def _window(self) -> bool:
        """One subscribe window: True when it yielded at least ``min_messages`` accepted
        messages (kept in flight for :meth:`_deliver`); otherwise they are REQ'd."""
        hook = self.hook
        messages = hook.consume(
            self.topic,
            self.channel,
            max_messages=self.max_messages,
            timeout=float(self.window),
            ack="manual",
        )
        _METRICS.incr("nsq.sensor.window.taken", len(messages), **self._tags())
        try:
            accepted, rejected = self._split(messages)
            if len(accepted) < self.min_messages:
                self._answer_rejected(rejected)
                hook.requeue(*accepted)
                _METRICS.incr("nsq.sensor.window.requeued", len(accepted), **self._tags())
                self.log.info(
                    "%s accepted message(s) on %s/%s, %s needed%s",
                    len(accepted),
                    self.topic,
                    self.channel,
                    self.min_messages,
                    "; requeued them" if accepted else "",
                )
                hook.close()
                return False
            # The XCom cap, before anything is FINished (also the rejected messages).
            records = [self._record(m) for m in accepted]
            keep = self._fit_xcom(accepted, records)
            if keep < len(accepted):
                hook.requeue(*accepted[keep:])
                _METRICS.incr("nsq.sensor.window.requeued", len(accepted) - keep, **self._tags())
            self._answer_rejected(rejected)
        except BaseException:
            hook.close()  # REQs every unanswered message
            raise
        self._batch, self._records = accepted[:keep], records[:keep]
        return True

    def _fit_xcom(self, accepted: list[NSQMessage], records: list[dict[str, Any]]) -> int:
        """How many of the accepted messages (in delivery order) go to XCom within
        ``max_xcom_bytes``; raises when not even the first fits."""
        sizes = [record_bytes(r) for r in records]
        keep = records_that_fit(sizes, self.max_xcom_bytes)
        if keep == 0:
            first = accepted[0]
            raise NSQValueError(
                f"message {first.id} on {self.topic}/{self.channel} is "
                f"{list_bytes(sizes[:1])} bytes as an XCom value (its body is "
                f"{len(first.body)} bytes), more than max_xcom_bytes={self.max_xcom_bytes}: "
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
                len(accepted),
                list_bytes(sizes),
                self.max_xcom_bytes,
                keep,
                list_bytes(sizes[:keep]),
                len(accepted) - keep,
                f"; that is fewer than min_messages={self.min_messages}"
                if keep < self.min_messages
                else "",
            )
        return keep

    def _answer_rejected(self, rejected: list[NSQMessage]) -> None:
        """FIN or REQ what the filter rejected, as ``rejected`` says."""
        if not rejected:
            return
        if self.rejected == "finish":
            self.hook.finish(*rejected)
            _METRICS.incr("nsq.sensor.window.filtered", len(rejected), **self._tags())
        else:
            self.hook.requeue(*rejected, delay_ms=self.rejected_requeue_delay_ms)
            _METRICS.incr("nsq.sensor.window.requeued", len(rejected), **self._tags())
        self.log.info(
            "message_filter rejected %s message(s); %s them",
            len(rejected),
            "finished" if self.rejected == "finish" else "requeued",
        )

    def _split(self, messages: list[NSQMessage]) -> tuple[list[NSQMessage], list[NSQMessage]]:
        keep = self._filter()
        if keep is None:
            return messages, []
        accepted: list[NSQMessage] = []
        rejected: list[NSQMessage] = []
        for message in messages:
            record = self._record(message)
            (accepted if keep(record) else rejected).append(message)
        return accepted, rejected

    def _record(self, message: NSQMessage) -> dict[str, Any]:
        return message_record(message, self.topic, self.channel)

    def _deliver(self, context: Context) -> None:
        """Push the held batch to XCom, then FIN it; REQ it if the push fails."""
        batch, self._batch = self._batch, []
        records, self._records = self._records, []
        hook = self.hook
        try:
            hook.touch(*batch)  # a full msg_timeout for the push, counted from now
            context["ti"].xcom_push(key=XCOM_RETURN_KEY, value=records)
        except BaseException:
            self.log.warning(
                "Could not record %s message(s) from %s/%s in XCom; requeueing them",
                len(batch),
                self.topic,
                self.channel,
            )
            _METRICS.incr("nsq.sensor.window.requeued", len(batch), **self._tags())
            try:
                hook.requeue(*batch)
            except Exception as exc:  # keep the push's error; nsqd's msg_timeout still applies
                self.log.warning("REQ failed too (%s): nsqd redelivers after msg_timeout", exc)
            raise
        _METRICS.incr("nsq.sensor.window.delivered", len(batch), **self._tags())
        _METRICS.gauge(
            "nsq.sensor.window.xcom_bytes",
            list_bytes(record_bytes(r) for r in records),
            **self._tags(),
        )
        try:
            hook.finish(*batch)
        except Exception as exc:
            # The XCom is recorded, so the task succeeds; nsqd redelivers the messages
            # when their msg_timeout expires: a later run sees them again (duplicates).
            self.log.warning(
                "Pushed %s message(s) to XCom but could not FIN them (%s); nsqd will "
                "redeliver them after msg_timeout",
                len(batch),
                exc,
            )
            return
        self.log.info(
            "Pushed %s message(s) from %s/%s to XCom and finished them",
            len(batch),
            self.topic,
            self.channel,
        )

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
                deadline = time.time() + self.timeout
                if not self._unless_unreachable(self.poke, context):
                    self._timeout_if_past(deadline, None)
                    self._defer(deadline)
            else:
                try:
                    super().execute(context)
                except AirflowRescheduleException as exc:
                    # Without the HTTP API, wake up for the next window, not every
                    # poke_interval (each short window redelivered what it saw).
                    if self._reschedule_at is not None and (
                        self._reschedule_at > exc.reschedule_date
                    ):
                        exc.reschedule_date = self._reschedule_at
                    raise
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
        event = event or {}
        status = event.get("status")
        when = deadline_epoch(deadline or event.get("deadline"))
        if when is None:  # an event from an older trigger: bound the wait from now
            when = time.time() + self.timeout
        if status == "timeout":
            self._timeout_if_past(
                when, event.get("ready"), force=True, unreachable=event.get("unreachable")
            )
        if status not in ("ready", "message"):  # "message": the trigger's older payload
            detail = event.get("message", "the trigger ended without an event")
            raise AirflowException(f"NSQSensor trigger failed: {detail}")
        self._check_rendered()
        self._metric_tags = task_tags(context)
        try:
            if not self._unless_unreachable(lambda _: self._window(), context):
                self._timeout_if_past(when, None)
                self._defer(when)
            self._deliver(context)
        finally:
            self.hook.close()

    def _unless_unreachable(self, check: Callable[[Context], bool], context: Context) -> bool:
        """``check(context)`` before a deferral; an nsqd that cannot be reached counts as
        "not yet" (False), and the trigger tries it again with backoff until the deadline:
        nsqd may be restarting. Any other error fails the task."""
        try:
            return check(context)
        except NSQError as exc:
            if not nsqd_unreachable(exc):
                raise
            self.log.warning(
                "nsqd cannot be reached for %s/%s (%s); deferring: the trigger tries again "
                "at once, then with backoff, until the sensor's timeout",
                self.topic,
                self.channel,
                exc,
            )
            return False

    def _timeout_if_past(
        self,
        deadline: float,
        ready: int | None,
        force: bool = False,
        unreachable: str | None = None,
    ) -> None:
        if force or time.time() >= deadline:
            seen = "" if ready is None else f" ({ready} were ready at the last check)"
            if unreachable:
                seen += f"; nsqd could not be reached at the last try: {unreachable}"
            raise AirflowSensorTimeout(
                f"Sensor has timed out: {self.topic}/{self.channel} did not yield "
                f"{self.min_messages} message(s) within {self.timeout}s{seen}"
            )

    def _defer(self, deadline: float) -> None:
        remaining = max(deadline - time.time(), 1.0)
        iso = deadline_iso(deadline)
        self.defer(
            trigger=NSQMessageTrigger(
                topic=self.topic,
                channel=self.channel,
                nsq_conn_id=self.nsq_conn_id,
                min_messages=self.min_messages,
                deadline=deadline,
                poll_interval=float(self.poke_interval),
            ),
            method_name="execute_complete",
            kwargs={"deadline": iso},
            # The trigger also fires its own timeout event at the deadline: dag.test()
            # runs triggers without applying this one.
            timeout=datetime.timedelta(seconds=remaining),
        )

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


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _check_deferrable_channel(channel: str) -> None:
    if is_ephemeral(channel):
        raise NSQValueError(
            f"channel {channel!r} is ephemeral: nsqd deletes it when the last window "
            "closes, so messages cannot wait for the task while it is deferred; use a "
            "durable channel with deferrable=True"
        )
