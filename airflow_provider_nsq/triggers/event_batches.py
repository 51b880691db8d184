"""Group NSQ messages into asset events: the batching policy of the event trigger.

One asset event carries a :class:`MessageBatch`: up to ``batch_size`` messages, collected
for up to ``batch_timeout`` seconds after the first one arrived. A burst therefore
becomes a few database rows instead of one per message.

``min_event_interval`` spaces the events out: a batch is handed over only once the
previous batch has been settled (its event stored, or given up) and at least that many
seconds have passed since the previous event was stored. Meanwhile its messages stay in
flight (the holder TOUCHes them) and later messages keep filling it up to
``batch_size``. The reason is Airflow's scheduler up to 3.3: storing an asset event
queues a run of each DAG scheduled on the asset only when none is queued yet, and the
run it then creates takes the events stored up to that queue entry. An event stored
while the entry waits belongs to no run until a *later* event queues the next one.
Events at least ``min_event_interval`` apart each find the previous entry already turned
into a run, as long as the scheduler creates it within that interval
(docs/event-driven.md says when it does not).

Both ways the trigger runs use :class:`EventBatcher` the same way: the Airflow 3.3
ack-mode producer settles a batch when Airflow confirms its events stored (or gives up);
the pre-3.3 ``run()`` settles it right after handing the event to the triggerer.
"""

from __future__ import annotations

import datetime
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..client import NSQMessage
from ..client.settings.values import parse_seconds
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT
from ..protocol.errors import NSQValueError
from ..protocol.value_checks import check_int, is_number

#: Messages per event by default: a burst of up to a thousand becomes one event, and a
#: busy topic (100 messages/s) one event per ``DEFAULT_MIN_EVENT_INTERVAL_S`` and the
#: store (about 6 s): batches of ~600 keep up with it.
DEFAULT_BATCH_SIZE = 1000
#: How long a batch collects after its first message: a burst published by one client
#: reaches the trigger within a fraction of a second (docs/event-driven.md, "Measured").
DEFAULT_BATCH_TIMEOUT_S = 2.0
#: Spacing between two events of one trigger when batching: several times how long the
#: scheduler takes to turn a queued asset event into a DAG run (about a second here).
DEFAULT_MIN_EVENT_INTERVAL_S = 5.0
#: Upper bound of ``batch_timeout`` and ``min_event_interval``: a held message is TOUCHed,
#: but nsqd ends its life --max-msg-timeout (15 min by default) after delivery anyway.
MAX_HOLD_S = 300.0
#: How often a batch waiting for the previous one to be settled looks again.
SETTLE_POLL_S = 0.2
#: How long one read waits when nothing is being collected (the consumer keeps its
#: connections alive, re-polls nsqlookupd and reconnects inside the read).
IDLE_READ_S = 30.0


def check_batch_size(batch_size: object) -> int:
    """``batch_size`` as an int 1-2500 (nsqd's default --max-rdy-count: a batch can only
    hold messages in flight at once)."""
    return check_int(batch_size, "batch_size", minimum=1, maximum=DEFAULT_MAX_RDY_COUNT)


def hold_seconds(value: object, what: str) -> float:
    """A hold (``batch_timeout``, ``min_event_interval``) as float seconds, 0-300: a number
    of seconds or a ``timedelta``."""
    if (is_number(value) and value == 0) or value == datetime.timedelta(0):
        return 0.0
    try:
        seconds = parse_seconds(value)
    except NSQValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_HOLD_S:
        raise NSQValueError(
            f"{what} must be 0-{MAX_HOLD_S:g} seconds (a number or a timedelta; nsqd's "
            f"--max-msg-timeout ends a held message's life), got {value!r}"
        )
    return seconds


class MessageBatch:
    """Messages that become one asset event, with their JSON-safe records.

    ``number`` orders the batches of one stream. Triggers sharing a stream mark the
    records their ``message_filter`` accepted (:meth:`accept`); a message no trigger
    accepted is one every filter rejected (dead-lettered, then FINished).
    """

    __slots__ = ("_accepted", "messages", "number", "opened_at", "records")

    def __init__(self, number: int, opened_at: float) -> None:
        self.number = number
        self.opened_at = opened_at
        self.messages: list[NSQMessage] = []
        self.records: list[dict[str, Any]] = []
        self._accepted: set[int] = set()

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        return f"<MessageBatch #{self.number}: {len(self)} message(s)>"

    def add(self, message: NSQMessage, record: dict[str, Any]) -> None:
        self.messages.append(message)
        self.records.append(record)

    def accept(self, indexes: Iterable[int]) -> None:
        """Record that a trigger's filter accepted the messages at ``indexes``."""
        self._accepted.update(indexes)

    def accepted(self, index: int) -> bool:
        """True when some trigger's filter accepted the message at ``index``."""
        return index in self._accepted


def batch_payload(records: list[dict[str, Any]], *, filtered: int) -> dict[str, Any]:
    """The event payload of a batch (``batch_size`` > 1).

    :param records: the records of the batch this trigger accepted, in delivery order.
    :param filtered: how many messages of the batch the trigger's filter rejected.
    """
    return {
        "messages": records,
        "count": len(records),
        "redelivered": sum(1 for r in records if r["attempts"] > 1),
        "filtered": filtered,
    }


class EventBatcher:
    """Collects delivered messages into :class:`MessageBatch` es and decides when the next
    one is handed over (see the module docstring).

    :param batch_size: at most this many messages per batch.
    :param batch_timeout: seconds a batch collects after its first message (0: what has
        arrived by then).
    :param min_event_interval: seconds between the previous event being stored and the
        next batch being handed over; 0 hands batches over as soon as they are complete,
        without waiting for the previous one to be settled.
    :param to_record: the JSON-safe record of a delivered message.
    :param clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        batch_size: int,
        batch_timeout: float,
        min_event_interval: float,
        to_record: Callable[[NSQMessage], dict[str, Any]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.batch_size = check_batch_size(batch_size)
        self.batch_timeout = hold_seconds(batch_timeout, "batch_timeout")
        self.min_event_interval = hold_seconds(min_event_interval, "min_event_interval")
        self._to_record = to_record
        self._clock = clock
        self._collecting: deque[MessageBatch] = deque()
        self._numbers = 0
        self._unsettled = 0
        self._last_stored: float | None = None

    # -- collecting ----------------------------------------------------------------------

    def add(self, messages: Iterable[NSQMessage]) -> None:
        """Add delivered messages: to the newest batch until it is full, then to a new one."""
        for message in messages:
            batch = self._collecting[-1] if self._collecting else None
            if batch is None or len(batch) >= self.batch_size:
                self._numbers += 1
                batch = MessageBatch(self._numbers, self._clock())
                self._collecting.append(batch)
            batch.add(message, self._to_record(message))

    def held(self) -> list[NSQMessage]:
        """Messages collected and not handed over yet (their holder keeps them alive)."""
        return [m for batch in self._collecting for m in batch.messages]

    def wait(self) -> float | None:
        """Seconds until the oldest batch may be handed over: 0 when now; None when there
        is nothing to hand over."""
        if not self._collecting:
            return None
        head = self._collecting[0]
        now = self._clock()
        due = now if len(head) >= self.batch_size else head.opened_at + self.batch_timeout
        if self.min_event_interval > 0:
            if self._unsettled:
                # The previous event is not stored yet: the spacing cannot start.
                return max(due - now, SETTLE_POLL_S)
            if self._last_stored is not None:
                due = max(due, self._last_stored + self.min_event_interval)
        return max(due - now, 0.0)

    def pop(self) -> MessageBatch | None:
        """The oldest batch when it may be handed over now (it then awaits :meth:`settled`)."""
        if self.wait() != 0:
            return None
        self._unsettled += 1
        return self._collecting.popleft()

    async def next_batch(
        self, read: Callable[[float], Awaitable[list[NSQMessage]]]
    ) -> MessageBatch:
        """Read (``read(timeout)``: the consumer's deliveries within ``timeout`` seconds)
        until a batch may be handed over, and return it."""
        while True:
            batch = self.pop()
            if batch is not None:
                return batch
            wait = self.wait()
            self.add(await read(IDLE_READ_S if wait is None else wait))

    # -- settling ------------------------------------------------------------------------

    def settled(self, batch: MessageBatch, *, stored: bool) -> None:
        """A handed-over batch is done with: ``stored`` when an event of it was stored
        (the next one is spaced from now), False when none was (rejected, or failed and
        requeued)."""
        self._unsettled = max(self._unsettled - 1, 0)
        if stored:
            self._last_stored = self._clock()
