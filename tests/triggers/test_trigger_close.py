"""A trigger closed however Airflow, ``dag.test()`` or Python closes it leaves nothing
"ignored" behind: cancelled mid-wait (the triggerer), closed with ``aclose()`` at its
yield, or dropped and garbage-collected (inside the event loop, and after it, where
``dag.test()``-style callers leave a generator they took one event from). Python reports
what a closing generator could not do as an unraisable exception ("async generator
ignored GeneratorExit"); here every such report fails the test, as does an asyncio error
in the log (a task destroyed while pending), and the trigger's connections close.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from airflow_provider_nsq import metrics
from airflow_provider_nsq.testing.polling import async_wait_for
from airflow_provider_nsq.triggers import health
from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger
from airflow_provider_nsq.triggers.nsq_event import NSQEventTrigger
from tests.support.marks import unraisable_is_an_error

pytestmark = unraisable_is_an_error

CHANNEL = "airflow"


@contextlib.contextmanager
def nothing_ignored(caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    """Collects what Python reports as unraisable (and asyncio logs as an error) while
    the block runs, garbage collection included; the block's caller asserts it empty."""
    ignored: list[str] = []

    def record(unraisable: Any) -> None:
        what = unraisable.err_msg or "Exception ignored in"
        ignored.append(f"{what}: {unraisable.object!r}: {unraisable.exc_value!r}")

    previous, sys.unraisablehook = sys.unraisablehook, record
    caplog.set_level(logging.ERROR, logger="asyncio")
    try:
        yield ignored
        gc.collect()
    finally:
        sys.unraisablehook = previous
    ignored += [r.getMessage() for r in caplog.records if r.name == "asyncio"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def reports(mocker, monkeypatch) -> Any:
    """The count of the deferred sensor's health reports so far (every 0.05 s)."""
    monkeypatch.setattr(health, "HEALTH_INTERVAL_S", 0.05)
    stats = mocker.Mock()
    mocker.patch.object(metrics, "_triggerer_stats", return_value=stats)
    return lambda: sum(
        1 for c in stats.incr.call_args_list if c.args[0] == "nsq.sensor.health.reports"
    )


# -- the deferred sensor's trigger ---------------------------------------------------------


@pytest.fixture
def unreachable(monkeypatch) -> None:
    """``nsq_default`` on a closed port: the trigger waits, retrying, until its deadline."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://127.0.0.1:{_closed_port()}?connect_timeout=2"
    )


def _message_trigger(deadline_in: float) -> NSQMessageTrigger:
    return NSQMessageTrigger(topic="events", channel="etl", deadline=time.time() + deadline_in)


def test_a_message_trigger_cancelled_mid_wait(unreachable, reports, caplog):
    async def scenario() -> None:
        waiting = asyncio.ensure_future(anext(_message_trigger(60).run()))
        await async_wait_for(lambda: reports() >= 2, 10)  # it runs, and waits between checks
        waiting.cancel()  # as the triggerer cancels a trigger's task
        await asyncio.gather(waiting, return_exceptions=True)
        stopped_at = reports()
        await asyncio.sleep(0.3)  # six report intervals
        assert reports() == stopped_at  # no report after the trigger ended

    with nothing_ignored(caplog) as ignored:
        asyncio.run(scenario())
    assert ignored == []


@pytest.mark.parametrize("close", ["aclose", "garbage-collected"])
def test_a_message_trigger_closed_at_its_yield_inside_the_loop(unreachable, reports, caplog, close):
    async def scenario() -> None:
        events = _message_trigger(0.5).run()
        event = await asyncio.wait_for(anext(events), 20)
        assert event.payload["status"] == "timeout"
        if close == "aclose":
            await events.aclose()
        else:
            del events
            gc.collect()  # the loop's finalizer closes it: aclose() in a task of its own
            for _ in range(3):  # that task made, then run
                await asyncio.sleep(0)
        stopped_at = reports()
        await asyncio.sleep(0.3)
        assert reports() == stopped_at

    with nothing_ignored(caplog) as ignored:
        asyncio.run(scenario())
    assert ignored == []


@pytest.mark.parametrize("held", [False, True], ids=["dropped-in-the-loop", "held-past-it"])
def test_a_message_trigger_first_stepped_outside_the_loop(unreachable, reports, caplog, held):
    # asyncio.run(trigger.run().__anext__()): the generator's first step is taken outside
    # the loop, so no loop finalizes it: the garbage collector closes it at its yield,
    # inside the loop when nothing else holds it, or after the loop when something does.
    with nothing_ignored(caplog) as ignored:
        events = [_message_trigger(0.5).run()]
        if held:
            event = asyncio.run(asyncio.wait_for(events[0].__anext__(), 20))
        else:  # nothing but its first step (an awaitable, in the loop) holds it
            event = asyncio.run(asyncio.wait_for(events.pop().__anext__(), 20))
        assert event.payload["status"] == "timeout"
        del events
        gc.collect()
    assert ignored == []


# -- the event trigger ------------------------------------------------------------------


def _clients(nsqd, topic: str) -> list[Any]:
    return (nsqd.channel_stats(topic, CHANNEL) or {}).get("clients", [])


async def _first_event(events: AsyncIterator[Any]) -> Any:
    return await asyncio.wait_for(anext(events), 15)


def test_an_event_trigger_cancelled_mid_wait(nsqd, nsq_default, nsq_topic, caplog):
    """Cancelled while it waits for the next message, as the triggerer cancels it."""
    nsqd.http_publish(nsq_topic, b"first")

    def settled() -> bool:
        stats = nsqd.channel_stats(nsq_topic, CHANNEL) or {}
        return stats.get("in_flight_count") == 0 and stats.get("depth") == 0

    async def scenario() -> None:
        events = NSQEventTrigger(topic=nsq_topic, channel=CHANNEL, batch_size=1).run()
        await _first_event(events)
        waiting = asyncio.ensure_future(anext(events))  # settles the first, then waits
        await asyncio.to_thread(nsqd.wait_for, settled, 10)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await asyncio.to_thread(nsqd.wait_for, lambda: not _clients(nsqd, nsq_topic), 10)

    with nothing_ignored(caplog) as ignored:
        asyncio.run(scenario())
    assert ignored == []


@pytest.mark.parametrize("close", ["aclose", "garbage-collected"])
def test_an_event_trigger_closed_at_its_yield(nsqd, nsq_default, nsq_topic, caplog, close):
    """Closed right after it yielded an event, before it settled it: the message goes
    back (REQ) and the connection closes."""
    nsqd.http_publish(nsq_topic, b"handed over")

    async def scenario() -> None:
        events = NSQEventTrigger(topic=nsq_topic, channel=CHANNEL, batch_size=1).run()
        await _first_event(events)
        if close == "aclose":
            await events.aclose()
        else:
            del events
            gc.collect()
        await asyncio.to_thread(nsqd.wait_for, lambda: not _clients(nsqd, nsq_topic), 10)

    with nothing_ignored(caplog) as ignored:
        asyncio.run(scenario())
    assert ignored == []
    stats = nsqd.channel_stats(nsq_topic, CHANNEL)
    assert (stats["depth"], stats["requeue_count"]) == (1, 1)


@pytest.mark.parametrize("held", [False, True], ids=["dropped-in-the-loop", "held-past-it"])
def test_an_event_trigger_first_stepped_outside_the_loop(
    nsqd, nsq_default, nsq_topic, caplog, held
):
    """The loop still closes the subscription: the message goes back at once (REQ), not
    after the trigger's msg_timeout."""
    nsqd.http_publish(nsq_topic, b"handed over")
    with nothing_ignored(caplog) as ignored:
        events = [NSQEventTrigger(topic=nsq_topic, channel=CHANNEL, batch_size=1).run()]
        if held:
            event = asyncio.run(asyncio.wait_for(events[0].__anext__(), 15))
        else:  # nothing but its first step (an awaitable, in the loop) holds it
            event = asyncio.run(asyncio.wait_for(events.pop().__anext__(), 15))
        assert event.payload["body"] == "handed over"
        del events
        gc.collect()
    assert ignored == []
    nsqd.wait_for(lambda: not _clients(nsqd, nsq_topic), 10)
    stats = nsqd.channel_stats(nsq_topic, CHANNEL)
    assert (stats["depth"], stats["requeue_count"]) == (1, 1)
