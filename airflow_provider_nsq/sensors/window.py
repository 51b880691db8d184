"""The sensor's check of its channel: how many messages are ready (nsqd's HTTP API:
nothing is taken), and one consume window (``SUB``, ``RDY max_messages``, collect for
``window_timeout``, ``CLS``) that keeps what it accepted in flight for the task to
deliver (:class:`~.delivery.HeldMessages`).

A window that yields fewer than ``min_messages`` accepted messages hands them back at
once (``REQ``, no delay, ``attempts + 1``). What the filter rejected is FINished or
REQ'd as ``rejected`` says. Over ``max_xcom_bytes`` the window keeps what fits, in
delivery order, and hands the rest back before anything is FINished
(:mod:`~.xcom_budget`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..client.http.nsqd_api import HTTP_UNREADABLE, ChannelDepth
from ..client.message import MessageFilter, NSQMessage, import_callable, message_record
from ..metrics import emitter
from ..protocol.errors import NSQValueError
from ..protocol.names import is_ephemeral
from .delivery import HeldMessages
from .xcom_budget import list_bytes, record_bytes, records_that_fit

if TYPE_CHECKING:
    import logging

    from ..hooks.nsq import NSQHook

Rejected = Literal["finish", "requeue"]

_METRICS = emitter("task")
_WINDOW_INSTEAD = "opening a window instead (a short window redelivers the messages it sees)"


@dataclass(frozen=True, slots=True)
class WindowRules:
    """What one window takes, keeps and hands back: the sensor's arguments, rendered
    and checked (see :class:`~airflow_provider_nsq.sensors.nsq.NSQSensor`)."""

    topic: str
    channel: str
    min_messages: int
    max_messages: int
    window_timeout: float  # seconds
    max_xcom_bytes: int
    message_filter: MessageFilter | str | None
    rejected: Rejected
    rejected_requeue_delay_ms: int


class ChannelWindow:
    """One check of a sensor's channel through its hook, and the window it opens.

    :param hook: the sensor's hook; closing it REQs what a window still holds.
    :param rules: what the window takes, keeps and hands back.
    :param log: the task's logger.
    :param tags: the metrics' tags (the task's, topic, channel).
    """

    def __init__(
        self,
        hook: NSQHook,
        rules: WindowRules,
        log: logging.Logger | Any,
        tags: dict[str, Any],
    ) -> None:
        self.hook = hook
        self.rules = rules
        self.log = log
        self.tags = tags

    # -- the check ------------------------------------------------------------------------

    def depth(self) -> ChannelDepth | None:
        """The channel's depth from nsqd's HTTP API; None when the connection has no HTTP
        port, the channel is ephemeral (it exists only while a window is open), or the API
        cannot be read (then the window is the check)."""
        if is_ephemeral(self.rules.channel):
            return None
        try:
            depth = self.hook.channel_depth(self.rules.topic, self.rules.channel)
        except HTTP_UNREADABLE as exc:
            self.log.warning("nsqd's HTTP API could not be read (%s); %s", exc, _WINDOW_INSTEAD)
            return None
        if depth is not None:
            _METRICS.incr("nsq.sensor.checks.http", **self.tags)
            _METRICS.gauge("nsq.sensor.depth", depth.ready, **self.tags)
        return depth

    def enough(self, depth: ChannelDepth) -> bool:
        """Whether ``depth`` holds ``min_messages`` ready ones (logged when not)."""
        if depth.ready >= self.rules.min_messages:
            return True
        self.log.info(
            "%s of %s message(s) ready on %s/%s (nsqd's /stats at %s); no window opened",
            depth.ready,
            self.rules.min_messages,
            self.rules.topic,
            self.rules.channel,
            depth.nsqd,
        )
        return False

    def count_window_check(self) -> None:
        """Count a check that is a window (no HTTP API to ask)."""
        _METRICS.incr("nsq.sensor.checks.tcp", **self.tags)

    # -- the window -----------------------------------------------------------------------

    def open(self) -> HeldMessages | None:
        """One consume window: the accepted messages that fit in XCom, held in flight;
        None when fewer than ``min_messages`` were accepted (they went back)."""
        hook, rules = self.hook, self.rules
        messages = hook.consume(
            rules.topic,
            rules.channel,
            max_messages=rules.max_messages,
            timeout=rules.window_timeout,
            ack="manual",
        )
        _METRICS.incr("nsq.sensor.window.taken", len(messages), **self.tags)
        try:
            accepted, rejected = self._split(messages)
            if len(accepted) < rules.min_messages:
                self._answer_rejected(rejected)
                hook.requeue(*accepted)
                _METRICS.incr("nsq.sensor.window.requeued", len(accepted), **self.tags)
                self.log.info(
                    "%s accepted message(s) on %s/%s, %s needed%s",
                    len(accepted),
                    rules.topic,
                    rules.channel,
                    rules.min_messages,
                    "; requeued them" if accepted else "",
                )
                hook.close()
                return None
            # The XCom cap, before anything is FINished (also the rejected messages).
            records = [self._record(m) for m in accepted]
            keep = self._fit_xcom(accepted, records)
            if keep < len(accepted):
                hook.requeue(*accepted[keep:])
                _METRICS.incr("nsq.sensor.window.requeued", len(accepted) - keep, **self.tags)
            self._answer_rejected(rejected)
        except BaseException:
            hook.close()  # REQs every unanswered message
            raise
        return HeldMessages(
            hook, rules.topic, rules.channel, accepted[:keep], records[:keep], self.tags
        )

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
                len(accepted),
                list_bytes(sizes),
                rules.max_xcom_bytes,
                keep,
                list_bytes(sizes[:keep]),
                len(accepted) - keep,
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
            _METRICS.incr("nsq.sensor.window.filtered", len(rejected), **self.tags)
        else:
            self.hook.requeue(*rejected, delay_ms=self.rules.rejected_requeue_delay_ms)
            _METRICS.incr("nsq.sensor.window.requeued", len(rejected), **self.tags)
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
            record = self._record(message)
            (accepted if keep(record) else rejected).append(message)
        return accepted, rejected

    def _record(self, message: NSQMessage) -> dict[str, Any]:
        return message_record(message, self.rules.topic, self.rules.channel)
