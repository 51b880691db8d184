"""NSQEventTrigger against a real nsqd (embedded, or NSQD_ADDRESS), driven the way the
Airflow 3.3 triggerer drives it: Airflow's own SharedStreamManager (ack mode), each
event bound as ``run_trigger`` binds it, and "stored" only when the test confirms it as
the triggerer's supervisor does after writing the asset event. On Airflow 3.0-3.2 (no
shared streams) those tests skip and the ``run()`` path, which those versions use, is
tested on its own."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.triggers.base import TriggerEvent

from airflow_provider_nsq.client.message import decode_record_body
from airflow_provider_nsq.protocol.errors import NSQTLSError, NSQValueError
from airflow_provider_nsq.triggers.nsq_event import ACK_MODE, NSQEventTrigger
from tests.support.marks import needs_airflow, unraisable_is_an_error
from tests.support.nsqd_contents import read

pytestmark = unraisable_is_an_error

CHANNEL = "airflow"
#: The tests that drive the shared-stream ack mode.
ack_mode = needs_airflow("3.3", "the shared-stream ack mode (airflow.triggers.shared_stream)")


class Triggerer:
    """The triggerer's part for shared-stream triggers, minus the database."""

    def __init__(self, ack_timeout: float = 300.0) -> None:
        from airflow.triggers.shared_stream import SharedStreamManager

        self.manager = SharedStreamManager(ack_timeout=ack_timeout)
        self.events: list[tuple[int, TriggerEvent, int | None]] = []
        self.failures: dict[int, BaseException] = {}
        self._confirmed: set[int] = set()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._changed = asyncio.Event()

    def start(self, trigger_id: int, trigger: NSQEventTrigger) -> None:
        self._tasks[trigger_id] = asyncio.create_task(self._run(trigger_id, trigger))

    async def _run(self, trigger_id: int, trigger: NSQEventTrigger) -> None:
        key = trigger.shared_stream_key()
        try:
            stream = self.manager.subscribe(trigger_id=trigger_id, trigger=trigger, key=key)
            async for event in trigger.filter_shared_stream(stream):
                # As run_trigger: bind with no await between taking the event and queueing it.
                seq = self.manager.bind_pending_event(trigger_id=trigger_id, key=key)
                self.events.append((trigger_id, event, seq))
                self._changed.set()
        except Exception as exc:
            self.failures[trigger_id] = exc
            self._changed.set()
        finally:
            await self.manager.unsubscribe(trigger_id, key)

    def payloads(self, trigger_id: int | None = None) -> list[dict[str, Any]]:
        return [e.payload for tid, e, _ in self.events if trigger_id in (None, tid)]

    async def until(self, condition: Callable[[], bool], timeout: float = 20.0) -> None:
        async def wait() -> None:
            while not condition():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)

    def persist(self) -> None:
        """Confirm every event so far as stored (the supervisor's events_persisted)."""
        seqs = [seq for _, _, seq in self.events if seq is not None and seq not in self._confirmed]
        self._confirmed.update(seqs)
        self.manager.confirm_persisted(seqs)

    async def stop(self, trigger_id: int) -> None:
        task = self._tasks.pop(trigger_id)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def stop_all(self) -> None:
        for trigger_id in list(self._tasks):
            await self.stop(trigger_id)


def _trigger(topic: str, **kwargs: Any) -> NSQEventTrigger:
    """One event per message unless a test says otherwise (``batch_size=1``): the
    per-message FIN/REQ discipline these tests pin is the same for a batch."""
    return NSQEventTrigger(topic=topic, channel=CHANNEL, **{"batch_size": 1, **kwargs})


async def _until(nsqd, condition: Callable[[], Any], timeout: float = 20.0) -> None:
    await asyncio.to_thread(nsqd.wait_for, condition, timeout)


def _channel(nsqd, topic: str) -> dict[str, Any]:
    return nsqd.channel_stats(topic, CHANNEL) or {}


def _drained(nsqd, topic: str) -> bool:
    c = _channel(nsqd, topic)
    return bool(c) and c["depth"] == 0 and c["in_flight_count"] == 0


def _finished(nsqd, topic: str) -> int:
    return sum(client["finish_count"] for client in _channel(nsqd, topic).get("clients", []))


# -- construction --------------------------------------------------------------------------


def test_serialize_round_trips_as_json():
    trigger = _trigger(
        "orders",
        nsq_conn_id="nsq_events",
        message_filter="tests.support.event_filters.not_spam",
        max_in_flight=10,
        requeue_delay=__import__("datetime").timedelta(seconds=2),
        dead_letter_topic="orders_dead",
        lookupd_poll_interval=__import__("datetime").timedelta(seconds=15),
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_nsq.triggers.nsq_event.NSQEventTrigger"
    assert kwargs["requeue_delay"] == 2000
    assert kwargs["lookupd_poll_interval"] == 15.0
    json.dumps(kwargs)
    assert type(trigger)(**kwargs).serialize() == trigger.serialize()


@ack_mode
def test_one_subscription_per_connection_topic_and_channel():
    a = _trigger("orders", message_filter="tests.support.event_filters.not_spam")
    b = _trigger("orders", max_in_flight=5)
    assert a.shared_stream_key() == b.shared_stream_key()
    assert a.shared_stream_key() != _trigger("orders", nsq_conn_id="other").shared_stream_key()
    assert a.shared_stream_key() != NSQEventTrigger(topic="orders", channel="x").shared_stream_key()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"topic": "bad topic"}, "topic"),
        ({"channel": ""}, "channel"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_in_flight": 2501}, "max_in_flight"),
        ({"message_filter": len}, "dotted path"),
        ({"requeue_delay": -1}, "requeue_delay"),
        ({"dead_letter_topic": "orders"}, "dead_letter_topic"),
        ({"dead_letter_topic": "bad topic!"}, "topic"),
        ({"lookupd_poll_interval": 0}, "lookupd_poll_interval"),
        ({"lookupd_poll_interval": "soon"}, "lookupd_poll_interval"),
    ],
)
def test_bad_arguments_are_refused_with_their_name(kwargs, needle):
    arguments = {"topic": "orders", "channel": CHANNEL, **kwargs}
    with pytest.raises(NSQValueError, match=needle):
        NSQEventTrigger(**arguments)


# -- ack mode --------------------------------------------------------------------------------


@ack_mode
def test_fin_only_after_the_event_is_stored(nsqd, nsq_default, nsq_topic):
    bodies = [b"one", b"two", b"\xff\x00binary"]
    for body in bodies:
        nsqd.http_publish(nsq_topic, body)

    async def scenario() -> None:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        await triggerer.until(lambda: len(triggerer.events) == 3)
        # Every event handed over, none stored yet: all three still in flight.
        c = await asyncio.to_thread(_channel, nsqd, nsq_topic)
        assert (c["depth"], c["in_flight_count"]) == (0, 3)
        assert await asyncio.to_thread(_finished, nsqd, nsq_topic) == 0

        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 3)
        await triggerer.stop_all()

        payloads = triggerer.payloads()
        assert sorted(decode_record_body(p) for p in payloads) == sorted(bodies)
        for p in payloads:
            assert set(p) == {
                "id",
                "body",
                "body_encoding",
                "attempts",
                "timestamp",
                "topic",
                "channel",
                "nsqd",
            }
            assert (p["topic"], p["channel"], p["attempts"]) == (nsq_topic, CHANNEL, 1)
            assert p["nsqd"] == nsqd.tcp_address
            json.dumps(p)
        binary = next(p for p in payloads if p["body_encoding"] == "base64")
        assert decode_record_body(binary) == b"\xff\x00binary"

    asyncio.run(scenario())
    assert _channel(nsqd, nsq_topic)["requeue_count"] == 0


@ack_mode
def test_an_event_never_stored_is_requeued_and_delivered_again(nsqd, nsq_default, nsq_topic):
    nsqd.http_publish(nsq_topic, b"lost in the database")

    async def scenario() -> None:
        # The store never confirms: Airflow's ack timeout fails the subscriber.
        triggerer = Triggerer(ack_timeout=1.0)
        triggerer.start(1, _trigger(nsq_topic, requeue_delay=0))
        await triggerer.until(lambda: 1 in triggerer.failures)
        await triggerer.stop_all()

    asyncio.run(scenario())
    nsqd.wait_for(lambda: _channel(nsqd, nsq_topic)["depth"] == 1, 10)
    (again,) = read(nsqd, nsq_topic, CHANNEL, count=1)
    # REQ'd (attempts 2), maybe once more by the closing subscription if nsqd had already
    # handed it back: either way it is on the channel again, not in flight.
    assert again.body == b"lost in the database"
    assert again.attempts >= 2


@ack_mode
def test_messages_waiting_to_be_stored_are_touched_not_redelivered(nsqd, monkeypatch, nsq_topic):
    # A 2 s msg_timeout: the store below takes longer than that.
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{nsqd.tcp_address}?msg_timeout_ms=2000")
    nsqd.http_publish(nsq_topic, b"slow store")

    async def scenario() -> None:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        await triggerer.until(lambda: len(triggerer.events) == 1)
        # 2.5 msg_timeouts with no answer but TOUCH: nsqd must not have timed it out.
        await asyncio.sleep(5.0)
        c = await asyncio.to_thread(_channel, nsqd, nsq_topic)
        assert (c["timeout_count"], c["in_flight_count"]) == (0, 1)
        assert len(triggerer.events) == 1
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 1)
        await triggerer.stop_all()

    asyncio.run(scenario())


@ack_mode
def test_rejected_messages_go_to_the_dead_letter_topic(nsqd, nsq_default, nsq_topic):
    dead = f"{nsq_topic[:40]}_dead"
    nsqd.create_channel(dead, "inspect")
    for body in (b"ham 1", b"spam 1", b"ham 2", b"spam 2"):
        nsqd.http_publish(nsq_topic, body)

    async def scenario() -> None:
        triggerer = Triggerer()
        trigger = _trigger(
            nsq_topic,
            message_filter="tests.support.event_filters.not_spam",
            dead_letter_topic=dead,
        )
        triggerer.start(1, trigger)
        await triggerer.until(lambda: len(triggerer.events) == 2)
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 4)
        await triggerer.stop_all()
        assert sorted(p["body"] for p in triggerer.payloads()) == ["ham 1", "ham 2"]

    asyncio.run(scenario())
    assert _channel(nsqd, nsq_topic)["requeue_count"] == 0
    envelopes = [json.loads(m.body) for m in read(nsqd, dead, "inspect", count=2)]
    # The one dead-letter envelope (the consume operator's), with why it was set aside.
    assert sorted(decode_record_body(e) for e in envelopes) == [b"spam 1", b"spam 2"]
    assert {(e["reason"], e["error"], e["topic"], e["channel"]) for e in envelopes} == {
        ("rejected", None, nsq_topic, CHANNEL)
    }
    assert {e["by"]["trigger"] for e in envelopes} == {"NSQEventTrigger"}


@ack_mode
def test_rejected_messages_without_a_dead_letter_topic_are_finished(nsqd, nsq_default, nsq_topic):
    for body in (b"spam", b"ham"):
        nsqd.http_publish(nsq_topic, body)

    async def scenario() -> None:
        triggerer = Triggerer()
        triggerer.start(
            1, _trigger(nsq_topic, message_filter="tests.support.event_filters.not_spam")
        )
        await triggerer.until(lambda: len(triggerer.events) == 1)
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 2)
        await triggerer.stop_all()
        assert triggerer.payloads()[0]["body"] == "ham"

    asyncio.run(scenario())


@ack_mode
def test_a_filter_that_raises_keeps_the_message(nsqd, nsq_default, nsq_topic):
    nsqd.http_publish(nsq_topic, b"judge me")

    async def scenario() -> None:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic, message_filter="tests.support.event_filters.broken"))
        await triggerer.until(lambda: len(triggerer.events) == 1)
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic))
        await triggerer.stop_all()

    asyncio.run(scenario())


@ack_mode
def test_a_filter_that_cannot_be_imported_fails_the_trigger_and_keeps_the_message(
    nsqd, nsq_default, nsq_topic
):
    nsqd.create_channel(nsq_topic, CHANNEL)
    nsqd.http_publish(nsq_topic, b"waiting")

    async def scenario() -> None:
        triggerer = Triggerer()
        trigger = _trigger(
            nsq_topic, message_filter="tests.support.no_such.filter", requeue_delay=0
        )
        triggerer.start(1, trigger)
        await triggerer.until(lambda: 1 in triggerer.failures)
        await triggerer.stop_all()
        assert "cannot be imported" in str(triggerer.failures[1])

    asyncio.run(scenario())
    # Whether or not the subscription took it before the trigger failed, it is back.
    nsqd.wait_for(lambda: _channel(nsqd, nsq_topic)["depth"] == 1, 10)
    assert not _channel(nsqd, nsq_topic)["clients"]


@ack_mode
def test_two_assets_share_one_subscription_and_both_must_store(nsqd, nsq_default, nsq_topic):
    for body in (b"a", b"b"):
        nsqd.http_publish(nsq_topic, body)

    async def scenario() -> None:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        triggerer.start(2, _trigger(nsq_topic, max_in_flight=7))
        await triggerer.until(
            lambda: len(triggerer.payloads(1)) == 2 and len(triggerer.payloads(2)) == 2
        )
        c = await asyncio.to_thread(_channel, nsqd, nsq_topic)
        assert len(c["clients"]) == 1  # one subscription, not two splitting the channel
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 2)
        await triggerer.stop_all()

    asyncio.run(scenario())


@ack_mode
def test_stopping_closes_the_subscription_and_requeues_unstored_messages(
    nsqd, nsq_default, nsq_topic
):
    nsqd.http_publish(nsq_topic, b"in flight at shutdown")

    async def scenario() -> None:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        await triggerer.until(lambda: len(triggerer.events) == 1)
        await triggerer.stop_all()  # never stored: a graceful stop gives it back at once

    asyncio.run(scenario())
    nsqd.wait_for(lambda: not _channel(nsqd, nsq_topic)["clients"], 10)
    (again,) = read(nsqd, nsq_topic, CHANNEL, count=1)
    assert (again.body, again.attempts) == (b"in flight at shutdown", 2)


@ack_mode
def test_a_restarted_triggerer_gets_every_unfinished_message(nsqd, nsq_default, nsq_topic):
    for n in range(5):
        nsqd.http_publish(nsq_topic, f"m{n}".encode())

    async def first_run() -> None:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        await triggerer.until(lambda: len(triggerer.events) == 5)
        await triggerer.stop_all()

    async def second_run() -> list[str]:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        await triggerer.until(lambda: len(triggerer.events) == 5)
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic))
        await triggerer.stop_all()
        return sorted(p["body"] for p in triggerer.payloads())

    asyncio.run(first_run())
    assert asyncio.run(second_run()) == [f"m{n}" for n in range(5)]


@ack_mode
def test_a_restarted_nsqd_is_reconnected_and_the_stream_goes_on(nsqd_factory, monkeypatch):
    first = nsqd_factory()
    port, http_port = first.tcp_port, first.http_port
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{first.tcp_address}")
    first.http_publish("orders", b"before the restart")

    async def scenario() -> list[str]:
        triggerer = Triggerer()
        triggerer.start(1, _trigger("orders"))
        await triggerer.until(lambda: len(triggerer.events) == 1)
        # nsqd goes away with the message in flight (an in-memory broker forgets it).
        await asyncio.to_thread(first.broker.stop)
        second = await asyncio.to_thread(nsqd_factory, tcp_port=port, http_port=http_port)
        await asyncio.to_thread(second.create_channel, "orders", CHANNEL)
        await asyncio.to_thread(second.http_publish, "orders", b"after the restart")
        await triggerer.until(lambda: len(triggerer.events) == 2)
        triggerer.persist()  # the first FIN has no connection left: logged, not raised
        await _until(second, lambda: _drained(second, "orders") and _finished(second, "orders"))
        await triggerer.stop_all()
        assert not triggerer.failures
        return [p["body"] for p in triggerer.payloads()]

    assert asyncio.run(scenario()) == ["before the restart", "after the restart"]


@ack_mode
def test_max_in_flight_above_nsqds_max_rdy_count_is_capped_there_and_said(
    nsqd_factory, monkeypatch, caplog
):
    # nsqd closes a connection that sends RDY above its --max-rdy-count: the consumer
    # core gives each nsqd at most its limit, and the trigger says so once.
    small = nsqd_factory(max_rdy_count=10)
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{small.tcp_address}")
    small.create_channel("orders", CHANNEL)
    for n in range(15):
        small.http_publish("orders", f"m{n}".encode())

    async def scenario() -> list[str]:
        triggerer = Triggerer()
        triggerer.start(1, _trigger("orders", max_in_flight=20))
        await triggerer.until(lambda: len(triggerer.events) == 10)
        # Ten in flight (nsqd's limit), five still waiting on the channel: not 20, and
        # the connection is still up.
        c = await asyncio.to_thread(_channel, small, "orders")
        assert (c["in_flight_count"], c["depth"]) == (10, 5)
        assert [client["ready_count"] for client in c["clients"]] == [10]
        triggerer.persist()
        await triggerer.until(lambda: len(triggerer.events) == 15)
        triggerer.persist()
        await _until(small, lambda: _drained(small, "orders") and _finished(small, "orders") == 15)
        await triggerer.stop_all()
        assert not triggerer.failures
        return sorted(p["body"] for p in triggerer.payloads())

    assert asyncio.run(scenario()) == sorted(f"m{n}" for n in range(15))
    warning = next(r.getMessage() for r in caplog.records if "max_in_flight=20" in r.getMessage())
    assert "--max-rdy-count" in warning and "at most 10" in warning


# -- the pre-3.3 run() path --------------------------------------------------------------------


@pytest.mark.skipif(ACK_MODE, reason="Airflow >= 3.3 shares one stream per channel")
def test_without_ack_mode_each_trigger_reads_on_its_own():
    # Airflow 3.0-3.2 have no shared streams: None makes the triggerer call run().
    assert _trigger("orders").shared_stream_key() is None


#: Airflow 3.0-3.2 as far as this provider can tell: no airflow.triggers.shared_stream.
_WITHOUT_SHARED_STREAM = """
import asyncio, json, sys
sys.modules["airflow.triggers.shared_stream"] = None  # importing it raises ImportError
from airflow_provider_nsq.triggers import nsq_event
from airflow_provider_nsq.queues.nsq import NSQMessageQueueProvider
from airflow_provider_nsq.links import NSQAdminChannelLink

trigger = nsq_event.NSQEventTrigger(topic=sys.argv[1], channel="airflow", batch_size=1)

async def first_event():
    events = trigger.run()
    try:
        return (await asyncio.wait_for(events.__anext__(), 15)).payload
    finally:
        await events.aclose()

print(json.dumps({
    "ack_mode": nsq_event.ACK_MODE,
    "key": trigger.shared_stream_key(),
    "base": nsq_event.NSQEventStreamProducer.__mro__[1].__name__,
    "provider": NSQMessageQueueProvider().trigger_class().__name__,
    "body": asyncio.run(first_event())["body"],
}))
"""


def test_without_shared_streams_every_name_imports_and_run_fires(nsqd, nsq_default, nsq_topic):
    """What Airflow 3.0-3.2 import and run: the module, the queue provider and the links
    import without ``airflow.triggers.shared_stream``, and ``run()`` fires events."""
    nsqd.http_publish(nsq_topic, b"hello")
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_SHARED_STREAM, nsq_topic],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "ack_mode": False,
        "key": None,
        "base": "object",
        "provider": "NSQEventTrigger",
        "body": "hello",
    }
    assert "no shared-stream ack mode" in done.stdout + done.stderr


def test_run_fails_at_once_on_a_tls_setting_no_nsqd_accepts(nsqd_factory, monkeypatch):
    plain = nsqd_factory()
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{plain.tcp_address}?tls=true")

    async def scenario() -> None:
        await asyncio.wait_for(_trigger("tls_topic").run().__anext__(), 15)

    with pytest.raises(NSQTLSError, match=plain.tcp_address):
        asyncio.run(scenario())


def test_run_fires_one_event_per_message_and_finishes_it(nsqd, nsq_default, nsq_topic):
    for body in (b"x", b"spam y", b"z"):
        nsqd.http_publish(nsq_topic, body)
    trigger = _trigger(nsq_topic, message_filter="tests.support.event_filters.not_spam")

    async def scenario() -> list[dict[str, Any]]:
        events = trigger.run()
        payloads = [(await asyncio.wait_for(events.__anext__(), 15)).payload for _ in range(2)]
        # The generator resumes (and FINs the second) when asked for the next event.
        pending = asyncio.ensure_future(events.__anext__())
        await _until(nsqd, lambda: _finished(nsqd, nsq_topic) == 3)
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await events.aclose()
        return payloads

    payloads = asyncio.run(scenario())
    assert [p["body"] for p in payloads] == ["x", "z"]
    assert payloads[0]["nsqd"] == nsqd.tcp_address
    nsqd.wait_for(lambda: _drained(nsqd, nsq_topic) and not _channel(nsqd, nsq_topic)["clients"])


def test_run_cancelled_before_the_fin_requeues_the_message(nsqd, nsq_default, nsq_topic):
    nsqd.http_publish(nsq_topic, b"handed over, not finished")

    async def scenario() -> None:
        events = _trigger(nsq_topic).run()
        await asyncio.wait_for(events.__anext__(), 15)
        await events.aclose()  # the triggerer cancelled it right after the yield

    asyncio.run(scenario())
    nsqd.wait_for(lambda: not _channel(nsqd, nsq_topic)["clients"], 10)
    (again,) = read(nsqd, nsq_topic, CHANNEL, count=1)
    assert again.attempts == 2


@ack_mode
def test_a_tls_setting_no_nsqd_accepts_fails_the_trigger_at_once(nsqd_factory, monkeypatch):
    # An nsqd without TLS and a connection that requires it: waiting cannot help, so the
    # asset's trigger fails with the TLS error instead of retrying in the background.
    plain = nsqd_factory()
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{plain.tcp_address}?tls=true")

    async def scenario() -> BaseException:
        triggerer = Triggerer()
        triggerer.start(1, _trigger("tls_topic"))
        await triggerer.until(lambda: 1 in triggerer.failures)
        await triggerer.stop_all()
        return triggerer.failures[1]

    failure = asyncio.run(scenario())
    assert isinstance(failure, NSQTLSError), failure
    assert plain.tcp_address in str(failure)


# -- batches: one event for many messages --------------------------------------------------


def _batched(topic: str, **kwargs: Any) -> NSQEventTrigger:
    return NSQEventTrigger(topic=topic, channel=CHANNEL, **kwargs)


def test_batching_defaults_and_serialize_round_trip():
    trigger = _batched("orders")
    kwargs = trigger.serialize()[1]
    # Defaults: a burst of hundreds in one event; max_in_flight raised to hold a batch.
    assert (kwargs["batch_size"], kwargs["batch_timeout"], kwargs["min_event_interval"]) == (
        1000,
        2.0,
        5.0,
    )
    assert kwargs["max_in_flight"] == 1000
    # batch_size=1 is one event per message, as before batching: no spacing either.
    legacy = _batched("orders", batch_size=1).serialize()[1]
    assert (legacy["min_event_interval"], legacy["max_in_flight"]) == (0.0, 100)
    timed = _batched(
        "orders",
        batch_size=50,
        batch_timeout=__import__("datetime").timedelta(milliseconds=500),
        min_event_interval=0,
        max_in_flight=60,
    )
    json.dumps(timed.serialize())
    for t in (trigger, timed):
        assert type(t)(**t.serialize()[1]).serialize() == t.serialize()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2501}, "batch_size"),
        ({"batch_size": "10"}, "batch_size"),
        ({"batch_timeout": -1}, "batch_timeout"),
        ({"batch_timeout": 301}, "batch_timeout"),
        ({"min_event_interval": "later"}, "min_event_interval"),
        ({"min_event_interval": 600}, "min_event_interval"),
        ({"batch_size": 200, "max_in_flight": 100}, r"max_in_flight \(100\).*batch_size \(200\)"),
    ],
)
def test_bad_batch_arguments_are_refused_with_their_name(kwargs, needle):
    with pytest.raises(NSQValueError, match=needle):
        _batched("orders", **kwargs)


@ack_mode
def test_a_burst_becomes_one_event_finished_only_after_it_is_stored(nsqd, nsq_default, nsq_topic):
    bodies = [f"order {n}".encode() for n in range(30)] + [b"\xff\x00binary"]
    for body in bodies:
        nsqd.http_publish(nsq_topic, body)

    async def scenario() -> list[dict[str, Any]]:
        triggerer = Triggerer()
        triggerer.start(1, _batched(nsq_topic, batch_size=50, batch_timeout=1.0))
        await triggerer.until(lambda: len(triggerer.events) == 1)
        c = await asyncio.to_thread(_channel, nsqd, nsq_topic)
        assert (c["depth"], c["in_flight_count"]) == (0, 31)
        assert await asyncio.to_thread(_finished, nsqd, nsq_topic) == 0
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 31)
        await triggerer.stop_all()
        assert len(triggerer.events) == 1  # nothing else came
        return triggerer.payloads()

    (payload,) = asyncio.run(scenario())
    json.dumps(payload)
    assert (payload["count"], payload["redelivered"], payload["filtered"]) == (31, 0, 0)
    records = payload["messages"]
    assert [decode_record_body(r) for r in records] == bodies  # in delivery order
    for r in records:
        assert set(r) == {
            "id",
            "body",
            "body_encoding",
            "attempts",
            "timestamp",
            "topic",
            "channel",
            "nsqd",
        }
        assert (r["topic"], r["channel"], r["nsqd"], r["attempts"]) == (
            nsq_topic,
            CHANNEL,
            nsqd.tcp_address,
            1,
        )
    assert _channel(nsqd, nsq_topic)["requeue_count"] == 0


@ack_mode
def test_batches_hold_batch_size_and_wait_min_event_interval_after_a_store(
    nsqd, nsq_default, nsq_topic
):
    for n in range(25):
        nsqd.http_publish(nsq_topic, f"m{n}".encode())

    async def scenario() -> tuple[list[dict[str, Any]], float]:
        loop = asyncio.get_running_loop()
        triggerer = Triggerer()
        trigger = _batched(nsq_topic, batch_size=10, batch_timeout=0.5, min_event_interval=1.0)
        triggerer.start(1, trigger)
        await triggerer.until(lambda: len(triggerer.events) == 1)
        # All 25 in flight (max_in_flight 100): the next batch is full, but waits for the
        # first one's store.
        await _until(nsqd, lambda: _channel(nsqd, nsq_topic)["in_flight_count"] == 25)
        assert len(triggerer.events) == 1
        triggerer.persist()
        stored = loop.time()
        await triggerer.until(lambda: len(triggerer.events) == 2)
        spacing = loop.time() - stored
        triggerer.persist()
        await triggerer.until(lambda: len(triggerer.events) == 3)
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 25)
        await triggerer.stop_all()
        return triggerer.payloads(), spacing

    payloads, spacing = asyncio.run(scenario())
    assert [p["count"] for p in payloads] == [10, 10, 5]
    assert sorted(r["body"] for p in payloads for r in p["messages"]) == sorted(
        f"m{n}" for n in range(25)
    )
    # Handed over no sooner than min_event_interval after the previous store (the store
    # is confirmed to the producer a moment after persist()).
    assert spacing >= 1.0


@ack_mode
def test_messages_collecting_longer_than_msg_timeout_are_touched(nsqd, monkeypatch, nsq_topic):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{nsqd.tcp_address}?msg_timeout_ms=2000")
    nsqd.http_publish(nsq_topic, b"early")

    async def scenario() -> list[dict[str, Any]]:
        triggerer = Triggerer()
        # The batch collects for 5 s: 2.5 msg_timeouts with no answer but TOUCH.
        triggerer.start(1, _batched(nsq_topic, batch_size=10, batch_timeout=5.0))
        await _until(nsqd, lambda: _channel(nsqd, nsq_topic).get("in_flight_count") == 1)
        await asyncio.to_thread(nsqd.http_publish, nsq_topic, b"late")
        await triggerer.until(lambda: len(triggerer.events) == 1, timeout=30)
        c = await asyncio.to_thread(_channel, nsqd, nsq_topic)
        assert (c["timeout_count"], c["in_flight_count"]) == (0, 2)
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 2)
        await triggerer.stop_all()
        return triggerer.payloads()

    (payload,) = asyncio.run(scenario())
    assert [r["body"] for r in payload["messages"]] == ["early", "late"]


@ack_mode
def test_a_batch_never_stored_is_requeued_whole(nsqd, nsq_default, nsq_topic):
    for n in range(3):
        nsqd.http_publish(nsq_topic, f"m{n}".encode())

    async def scenario() -> None:
        triggerer = Triggerer(ack_timeout=1.0)  # the store never confirms
        triggerer.start(1, _batched(nsq_topic, batch_size=10, batch_timeout=0.5, requeue_delay=0))
        await triggerer.until(lambda: 1 in triggerer.failures)
        await triggerer.stop_all()

    asyncio.run(scenario())
    nsqd.wait_for(lambda: _channel(nsqd, nsq_topic)["depth"] == 3, 10)
    again = read(nsqd, nsq_topic, CHANNEL, count=3)
    assert sorted(m.body for m in again) == [b"m0", b"m1", b"m2"]
    assert all(m.attempts >= 2 for m in again)


@ack_mode
def test_a_filter_leaves_rejects_out_of_the_batch_and_they_are_dead_lettered(
    nsqd, nsq_default, nsq_topic
):
    dead = f"{nsq_topic[:40]}_dead"
    nsqd.create_channel(dead, "inspect")
    for body in (b"ham 1", b"spam 1", b"ham 2", b"spam 2", b"spam 3"):
        nsqd.http_publish(nsq_topic, body)

    async def scenario() -> list[dict[str, Any]]:
        triggerer = Triggerer()
        trigger = _batched(
            nsq_topic,
            batch_size=5,
            message_filter="tests.support.event_filters.not_spam",
            dead_letter_topic=dead,
        )
        triggerer.start(1, trigger)
        await triggerer.until(lambda: len(triggerer.events) == 1)
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 5)
        await triggerer.stop_all()
        return triggerer.payloads()

    (payload,) = asyncio.run(scenario())
    assert [r["body"] for r in payload["messages"]] == ["ham 1", "ham 2"]
    assert (payload["count"], payload["filtered"]) == (2, 3)
    assert _channel(nsqd, nsq_topic)["requeue_count"] == 0
    letters = read(nsqd, dead, "inspect", count=3)
    assert sorted(decode_record_body(json.loads(m.body)) for m in letters) == [
        b"spam 1",
        b"spam 2",
        b"spam 3",
    ]


@ack_mode
def test_a_trigger_with_batch_size_1_gets_one_event_per_message_of_a_shared_batch(
    nsqd, nsq_default, nsq_topic
):
    async def scenario() -> Triggerer:
        triggerer = Triggerer()
        # The first trigger's batching decides the shared subscription's batches; each
        # trigger's payload follows its own batch_size. Both subscribe before anything
        # is published, so both are owed every batch.
        triggerer.start(1, _batched(nsq_topic, batch_size=10, batch_timeout=2.0))
        triggerer.start(2, _batched(nsq_topic, batch_size=1))
        await _until(nsqd, lambda: bool(_channel(nsqd, nsq_topic).get("clients")))
        for n in range(4):
            await asyncio.to_thread(nsqd.http_publish, nsq_topic, f"m{n}".encode())
        await triggerer.until(lambda: len(triggerer.payloads(2)) == 4)
        await triggerer.until(lambda: len(triggerer.payloads(1)) == 1)
        triggerer.persist()
        await _until(nsqd, lambda: _drained(nsqd, nsq_topic) and _finished(nsqd, nsq_topic) == 4)
        await triggerer.stop_all()
        return triggerer

    triggerer = asyncio.run(scenario())
    assert [r["body"] for r in triggerer.payloads(1)[0]["messages"]] == ["m0", "m1", "m2", "m3"]
    assert [p["body"] for p in triggerer.payloads(2)] == ["m0", "m1", "m2", "m3"]


def test_run_fires_one_event_per_batch_and_finishes_it_after_the_handover(
    nsqd, nsq_default, nsq_topic
):
    for n in range(5):
        nsqd.http_publish(nsq_topic, f"m{n}".encode())
    trigger = _batched(nsq_topic, batch_size=3, batch_timeout=0.5, min_event_interval=0.5)

    async def scenario() -> tuple[list[dict[str, Any]], float]:
        loop = asyncio.get_running_loop()
        events = trigger.run()
        first = (await asyncio.wait_for(events.__anext__(), 15)).payload
        # Handed over, not finished: the FIN comes when the triggerer asks for more.
        assert await asyncio.to_thread(_finished, nsqd, nsq_topic) == 0
        asked = loop.time()
        second = (await asyncio.wait_for(events.__anext__(), 15)).payload
        spacing = loop.time() - asked
        await _until(nsqd, lambda: _finished(nsqd, nsq_topic) == 3)
        pending = asyncio.ensure_future(events.__anext__())
        await _until(nsqd, lambda: _finished(nsqd, nsq_topic) == 5)
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await events.aclose()
        return [first, second], spacing

    payloads, spacing = asyncio.run(scenario())
    assert [[r["body"] for r in p["messages"]] for p in payloads] == [
        ["m0", "m1", "m2"],
        ["m3", "m4"],
    ]
    assert spacing >= 0.5  # min_event_interval after the first was handed over
    nsqd.wait_for(lambda: _drained(nsqd, nsq_topic) and not _channel(nsqd, nsq_topic)["clients"])


def test_run_cancelled_with_a_batch_collecting_requeues_it(nsqd, nsq_default, nsq_topic):
    nsqd.http_publish(nsq_topic, b"collecting")

    async def scenario() -> None:
        events = _batched(nsq_topic, batch_size=10, batch_timeout=60).run()
        pending = asyncio.ensure_future(events.__anext__())
        await _until(nsqd, lambda: _channel(nsqd, nsq_topic).get("in_flight_count") == 1)
        pending.cancel()  # the triggerer stops the trigger while the batch collects
        await asyncio.gather(pending, return_exceptions=True)
        await events.aclose()

    asyncio.run(scenario())
    nsqd.wait_for(lambda: not _channel(nsqd, nsq_topic)["clients"], 10)
    (again,) = read(nsqd, nsq_topic, CHANNEL, count=1)
    assert (again.body, again.attempts) == (b"collecting", 2)
