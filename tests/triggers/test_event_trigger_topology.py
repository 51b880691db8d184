"""NSQEventTrigger on NSQ as deployed: a topic on several nsqds, found through
nsqlookupd (or listed in the connection), read by one consumer under one
``max_in_flight`` budget.

Runs over the ``nsq_topology`` fixture (embedded by default, real daemons with
``NSQLOOKUPD_HTTP_ADDRESS`` and ``NSQD_ADDRESS``) and drives ack mode the way the Airflow
3.3 triggerer does (:class:`~tests.triggers.test_event_trigger.Triggerer`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from airflow_provider_nsq.triggers.nsq_event import NSQEventTrigger
from tests.support.marks import unraisable_is_an_error

from .test_event_trigger import CHANNEL, Triggerer, ack_mode

pytestmark = [ack_mode, unraisable_is_an_error]

#: Short, so a producer that appears is joined within a bounded test.
POLL_S = 0.5


def _lookupd_only(monkeypatch, topology) -> None:
    """``nsq_default`` with nsqlookupd and nothing else: no host, no nsqd list."""
    lookupds = ",".join(topology.lookupd_http_addresses)
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://?lookupd_http_addresses={lookupds}")


def _publish(nsqd, topic: str, *bodies: str) -> None:
    nsqd.create_channel(topic, CHANNEL)
    for body in bodies:
        nsqd.http_publish(topic, body.encode())


def _stats(nsqd, topic: str) -> dict[str, Any]:
    return nsqd.channel_stats(topic, CHANNEL) or {}


def _finished(nsqd, topic: str) -> int:
    return sum(c["finish_count"] for c in _stats(nsqd, topic).get("clients") or [])


def _drained(nsqd, topic: str) -> bool:
    c = _stats(nsqd, topic)
    return bool(c) and c["depth"] == 0 and c["in_flight_count"] == 0


async def _on_every(topology, check, timeout: float = 20.0) -> None:
    """Until ``check(nsqd)`` holds on every nsqd."""

    def every() -> bool:
        return all(check(n) for n in topology.nsqds)

    await asyncio.to_thread(topology.nsqds[0].wait_for, every, timeout)


def _trigger(topic: str, **kwargs: Any) -> NSQEventTrigger:
    """One event per message (``batch_size=1``): each asserts which nsqd had it."""
    return NSQEventTrigger(
        topic=topic, channel=CHANNEL, lookupd_poll_interval=POLL_S, batch_size=1, **kwargs
    )


def test_every_nsqd_lookupd_lists_feeds_the_asset_fin_after_store(
    monkeypatch, nsq_topology, nsq_topic
):
    topology = nsq_topology(n=2)
    sent = {}
    for i, nsqd in enumerate(topology.nsqds):
        sent[nsqd.tcp_address] = [f"n{i}-{j}" for j in range(3)]
        _publish(nsqd, nsq_topic, *sent[nsqd.tcp_address])
    topology.wait_for_producers(nsq_topic)
    _lookupd_only(monkeypatch, topology)

    async def scenario() -> list[dict[str, Any]]:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        await triggerer.until(lambda: len(triggerer.events) == 6)
        # Every message an event, none stored yet: all in flight on their own nsqd.
        for nsqd in topology.nsqds:
            c = await asyncio.to_thread(_stats, nsqd, nsq_topic)
            assert (c["depth"], c["in_flight_count"]) == (0, 3), nsqd
            assert len(c["clients"]) == 1  # one subscription per nsqd
            assert await asyncio.to_thread(_finished, nsqd, nsq_topic) == 0
        triggerer.persist()
        await _on_every(topology, lambda n: _drained(n, nsq_topic) and _finished(n, nsq_topic) == 3)
        await triggerer.stop_all()
        assert not triggerer.failures
        return triggerer.payloads()

    payloads = asyncio.run(scenario())
    # Exactly one event per message, each naming the nsqd that had it.
    assert len({(p["nsqd"], p["id"]) for p in payloads}) == len(payloads) == 6
    by_nsqd: dict[str, list[str]] = {}
    for p in payloads:
        by_nsqd.setdefault(p["nsqd"], []).append(p["body"])
        assert p["attempts"] == 1
    assert {a: sorted(bodies) for a, bodies in by_nsqd.items()} == sent
    for nsqd in topology.nsqds:
        assert _stats(nsqd, nsq_topic)["requeue_count"] == 0


def test_an_nsqd_that_gets_the_topic_later_is_joined_after_the_lookupd_poll(
    monkeypatch, nsq_topology, nsq_topic
):
    topology = nsq_topology(n=2)
    early, late = topology.nsqds
    _publish(early, nsq_topic, "early")
    topology.wait_for_producers(nsq_topic, 1)
    assert len(topology.lookupd.producers(nsq_topic)) == 1
    _lookupd_only(monkeypatch, topology)

    async def scenario() -> list[dict[str, Any]]:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        await triggerer.until(lambda: len(triggerer.events) == 1)
        triggerer.persist()
        # The topic appears on the second nsqd while the trigger runs.
        await asyncio.to_thread(_publish, late, nsq_topic, "late")
        await asyncio.to_thread(topology.wait_for_producers, nsq_topic, 2)
        # Bounded well below the 60 s default poll: the trigger's own interval is used.
        await triggerer.until(lambda: len(triggerer.events) == 2, timeout=15)
        c = await asyncio.to_thread(_stats, late, nsq_topic)
        assert (
            c["in_flight_count"] == 1 and await asyncio.to_thread(_finished, late, nsq_topic) == 0
        )
        triggerer.persist()
        await _on_every(topology, lambda n: _drained(n, nsq_topic) and _finished(n, nsq_topic) == 1)
        await triggerer.stop_all()
        assert not triggerer.failures
        return triggerer.payloads()

    first, second = asyncio.run(scenario())
    assert (first["body"], first["nsqd"]) == ("early", early.tcp_address)
    assert (second["body"], second["nsqd"]) == ("late", late.tcp_address)


def test_run_reads_every_nsqd_of_the_connections_list(monkeypatch, nsq_topology, nsq_topic):
    # No lookupd: the connection's host:port and its nsqd_tcp_addresses are read.
    topology = nsq_topology(n=2)
    first, second = topology.nsqds
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT",
        f"nsq://{first.tcp_address}?nsqd_tcp_addresses={second.tcp_address}",
    )
    _publish(first, nsq_topic, "a1", "a2")
    _publish(second, nsq_topic, "b1", "b2")

    async def scenario() -> list[dict[str, Any]]:
        events = NSQEventTrigger(topic=nsq_topic, channel=CHANNEL, batch_size=1).run()
        payloads = [(await asyncio.wait_for(events.__anext__(), 15)).payload for _ in range(4)]
        # The generator FINs the fourth when asked for the next event.
        pending = asyncio.ensure_future(events.__anext__())
        await _on_every(topology, lambda n: _finished(n, nsq_topic) == 2)
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await events.aclose()
        return payloads

    payloads = asyncio.run(scenario())
    assert Counter(p["nsqd"] for p in payloads) == {first.tcp_address: 2, second.tcp_address: 2}
    assert {p["body"][0] for p in payloads if p["nsqd"] == second.tcp_address} == {"b"}
    for nsqd in topology.nsqds:
        nsqd.wait_for(lambda n=nsqd: _drained(n, nsq_topic) and not _stats(n, nsq_topic)["clients"])


def test_stopping_requeues_what_every_nsqd_delivered(monkeypatch, nsq_topology, nsq_topic):
    topology = nsq_topology(n=2)
    for i, nsqd in enumerate(topology.nsqds):
        _publish(nsqd, nsq_topic, f"held on {i}")
    topology.wait_for_producers(nsq_topic)
    _lookupd_only(monkeypatch, topology)

    async def scenario() -> None:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        await triggerer.until(lambda: len(triggerer.events) == 2)
        await triggerer.stop_all()  # never stored: each goes back to its own nsqd

    asyncio.run(scenario())
    for nsqd in topology.nsqds:
        nsqd.wait_for(
            lambda n=nsqd: (
                (c := _stats(n, nsq_topic))["depth"] == 1
                and c["in_flight_count"] == 0
                and not c["clients"]
            )
        )
        assert _stats(nsqd, nsq_topic)["requeue_count"] == 1


def test_an_nsqd_going_away_does_not_stop_the_others(monkeypatch, nsq_topology, nsq_topic):
    topology = nsq_topology(n=2)
    staying, leaving = topology.nsqds
    _publish(staying, nsq_topic, "s1")
    _publish(leaving, nsq_topic, "l1")
    topology.wait_for_producers(nsq_topic)
    _lookupd_only(monkeypatch, topology)

    async def scenario() -> list[str]:
        triggerer = Triggerer()
        triggerer.start(1, _trigger(nsq_topic))
        await triggerer.until(lambda: len(triggerer.events) == 2)
        triggerer.persist()
        await _on_every(topology, lambda n: _finished(n, nsq_topic) == 1)
        # One nsqd stops (and leaves nsqlookupd); the other keeps feeding the asset.
        await asyncio.to_thread(topology.stop_nsqd, 1)
        await asyncio.to_thread(_publish, staying, nsq_topic, "s2")
        await triggerer.until(lambda: len(triggerer.events) == 3)
        triggerer.persist()
        await asyncio.to_thread(
            staying.wait_for,
            lambda: _drained(staying, nsq_topic) and _finished(staying, nsq_topic) == 2,
            20,
        )
        await triggerer.stop_all()
        assert not triggerer.failures
        return [p["body"] for p in triggerer.payloads()]

    bodies = asyncio.run(scenario())
    assert sorted(bodies[:2]) == ["l1", "s1"] and bodies[2] == "s2"
