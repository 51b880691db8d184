"""What a sensor's window hands downstream, and when its messages are FINished.

Ack discipline (at-least-once, nothing lost): a window keeps the messages it accepted in
flight, unanswered (:class:`HeldMessages`). The task TOUCHes them (a full msg_timeout
for the push), pushes their records to XCom itself, and only then FINs them. If the
push fails they are REQ'd, so nsqd redelivers them (attempts + 1); a process killed
outright leaves them to nsqd's msg_timeout, which redelivers them too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..client.message import NSQMessage
from ..metrics import emitter
from .xcom_budget import list_bytes, record_bytes

if TYPE_CHECKING:
    import logging

    from ..hooks.nsq import NSQHook

XCOM_RETURN_KEY = "return_value"
_METRICS = emitter("task")


@dataclass
class HeldMessages:
    """The messages one window accepted and keeps in flight until :meth:`deliver`.

    :param hook: the hook whose consume window took them (it answers them).
    :param topic: the topic they came from.
    :param channel: the channel they came from.
    :param messages: the messages, in delivery order.
    :param records: their XCom records, in the same order.
    :param tags: the metrics' tags (the task's, topic, channel).
    """

    hook: NSQHook
    topic: str
    channel: str
    messages: list[NSQMessage]
    records: list[dict[str, Any]]
    tags: dict[str, Any] = field(default_factory=dict)

    def deliver(self, ti: Any, log: logging.Logger | Any) -> None:
        """TOUCH the messages, push their records to ``ti``'s XCom (``return_value``),
        then FIN them; REQ them if the push fails (and re-raise its error).

        :param ti: the task instance (``context["ti"]``).
        :param log: the task's logger.
        """
        batch, records, hook = self.messages, self.records, self.hook
        try:
            hook.touch(*batch)  # a full msg_timeout for the push, counted from now
            ti.xcom_push(key=XCOM_RETURN_KEY, value=records)
        except BaseException:
            log.warning(
                "Could not record %s message(s) from %s/%s in XCom; requeueing them",
                len(batch),
                self.topic,
                self.channel,
            )
            _METRICS.incr("nsq.sensor.window.requeued", len(batch), **self.tags)
            try:
                hook.requeue(*batch)
            except Exception as exc:  # keep the push's error; nsqd's msg_timeout still applies
                log.warning("REQ failed too (%s): nsqd redelivers after msg_timeout", exc)
            raise
        _METRICS.incr("nsq.sensor.window.delivered", len(batch), **self.tags)
        _METRICS.gauge(
            "nsq.sensor.window.xcom_bytes",
            list_bytes(record_bytes(r) for r in records),
            **self.tags,
        )
        try:
            hook.finish(*batch)
        except Exception as exc:
            # The XCom is recorded, so the task succeeds; nsqd redelivers the messages
            # when their msg_timeout expires: a later run sees them again (duplicates).
            log.warning(
                "Pushed %s message(s) to XCom but could not FIN them (%s); nsqd will "
                "redeliver them after msg_timeout",
                len(batch),
                exc,
            )
            return
        log.info(
            "Pushed %s message(s) from %s/%s to XCom and finished them",
            len(batch),
            self.topic,
            self.channel,
        )
