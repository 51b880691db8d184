"""The batching policy of the event trigger (``EventBatcher``), on a clock the test
moves: when a batch is handed over, how big it is, and how events are spaced. The same
policy against a real nsqd is in test_event_trigger.py."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from airflow_provider_nsq.client import NSQMessage
from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.triggers.nsq_event import (
    SETTLE_POLL_S,
    EventBatcher,
    batch_payload,
    hold_seconds,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _messages(*numbers: int) -> list[NSQMessage]:
    return [NSQMessage(0, 1, f"{n:016d}".encode(), f"m{n}".encode()) for n in numbers]


def _batcher(clock: Clock, **kwargs) -> EventBatcher:
    settings = {"batch_size": 3, "batch_timeout": 2.0, "min_event_interval": 5.0, **kwargs}
    return EventBatcher(topic="t", channel="c", clock=clock, **settings)


def test_a_batch_goes_when_full_or_batch_timeout_after_its_first_message():
    clock = Clock()
    batcher = _batcher(clock)
    assert batcher.wait() is None and batcher.pop() is None  # nothing collected
    batcher.add(_messages(1))
    assert batcher.wait() == 2.0
    clock.now += 1.5
    batcher.add(_messages(2))
    assert batcher.wait() == pytest.approx(0.5)  # counted from the first message
    clock.now += 0.5
    batch = batcher.pop()
    assert batch is not None and [r["id"] for r in batch.records] == [
        "0" * 15 + "1",
        "0" * 15 + "2",
    ]

    # A full batch goes at once; what does not fit starts the next batch.
    batcher = _batcher(clock, min_event_interval=0)
    batcher.add(_messages(1, 2, 3, 4))
    assert batcher.wait() == 0
    assert len(batcher.pop()) == 3
    assert len(batcher.held()) == 1 and batcher.wait() == 2.0


def test_the_next_batch_waits_for_the_previous_store_then_min_event_interval():
    clock = Clock()
    batcher = _batcher(clock)
    batcher.add(_messages(1, 2, 3, 4, 5, 6, 7))
    first = batcher.pop()
    assert first is not None
    # The second batch is full, but the first one's event is not stored yet.
    assert batcher.wait() == SETTLE_POLL_S and batcher.pop() is None
    clock.now += 30
    assert batcher.pop() is None  # however long that takes (Airflow's ack timeout bounds it)
    batcher.settled(first, stored=True)
    assert batcher.wait() == 5.0
    clock.now += 5.0
    second = batcher.pop()
    assert second is not None and len(second) == 3
    # Not stored (every filter rejected it, or it failed and was requeued): no spacing.
    batcher.settled(second, stored=False)
    assert batcher.wait() == 0 and len(batcher.pop()) == 1


def test_without_min_event_interval_batches_go_as_soon_as_complete():
    clock = Clock()
    batcher = _batcher(clock, batch_size=1, min_event_interval=0)
    batcher.add(_messages(1, 2, 3))
    # batch_size=1: every message is its own batch, handed over without waiting.
    assert [len(batcher.pop()) for _ in range(3)] == [1, 1, 1]
    assert batcher.pop() is None


def test_next_batch_reads_until_a_batch_is_due_and_keeps_filling_it():
    clock = Clock()
    batcher = _batcher(clock, batch_size=10)
    deliveries = [_messages(1, 2), _messages(3), [], _messages(4)]
    asked: list[float] = []

    async def read(timeout: float) -> list[NSQMessage]:
        asked.append(timeout)
        clock.now += 1.0  # each read takes a second
        return deliveries.pop(0) if deliveries else []

    batch = asyncio.run(batcher.next_batch(read))
    # Idle at first (a long read), then reads bounded by the batch's deadline: the third
    # message came within batch_timeout, the fourth after it (left for the next batch).
    assert asked == pytest.approx([30.0, 2.0, 1.0])
    assert [m.body for m in batch.messages] == [b"m1", b"m2", b"m3"]
    assert batcher.held() == []


def test_the_payload_of_a_batch_lists_records_and_counts():
    records = [{"id": "a", "attempts": 1}, {"id": "b", "attempts": 3}]
    assert batch_payload(records, filtered=2) == {
        "messages": records,
        "count": 2,
        "redelivered": 1,
        "filtered": 2,
    }


@pytest.mark.parametrize("value", [-1, 301, "soon", True, datetime.timedelta(minutes=6)])
def test_a_bad_hold_is_refused_with_its_name(value):
    with pytest.raises(NSQValueError, match="batch_timeout"):
        hold_seconds(value, "batch_timeout")


def test_a_hold_may_be_zero_or_a_timedelta():
    assert hold_seconds(0, "x") == 0.0
    assert hold_seconds(datetime.timedelta(0), "x") == 0.0
    assert hold_seconds(datetime.timedelta(seconds=1.5), "x") == 1.5
