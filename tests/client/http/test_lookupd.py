"""``LookupdClient``: every nsqlookupd asked at once, producers unioned, dead ones skipped.

Live tests use the ``nsq_topology`` / ``nsqlookupd`` fixtures, so they pass against a real
nsqlookupd too (``NSQLOOKUPD_HTTP_ADDRESS``); shapes no current daemon sends (the
pre-1.0 envelope) come from a canned HTTP server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from airflow_provider_nsq.client.http.lookupd_api import (
    LookupdClient,
    Producer,
    parse_addresses,
    parse_lookupd_address,
)
from airflow_provider_nsq.protocol.errors import NSQConnectionError, NSQValueError
from tests.support.net import closed_port, http_server, silent_server

MODES = ["blocking", "asyncio"]


def lookup(client: LookupdClient, mode: str, topic: str) -> list[Producer]:
    if mode == "blocking":
        return client.lookup(topic)
    return asyncio.run(client.alookup(topic))


def producer_entry(tcp_port: int, address: str = "127.0.0.1") -> dict:
    return {
        "remote_address": f"{address}:50000",
        "hostname": "host-a",
        "broadcast_address": address,
        "tcp_port": tcp_port,
        "http_port": tcp_port + 1,
        "version": "1.3.0",
    }


@pytest.mark.parametrize("mode", MODES)
def test_lists_every_nsqd_that_has_the_topic(mode, nsq_topology, nsq_topic) -> None:
    topology = nsq_topology(n=2)
    for nsqd in topology.nsqds:
        nsqd.http_publish(nsq_topic, b"x")
    topology.wait_for_producers(nsq_topic)
    producers = lookup(LookupdClient(topology.lookupd_http_addresses), mode, nsq_topic)
    assert sorted(p.tcp_address for p in producers) == sorted(topology.nsqd_tcp_addresses)
    by_tcp = {p.tcp_address: p for p in producers}
    for nsqd in topology.nsqds:
        assert by_tcp[nsqd.tcp_address].http_address == nsqd.http_address
        assert by_tcp[nsqd.tcp_address].version.startswith("1.")


@pytest.mark.parametrize("mode", MODES)
def test_a_topic_nobody_has_is_no_producer_yet(mode, nsqlookupd, nsq_topic) -> None:
    client = LookupdClient([nsqlookupd.http_address])
    assert lookup(client, mode, nsq_topic) == []  # 404 TOPIC_NOT_FOUND
    nsqlookupd.create_topic(nsq_topic)
    try:
        assert lookup(client, mode, nsq_topic) == []  # 200 with "producers": []
    finally:
        nsqlookupd.delete_topic(nsq_topic)


@pytest.mark.parametrize("mode", MODES)
def test_a_dead_lookupd_among_live_ones_is_logged_and_skipped(
    mode, nsq_topology, nsq_topic, caplog
) -> None:
    topology = nsq_topology(n=1)
    topology.nsqds[0].http_publish(nsq_topic, b"x")
    topology.wait_for_producers(nsq_topic)
    dead = f"127.0.0.1:{closed_port()}"
    client = LookupdClient([dead, *topology.lookupd_http_addresses])
    with caplog.at_level(logging.WARNING):
        producers = lookup(client, mode, nsq_topic)
    assert [p.tcp_address for p in producers] == topology.nsqd_tcp_addresses
    assert dead in caplog.text


@pytest.mark.parametrize("mode", MODES)
def test_all_lookupds_dead_is_an_error_naming_each(mode) -> None:
    dead = [f"127.0.0.1:{closed_port()}", f"127.0.0.1:{closed_port()}"]
    with pytest.raises(NSQConnectionError) as info:
        lookup(LookupdClient(dead), mode, "orders")
    for address in dead:
        assert address in str(info.value)
    assert "orders" in str(info.value)


@pytest.mark.parametrize("mode", MODES)
def test_a_hung_lookupd_costs_at_most_the_timeout(mode, nsqlookupd, nsq_topic) -> None:
    with silent_server() as hung:
        client = LookupdClient([hung, nsqlookupd.http_address], timeout=0.5)
        started = time.monotonic()
        assert lookup(client, mode, nsq_topic) == []
        assert time.monotonic() - started < 3  # both asked at once, bounded by 0.5 s


@pytest.mark.parametrize("mode", MODES)
def test_the_pre_1_0_envelope_and_duplicates_across_lookupds(mode) -> None:
    legacy = {
        "status_code": 200,
        "status_txt": "OK",
        "data": {"channels": [], "producers": [producer_entry(4150), producer_entry(4250)]},
    }
    current = {"channels": ["c"], "producers": [producer_entry(4250), producer_entry(4350)]}
    with (
        http_server(lambda path: (200, json.dumps(legacy).encode())) as old,
        http_server(lambda path: (200, json.dumps(current).encode())) as new,
    ):
        producers = lookup(LookupdClient([old, f"http://{new}/"]), mode, "orders")
    assert [p.tcp_port for p in producers] == [4150, 4250, 4350]
    assert producers[0] == Producer("127.0.0.1", 4150, 4151, "host-a", "1.3.0")


@pytest.mark.parametrize("mode", MODES)
def test_not_found_in_both_shapes_and_other_errors(mode, caplog) -> None:
    answers = {
        "/lookup?topic=v1": (404, b'{"message":"TOPIC_NOT_FOUND"}'),
        "/lookup?topic=legacy": (
            404,
            b'{"status_code":404,"status_txt":"TOPIC_NOT_FOUND","data":null}',
        ),
        "/lookup?topic=broken": (500, b'{"message":"INTERNAL_ERROR"}'),
        "/lookup?topic=garbage": (200, b'{"topics": 3}'),
    }
    with http_server(lambda path: answers[path]) as server:
        client = LookupdClient([server])
        assert lookup(client, mode, "v1") == []
        assert lookup(client, mode, "legacy") == []
        with pytest.raises(NSQConnectionError, match="INTERNAL_ERROR"):
            lookup(client, mode, "broken")
        with pytest.raises(NSQConnectionError, match="did not answer with nsqlookupd"):
            lookup(client, mode, "garbage")


def test_addresses_in_every_form_users_write_them() -> None:
    assert parse_lookupd_address("10.0.0.1").address == "10.0.0.1:4161"
    assert parse_lookupd_address(" http://lookupd:4161/lookup ").address == "lookupd:4161"
    assert parse_lookupd_address("https://lookupd").url == "https://lookupd:4161"
    assert parse_lookupd_address("[::1]:4161").address == "[::1]:4161"
    assert parse_addresses("a:1, b:2,,a:1", "x") == ["a:1", "b:2"]
    assert parse_addresses(["a:1", " b:2 "], "x") == ["a:1", "b:2"]
    with pytest.raises(NSQValueError, match="at least one"):
        LookupdClient(" , ")
    with pytest.raises(NSQValueError, match="lookupd HTTP address"):
        LookupdClient(["host:notaport"])
    with pytest.raises(NSQValueError, match="timeout"):
        LookupdClient(["a:1"], timeout=0)
    assert Producer("::1", 4150, 4151).tcp_address == "[::1]:4150"
