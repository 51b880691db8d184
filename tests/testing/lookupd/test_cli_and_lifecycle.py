"""The lookupd's CLI and embedded runner, and the broker's registration across restarts.

What a test setup that starts ``nsqlookupd`` / ``nsqd`` processes relies on: the CLIs
take the real daemons' flags, print where they listen, stop cleanly on SIGINT/SIGTERM;
a broker registers with every lookupd it can reach, survives a lookupd restart (it
registers everything again) and a hostile client cannot take the lookupd down.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading

import pytest

from airflow_provider_nsq.client.transport.http_request import http_request
from airflow_provider_nsq.testing.broker import EmbeddedNSQD
from airflow_provider_nsq.testing.lookupd import EmbeddedNSQLookupd
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.daemon_processes import daemon, lookup
from tests.support.lookupd_wire import MAGIC, RAW_CLIENT, V1Peer, identify_bytes


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_takes_nsqlookupds_flags_and_stops_on_signal(sig: signal.Signals) -> None:
    with daemon(
        "airflow_provider_nsq.testing.lookupd",
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        "--broadcast-address=127.0.0.1",
        "--inactive-producer-timeout=300s",
        "--tombstone-lifetime=45s",
        "--log-level=info",
    ) as (proc, tcp_port, http_port):
        assert http_request("127.0.0.1", http_port, "/ping", timeout=10).body == b"OK"
        peer = V1Peer(("127.0.0.1", tcp_port))
        reply = json.loads(peer.command(MAGIC + identify_bytes(**RAW_CLIENT)))
        assert (reply["tcp_port"], reply["http_port"]) == (tcp_port, http_port)
        assert reply["broadcast_address"] == "127.0.0.1" and reply["version"] == "1.3.0"
        peer.close()
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 0


def test_cli_rejects_bad_flags() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_nsq.testing.lookupd",
            "--tombstone-lifetime",
            "forever",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "invalid duration" in result.stderr


def test_embedded_lookupd_stops_cleanly_and_reports_startup_errors() -> None:
    with EmbeddedNSQLookupd() as first:
        port = first.tcp_port
        with pytest.raises(OSError):
            EmbeddedNSQLookupd(tcp_port=port).start()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # closed after stop()


def test_embedded_lookupd_stop_closes_idle_keep_alive_http_connections() -> None:
    # From Python 3.12.1 an asyncio server's wait_closed() waits for every connection:
    # one a client keeps open would hold stop() until its timeout.
    before = {t.name for t in threading.enumerate()}
    with EmbeddedNSQLookupd() as lookupd:
        conn = http.client.HTTPConnection("127.0.0.1", lookupd.http_port, timeout=5)
        conn.request("GET", "/ping")
        assert conn.getresponse().read() == b"OK"  # the connection stays open: keep-alive
    assert conn.sock.recv(100) == b""  # the lookupd closed it on stop
    conn.close()
    assert {t.name for t in threading.enumerate()} - before == set()


def test_broker_registers_again_after_a_lookupd_restart() -> None:
    """Deviation from nsqd (docs/testing.md): the lost connection is re-established at
    once (here as soon as the lookupd is back) and everything is registered again."""
    lookupd = EmbeddedNSQLookupd().start()
    tcp_port, http_port = lookupd.tcp_port, lookupd.http_port
    with EmbeddedNSQD(lookupd_tcp_addresses=[lookupd.tcp_address]) as broker:
        broker.publish("restart_topic", b"x")
        broker.call(lambda b: b.get_topic("restart_topic").get_channel("c"))
        wait_for(lambda: lookupd.producers("restart_topic"), 10)
        lookupd.stop()
        lookupd = EmbeddedNSQLookupd(tcp_port=tcp_port, http_port=http_port).start()
        try:
            producers = wait_for(lambda: lookupd.producers("restart_topic"), 10)
            assert producers[0]["tcp_port"] == broker.tcp_port
            status, doc = lookup(http_port, "restart_topic")
            assert (status, doc["channels"]) == (200, ["c"])
        finally:
            lookupd.stop()


def test_broker_registers_with_the_live_lookupds_when_one_is_dead() -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{placeholder.getsockname()[1]}"
    with (
        EmbeddedNSQLookupd() as live,
        EmbeddedNSQD(lookupd_tcp_addresses=[dead, live.tcp_address]) as broker,
    ):
        broker.publish("half_topic", b"x")
        assert wait_for(lambda: live.producers("half_topic"), 10)[0]["tcp_port"] == broker.tcp_port


def test_a_negative_identify_size_does_not_take_the_lookupd_down() -> None:
    """nsqlookupd 1.3.0 panics and exits (tests/conformance/lookupd_transcripts/FACTS.md
    section 9): every nsqd loses its registration. The embedded one answers an error and
    keeps the others."""
    with (
        EmbeddedNSQLookupd() as lookupd,
        EmbeddedNSQD(lookupd_tcp_addresses=[lookupd.tcp_address]) as broker,
    ):
        broker.publish("safe_topic", b"x")
        wait_for(lambda: lookupd.producers("safe_topic"), 10)
        peer = V1Peer((lookupd.host, lookupd.tcp_port))
        reply = peer.command(MAGIC + b"IDENTIFY\n\xff\xff\xff\xff")
        assert reply == b"E_BAD_BODY IDENTIFY invalid body size -1"
        assert peer.expect_closed() == "eof"
        assert http_request(lookupd.host, lookupd.http_port, "/ping", timeout=10).status == 200
        assert lookupd.producers("safe_topic")


def test_broadcast_ports_are_what_lookupds_hand_out() -> None:
    """nsqd's --broadcast-tcp-port / --broadcast-http-port: e.g. an nsqd behind a port
    mapping, or (in tests) a listed producer nobody can reach."""
    with (
        EmbeddedNSQLookupd() as lookupd,
        EmbeddedNSQD(
            lookupd_tcp_addresses=[lookupd.tcp_address],
            broadcast_tcp_port=1,
            broadcast_http_port=2,
        ) as broker,
    ):
        broker.publish("mapped_topic", b"x")
        producer = wait_for(lambda: lookupd.producers("mapped_topic"), 10)[0]
        assert (producer["tcp_port"], producer["http_port"]) == (1, 2)
