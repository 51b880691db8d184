"""The hook, the sensor and the trigger on NSQ as deployed: a topic spread over several
nsqds, found through nsqlookupd (or listed in ``nsqd_tcp_addresses``), and publishing
that fails over along the connection's nsqd list.

Runs over the ``nsq_topology`` fixture: embedded by default, real daemons with
``NSQLOOKUPD_HTTP_ADDRESS`` and ``NSQD_ADDRESS`` (the nsqds registered with it).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger
from tests.support.airflow_runs import TEST_DAGS, load_dag, run_dag
from tests.support.marks import unraisable_is_an_error
from tests.support.net import closed_port

pytestmark = unraisable_is_an_error

DAGS = TEST_DAGS / "nsq_topology_dags.py"


def use_connection(monkeypatch, topology, *, lookupd: bool = True, extra: str = "") -> None:
    """``nsq_default``: the first nsqd, plus nsqlookupd (or every nsqd listed)."""
    first = topology.nsqds[0]
    if lookupd:
        query = "lookupd_http_addresses=" + ",".join(topology.lookupd_http_addresses)
    else:
        query = "nsqd_tcp_addresses=" + ",".join(topology.nsqd_tcp_addresses[1:])
    if extra:
        query += "&" + extra
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{first.tcp_address}?{query}")


def spread(topology, topic: str, channel: str, per_nsqd: int) -> dict[str, list[str]]:
    """Publish ``per_nsqd`` messages on each nsqd (its channel made first)."""
    sent: dict[str, list[str]] = {}
    for i, nsqd in enumerate(topology.nsqds):
        nsqd.create_channel(topic, channel)
        sent[nsqd.tcp_address] = []
        for j in range(per_nsqd):
            body = f"n{i}-{j}"
            nsqd.http_publish(topic, body.encode())
            sent[nsqd.tcp_address].append(body)
    return sent


def drained(topology, topic: str, channel: str) -> bool:
    stats = [n.channel_stats(topic, channel) or {} for n in topology.nsqds]
    return all(s.get("depth", 0) == 0 and s.get("in_flight_count", 0) == 0 for s in stats)


def test_consume_reads_every_nsqd_found_through_lookupd(monkeypatch, nsq_topology, nsq_topic):
    topology = nsq_topology(n=3)
    sent = spread(topology, nsq_topic, "c", 4)
    topology.wait_for_producers(nsq_topic)
    use_connection(monkeypatch, topology)
    with NSQHook() as hook:
        assert hook.lookupd_http_addresses == topology.lookupd_http_addresses
        got = hook.consume(nsq_topic, "c", max_messages=100, timeout=2)
    assert Counter(m.nsqd for m in got) == {a: 4 for a in sent}
    assert sorted(m.body.decode() for m in got) == sorted(b for bs in sent.values() for b in bs)
    topology.nsqds[0].wait_for(lambda: drained(topology, nsq_topic, "c"))


def test_manual_windows_answer_each_message_on_its_own_nsqd(monkeypatch, nsq_topology, nsq_topic):
    topology = nsq_topology(n=2)
    spread(topology, nsq_topic, "c", 3)
    use_connection(monkeypatch, topology, lookupd=False)
    with NSQHook() as hook:
        got = hook.consume(nsq_topic, "c", max_messages=10, timeout=2, ack="manual")
        assert len(got) == 6
        hook.touch(*got)
        hook.finish(*got[:4])
    # close() REQ'd the other two, each on its nsqd
    topology.nsqds[0].wait_for(
        lambda: sum(n.channel_stats(nsq_topic, "c")["depth"] for n in topology.nsqds) == 2
    )


def test_publishing_fails_over_along_the_connections_nsqds(monkeypatch, nsq_topology, nsq_topic):
    topology = nsq_topology(n=2)
    dead = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT",
        f"nsq://{dead}?nsqd_tcp_addresses={','.join(topology.nsqd_tcp_addresses)}",
    )
    with NSQHook() as hook:
        assert hook.nsqd_tcp_addresses == [dead, *topology.nsqd_tcp_addresses]
        hook.publish(nsq_topic, "one")
        hook.multi_publish(nsq_topic, ["two", "three"])
        hook.defer_publish(nsq_topic, "four", 0)
        assert hook.get_conn().config.address == topology.nsqd_tcp_addresses[0]
    first = topology.nsqds[0]
    first.wait_for(lambda: (first.topic_stats(nsq_topic) or {}).get("message_count") == 4)


def test_the_depth_is_summed_over_every_producer(monkeypatch, nsq_topology, nsq_topic):
    topology = nsq_topology(n=3)
    spread(topology, nsq_topic, "c", 2)
    topology.wait_for_producers(nsq_topic)
    use_connection(monkeypatch, topology)
    with NSQHook() as hook:
        depth = hook.channel_depth(nsq_topic, "c")
        assert depth is not None and depth.ready == 6
        assert asyncio.run(hook.achannel_depth(nsq_topic, "c")).ready == 6
        assert all(n.http_address in depth.nsqd for n in topology.nsqds)


async def _first_event(trigger: NSQMessageTrigger, timeout: float = 30.0):
    return await asyncio.wait_for(trigger.run().__anext__(), timeout)


@pytest.mark.parametrize(("lookupd", "checked_by"), [(True, "http"), (False, "tcp")])
def test_the_trigger_counts_every_nsqd(monkeypatch, nsq_topology, nsq_topic, lookupd, checked_by):
    topology = nsq_topology(n=2)
    spread(topology, nsq_topic, "etl", 1)
    topology.wait_for_producers(nsq_topic)
    use_connection(monkeypatch, topology, lookupd=lookupd)
    trigger = NSQMessageTrigger(topic=nsq_topic, channel="etl", min_messages=2)
    event = asyncio.run(_first_event(trigger))
    assert (event.payload["status"], event.payload["ready"]) == ("ready", 2)
    assert event.payload["checked_by"] == checked_by
    # Nothing taken: the HTTP check reads /stats, the TCP peek hands both back.
    for nsqd in topology.nsqds:
        nsqd.wait_for(lambda n=nsqd: n.channel_stats(nsq_topic, "etl")["depth"] == 1)


@pytest.mark.slow
@pytest.mark.parametrize("dag_id", ["nsq_topology_poke", "nsq_topology_deferrable"])
def test_a_sensor_run_gets_every_message_from_every_nsqd(
    airflow_db, monkeypatch, nsq_topology, nsq_topic, dag_id
):
    topology = nsq_topology(n=3)
    sent = spread(topology, nsq_topic, "sensor", 3)
    topology.wait_for_producers(nsq_topic)
    use_connection(monkeypatch, topology)
    # An nsqd that lookupd lists and nobody can reach: logged and skipped, by the depth
    # check (its HTTP API fails: a window is the check) and by the window.
    with topology.lookupd.announce(nsq_topic, "sensor", tcp_port=closed_port()):
        topology.wait_for_producers(nsq_topic, 4)
        result = run_dag(load_dag(DAGS, dag_id), topic=nsq_topic, channel="sensor")
    assert result.state == "success", result
    received = result.xcom["received"]
    assert Counter(r["nsqd"] for r in received) == {a: 3 for a in sent}
    assert sorted(r["body"] for r in received) == sorted(b for bs in sent.values() for b in bs)
    topology.nsqds[0].wait_for(lambda: drained(topology, nsq_topic, "sensor"))
