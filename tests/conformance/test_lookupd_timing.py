"""The ``timing_`` recordings: what real nsqd + nsqlookupd measured, checked where it
means something for the embedded pair (orders of magnitude and order, never tight
bounds: this machine is shared and loaded).
"""

from __future__ import annotations

import signal
import statistics
import time

from airflow_provider_nsq.client.transport.http_request import http_request
from airflow_provider_nsq.testing.broker import EmbeddedNSQD
from airflow_provider_nsq.testing.lookupd import EmbeddedNSQLookupd
from airflow_provider_nsq.testing.polling import wait_for
from tests.conformance.lookupd_transcript import load
from tests.support.daemon_processes import daemon, lookup

TIMING = {t.name: t for t in load("timing")}
BOUND_S = 5.0  # recorded: a few ms; generous for a loaded CI machine


def test_every_timing_recording_is_checked() -> None:
    assert set(TIMING) == {"timing_lookup_visibility", "timing_nsqd_exit"}


def test_a_new_topic_is_in_lookup_right_after_the_publish() -> None:
    """``timing_lookup_visibility``: 10 topics published over nsqd's HTTP API, each in
    /lookup within milliseconds of the /pub (recorded median 1.21 ms, max 1.65 ms)."""
    measured = TIMING["timing_lookup_visibility"].data["measured"]["nsqd_A_direct"]
    samples = measured["samples"]
    assert len(samples) == 10
    with (
        EmbeddedNSQLookupd() as lookupd,
        EmbeddedNSQD(lookupd_tcp_addresses=[lookupd.tcp_address]) as broker,
    ):
        delays = []
        for sample in samples:
            topic = sample["topic"]
            sent = time.monotonic()
            response = http_request(
                broker.host,
                broker.http_port,
                f"/pub?topic={topic}",
                method="POST",
                body=b"hello",
                timeout=10,
            )
            assert response.status == 200
            wait_for(lambda t=topic: lookupd.producers(t), BOUND_S, 0.01)
            delays.append(time.monotonic() - sent)
        assert max(delays) < BOUND_S
        # Same order of magnitude as real nsqd: well under a second typically.
        assert statistics.median(delays) < 1.0, delays


def test_a_stopped_nsqd_leaves_lookup_as_its_connection_closes() -> None:
    """``timing_nsqd_exit``: SIGTERM or SIGKILL, the producer leaves /lookup as soon as
    its connection closes (recorded: 2.3 ms and 0.89 ms); the topic stays with
    ``producers: []``. Here the brokers run as CLI processes, so they can be killed."""
    measured = TIMING["timing_nsqd_exit"].data["measured"]
    assert measured["nsqd_A_SIGKILL"]["exit_status"] == "killed by signal 9"
    with EmbeddedNSQLookupd() as lookupd:
        flags = ("--tcp-port=0", "--http-port=0", f"--lookupd-tcp-address={lookupd.tcp_address}")
        with (
            daemon("airflow_provider_nsq.testing.broker", *flags) as (a, _, a_http),
            daemon("airflow_provider_nsq.testing.broker", *flags) as (b, _, b_http),
        ):
            for port in (a_http, b_http):
                response = http_request(
                    "127.0.0.1", port, "/pub?topic=exit_topic", method="POST", body=b"x", timeout=10
                )
                assert response.status == 200
            wait_for(lambda: len(lookupd.producers("exit_topic")) == 2, 10)
            for proc, sig in ((b, signal.SIGTERM), (a, signal.SIGKILL)):
                before = len(lookupd.producers("exit_topic"))
                sent = time.monotonic()
                proc.send_signal(sig)
                wait_for(
                    lambda n=before: len(lookupd.producers("exit_topic")) == n - 1, BOUND_S, 0.01
                )
                assert time.monotonic() - sent < BOUND_S
            assert b.wait(10) == 0  # SIGTERM: a clean exit
        assert lookup(lookupd.http_port, "exit_topic") == (200, {"channels": [], "producers": []})
