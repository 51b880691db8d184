"""The ``nsqlookupd`` and ``nsq_topology`` fixtures, as users' tests use them.

Each test also passes against real daemons: ``NSQLOOKUPD_HTTP_ADDRESS`` (+
``NSQLOOKUPD_TCP_ADDRESS``), and ``NSQD_ADDRESS`` / ``NSQD_HTTP_ADDRESS`` listing the
nsqds registered with it (comma-separated).
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from airflow_provider_nsq.testing.handles import NSQDServer, NSQLookupdServer
from airflow_provider_nsq.testing.topologies import NSQTopology


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_nsqlookupd_fixture_answers_as_nsqlookupd(
    nsqlookupd: NSQLookupdServer, nsq_topic: str
) -> None:
    assert nsqlookupd.ping()
    assert nsqlookupd.lookup(nsq_topic) is None  # never heard of: 404
    nsqlookupd.create_channel(nsq_topic, "audit")
    assert nsqlookupd.lookup(nsq_topic) == {"channels": ["audit"], "producers": []}
    assert nsq_topic in nsqlookupd.topics()
    nsqlookupd.delete_topic(nsq_topic)
    assert nsqlookupd.lookup(nsq_topic) is None


def test_announce_lists_a_producer_nobody_can_reach(
    nsqlookupd: NSQLookupdServer, nsq_topic: str
) -> None:
    port = closed_port()
    with nsqlookupd.announce(nsq_topic, "c", tcp_port=port) as announced:
        producers = nsqlookupd.wait_for_producers(nsq_topic)
        assert [p["tcp_port"] for p in producers] == [port]
        assert announced.tcp_address == f"127.0.0.1:{port}"
        assert nsqlookupd.channels(nsq_topic) == ["c"]
    nsqlookupd.wait_for(lambda: not nsqlookupd.producers(nsq_topic))


def test_topology_finds_a_topic_on_every_nsqd(
    nsq_topology: Callable[..., NSQTopology], nsq_topic: str
) -> None:
    topology = nsq_topology(n=3)
    assert len(topology.nsqds) == 3
    assert topology.lookupd_http_addresses == [topology.lookupd.http_address]
    assert topology.nsqd_tcp_addresses == [n.tcp_address for n in topology.nsqds]
    for nsqd in topology.nsqds:
        nsqd.http_publish(nsq_topic, b"event")
    producers = topology.wait_for_producers(nsq_topic)
    found = {f"{p['broadcast_address']}:{p['tcp_port']}" for p in producers}
    assert found == set(topology.nsqd_tcp_addresses)


def test_topology_nsqds_precreate_the_channels_lookupd_knows(
    nsq_topology: Callable[..., NSQTopology], nsq_topic: str
) -> None:
    """A consumer's channel known to lookupd exists on an nsqd from the topic's first
    message on (nsqd's pre-creation), so nothing published before it subscribes there
    is missed; ``#ephemeral`` channels are not pre-created."""
    topology = nsq_topology(n=2)
    first, second = topology.nsqds
    first.create_channel(nsq_topic, "durable")
    first.create_channel(nsq_topic, "temp#ephemeral")
    lookupd = topology.lookupd
    lookupd.wait_for(lambda: len(lookupd.channels(nsq_topic)) == 2)
    second.http_publish(nsq_topic, b"event")
    channels = second.wait_for(lambda: (second.topic_stats(nsq_topic) or {}).get("channels"))
    assert [(c["channel_name"], c["depth"]) for c in channels] == [("durable", 1)]


def test_a_stopped_nsqd_leaves_the_topology(
    nsq_topology: Callable[..., NSQTopology], nsq_topic: str
) -> None:
    topology = nsq_topology(n=2)
    for nsqd in topology.nsqds:
        nsqd.http_publish(nsq_topic, b"event")
    topology.wait_for_producers(nsq_topic)
    topology.stop_nsqd(0)  # skips against real nsqds
    survivor: NSQDServer = topology.nsqds[1]
    topology.lookupd.wait_for(
        lambda: (
            [p["tcp_port"] for p in topology.lookupd.producers(nsq_topic)] == [survivor.tcp_port]
        )
    )


def test_topology_passes_broker_options(nsq_topology: Callable[..., NSQTopology]) -> None:
    topology = nsq_topology(n=1, max_rdy_count=7)
    assert topology.embedded
    broker = topology.brokers[0]
    assert broker is not None and broker.options.max_rdy_count == 7


def test_embedded_topology_without_pytest(nsq_topic: str) -> None:
    """What the demo and the benchmark use: no fixture, background threads."""
    from airflow_provider_nsq.testing.topologies import EmbeddedTopology

    with EmbeddedTopology(n=2, max_rdy_count=50) as topology:
        assert topology.lookupd is not None
        for nsqd in topology.nsqds:
            assert nsqd.options.max_rdy_count == 50
            nsqd.publish(nsq_topic, b"event")
        producers = topology.wait_for_producers(nsq_topic)
        found = {f"{p['broadcast_address']}:{p['tcp_port']}" for p in producers}
        assert found == set(topology.nsqd_tcp_addresses)
        assert topology.lookupd_http_addresses == [topology.lookupd.http_address]
        # Registered with another (e.g. a real) lookupd: no lookupd of its own.
        with EmbeddedTopology(n=1, lookupd_tcp_address=topology.lookupd.tcp_address) as more:
            assert more.lookupd is None
            more.nsqds[0].publish(nsq_topic, b"event")
            topology.wait_for_producers(nsq_topic, count=3)
    assert topology.nsqds == [] and topology.lookupd is None
