"""An embedded broker registered with the session's nsqlookupd: what a consumer sees.

The end states of the ``nsqd_`` recordings, checked through the lookupd's HTTP API: the
embedded lookupd by default, the real nsqlookupd named by ``NSQLOOKUPD_HTTP_ADDRESS``
(and ``NSQLOOKUPD_TCP_ADDRESS``) when set, so the broker's registration is checked
against the real daemon too. (The byte-level comparison with real nsqd is
``test_nsqd_registration_replay.py``.)
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_nsq.testing.broker import EmbeddedNSQD
from airflow_provider_nsq.testing.handles import NSQDServer, NSQLookupdServer


@pytest.fixture
def registered(nsqlookupd: NSQLookupdServer) -> Iterator[tuple[EmbeddedNSQD, NSQDServer]]:
    """An embedded broker registered with the session's lookupd."""
    broker = EmbeddedNSQD(lookupd_tcp_addresses=[nsqlookupd.tcp_address]).start()
    try:
        yield broker, NSQDServer(broker.host, broker.tcp_port, broker.http_port, broker)
    finally:
        broker.stop()


def _ports(lookupd: NSQLookupdServer, topic: str) -> list[int]:
    return [p["tcp_port"] for p in lookupd.producers(topic)]


def test_topics_and_channels_come_and_go(
    nsqlookupd: NSQLookupdServer, registered: tuple[EmbeddedNSQD, NSQDServer], nsq_topic: str
) -> None:
    broker, nsqd = registered
    lookupd = nsqlookupd
    node = next(n for n in lookupd.nodes() if n["tcp_port"] == broker.tcp_port)
    assert (node["broadcast_address"], node["http_port"]) == ("127.0.0.1", broker.http_port)
    assert node["hostname"] == socket.gethostname() and node["version"] == "1.3.0"

    nsqd.http_publish(nsq_topic, b"hello")
    lookupd.wait_for(lambda: _ports(lookupd, nsq_topic) == [broker.tcp_port])
    nsqd.create_channel(nsq_topic, "c1")
    lookupd.wait_for(lambda: lookupd.channels(nsq_topic) == ["c1"])
    nsqd.http("POST", "/channel/delete", {"topic": nsq_topic, "channel": "c1"})
    # nsqlookupd keeps a non-ephemeral channel key with no producer
    # (tests/conformance/lookupd_transcripts/FACTS.md 4).
    assert lookupd.channels(nsq_topic) == ["c1"]
    nsqd.delete_topic(nsq_topic)
    lookupd.wait_for(lambda: lookupd.lookup(nsq_topic) == {"channels": ["c1"], "producers": []})


def test_ephemeral_channel_and_topic_leave_with_their_consumer(
    nsqlookupd: NSQLookupdServer, registered: tuple[EmbeddedNSQD, NSQDServer], nsq_topic: str
) -> None:
    broker, _ = registered
    lookupd = nsqlookupd
    topic = nsq_topic[: 64 - len("#ephemeral")] + "#ephemeral"
    with socket.create_connection((broker.host, broker.tcp_port), timeout=10) as consumer:
        consumer.sendall(f"  V2SUB {topic} c#ephemeral\n".encode())
        assert consumer.recv(10) == bytes.fromhex("00000006000000004f4b")  # OK
        lookupd.wait_for(lambda: lookupd.channels(topic) == ["c#ephemeral"])
        assert _ports(lookupd, topic) == [broker.tcp_port]
    # The consumer left: nsqd deletes both and UNREGISTERs them; the keys go too.
    lookupd.wait_for(lambda: lookupd.lookup(topic) is None)


def test_a_stopped_broker_leaves_and_its_topics_stay(
    nsqlookupd: NSQLookupdServer, nsq_topic: str
) -> None:
    lookupd = nsqlookupd
    broker = EmbeddedNSQD(lookupd_tcp_addresses=[lookupd.tcp_address]).start()
    try:
        broker.publish(nsq_topic, b"x")
        lookupd.wait_for(lambda: _ports(lookupd, nsq_topic) == [broker.tcp_port])
    finally:
        broker.stop()  # like SIGTERM: no UNREGISTER, the connection just closes
    lookupd.wait_for(lambda: lookupd.lookup(nsq_topic) == {"channels": [], "producers": []})


def test_channels_known_to_lookupd_are_precreated(
    nsqlookupd: NSQLookupdServer, registered: tuple[EmbeddedNSQD, NSQDServer], nsq_topic: str
) -> None:
    _, nsqd = registered
    nsqlookupd.create_channel(nsq_topic, "pre_ch")
    nsqlookupd.create_channel(nsq_topic, "pre_eph#ephemeral")
    nsqd.http_publish(nsq_topic, b"hello")
    channels = nsqd.wait_for(lambda: (nsqd.topic_stats(nsq_topic) or {}).get("channels"))
    assert [(c["channel_name"], c["depth"]) for c in channels] == [("pre_ch", 1)]


def test_every_precreated_channel_gets_the_first_messages(
    nsqlookupd: NSQLookupdServer, registered: tuple[EmbeddedNSQD, NSQDServer], nsq_topic: str
) -> None:
    _, nsqd = registered
    for channel in ("a", "b"):
        nsqlookupd.create_channel(nsq_topic, channel)
    nsqd.http_publish(nsq_topic, b"first")
    nsqd.http_publish(nsq_topic, b"second")

    def depths() -> list[tuple[str, int]]:
        channels = (nsqd.topic_stats(nsq_topic) or {}).get("channels") or []
        found = [(c["channel_name"], c["depth"]) for c in channels]
        return found if len(found) == 2 else []

    assert nsqd.wait_for(depths) == [("a", 2), ("b", 2)]


def test_precreation_does_not_bring_back_a_channel_deleted_meanwhile(
    nsqlookupd: NSQLookupdServer, registered: tuple[EmbeddedNSQD, NSQDServer], nsq_topic: str
) -> None:
    """The broker's publish returns before its lookupds answered (nsqd's waits): a
    channel created and deleted in between stays deleted."""
    broker, nsqd = registered
    nsqlookupd.create_channel(nsq_topic, "gone")

    def create_then_delete(b: Any) -> None:  # one loop turn: before the lookupd answers
        b.get_topic(nsq_topic).get_channel("gone")
        b.get_topic(nsq_topic).delete_channel("gone")

    broker.call(create_then_delete)
    nsqd.http_publish(nsq_topic, b"x")
    nsqd.wait_for(lambda: not broker.call(lambda b: b.topics[nsq_topic].held))
    assert broker.call(lambda b: list(b.topics[nsq_topic].channels)) == []
