"""The sensor's deferrable mode: check once on the worker, then wait in the triggerer
(:class:`~airflow_provider_nsq.triggers.nsq.NSQMessageTrigger`) until the channel holds
enough messages, and open one window when the task resumes; defer again when that
window comes back short.

One deadline bounds the whole wait, across deferrals: set by the first try from the
sensor's ``timeout``, carried in the deferral's kwargs (and in the trigger's events,
where ``dag.test()`` drops those). An nsqd that cannot be reached counts as "not yet":
the trigger tries it again with backoff until the deadline, nsqd may be restarting.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowSensorTimeout

from ..client.backoff import nsqd_unreachable
from ..protocol.errors import NSQError, NSQValueError
from ..protocol.names import is_ephemeral
from ..triggers.nsq import NSQMessageTrigger, deadline_epoch, deadline_iso


def check_deferrable_channel(channel: str) -> None:
    """Refuse an ``#ephemeral`` channel: it cannot keep messages while the task waits."""
    if is_ephemeral(channel):
        raise NSQValueError(
            f"channel {channel!r} is ephemeral: nsqd deletes it when the last window "
            "closes, so messages cannot wait for the task while it is deferred; use a "
            "durable channel with deferrable=True"
        )


@dataclass(frozen=True)
class DeferrableMode:
    """What a deferrable sensor does between its windows (rendered values).

    :param topic: the sensor's topic.
    :param channel: the sensor's channel (durable).
    :param nsq_conn_id: the sensor's connection id.
    :param min_messages: accepted messages one window must yield.
    :param timeout: the sensor's ``timeout``, seconds.
    :param poke_interval: the sensor's ``poke_interval``, seconds: the trigger's first
        pause.
    :param log: the task's logger.
    """

    topic: str
    channel: str
    nsq_conn_id: str
    min_messages: int
    timeout: float
    poke_interval: float
    log: Any

    def first_deadline(self) -> float:
        """The deadline of a wait that starts now (seconds since the epoch)."""
        return time.time() + self.timeout

    def resumed_deadline(self, event: dict[str, Any], deadline: str | None) -> float:
        """The deadline the first try set, on resume after the trigger fired ``event``;
        raises the sensor's timeout, or the trigger's error, when that is what it says."""
        status = event.get("status")
        when = deadline_epoch(deadline or event.get("deadline"))
        if when is None:  # an event from an older trigger: bound the wait from now
            when = self.first_deadline()
        if status == "timeout":
            self.timeout_if_past(
                when, event.get("ready"), force=True, unreachable=event.get("unreachable")
            )
        if status not in ("ready", "message"):  # "message": the trigger's older payload
            detail = event.get("message", "the trigger ended without an event")
            raise AirflowException(f"NSQSensor trigger failed: {detail}")
        return when

    def unless_unreachable(self, check: Callable[[], bool]) -> bool:
        """``check()`` before a deferral; an nsqd that cannot be reached counts as "not
        yet" (False), and the trigger tries it again with backoff until the deadline:
        nsqd may be restarting. Any other error fails the task."""
        try:
            return check()
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
            raise AirflowSensorTimeout(
                f"Sensor has timed out: {self.topic}/{self.channel} did not yield "
                f"{self.min_messages} message(s) within {self.timeout}s{seen}"
            )

    def deferral(self, deadline: float) -> dict[str, Any]:
        """The keyword arguments of ``self.defer(...)`` for a wait until ``deadline``:
        the trigger, the method to resume in, the deadline for it, Airflow's timeout."""
        remaining = max(deadline - time.time(), 1.0)
        return {
            "trigger": NSQMessageTrigger(
                topic=self.topic,
                channel=self.channel,
                nsq_conn_id=self.nsq_conn_id,
                min_messages=self.min_messages,
                deadline=deadline,
                poll_interval=float(self.poke_interval),
            ),
            "method_name": "execute_complete",
            "kwargs": {"deadline": deadline_iso(deadline)},
            # The trigger also fires its own timeout event at the deadline: dag.test()
            # runs triggers without applying this one.
            "timeout": datetime.timedelta(seconds=remaining),
        }
