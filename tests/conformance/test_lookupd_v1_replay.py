"""Every ``v1_`` recording of real nsqlookupd 1.3.0, replayed against the embedded lookupd.

For each file: a fresh lookupd with the recording's flags, the recorded bytes sent as
they were, and the same replies expected byte for byte (only the IDENTIFY reply's
ports and hostname are the lookupd's own), the same closes, and the same HTTP answers
to the recorder's checks (lists compared as sets, ``remote_address`` checked to be one
of this test's client sockets). The two recordings driven by a timeout are replayed
with the recorded gaps between steps. ``v1_identify_negative_size_crash`` is a deliberate difference
(docs/testing.md): nsqlookupd exits, the embedded one answers an error and stays up.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from airflow_provider_nsq.client.transport.http_request import NSQ_V1_ACCEPT, http_request
from airflow_provider_nsq.testing.lookupd import EmbeddedNSQLookupd
from tests.conformance.lookupd_transcript import (
    DEFAULT_CONN,
    LookupdTranscript,
    load,
    normalise,
)
from tests.support.lookupd_wire import V1Peer

TRANSCRIPTS = load("v1")
PACED = {"v1_inactive_producer_timeout", "v1_tombstone_lifetime"}
MAX_QUIET_WINDOW_S = 0.3
CRASH = "v1_identify_negative_size_crash"


def http_check(lookupd: EmbeddedNSQLookupd, check: str) -> tuple[int, bytes]:
    method, target = check.split(" ", 1)
    response = http_request(
        lookupd.host,
        lookupd.http_port,
        target,
        method=method,
        timeout=10,
        headers=[("Accept", NSQ_V1_ACCEPT)],
    )
    return response.status, response.body


def expected_reply(recv: dict[str, Any], lookupd: EmbeddedNSQLookupd) -> bytes:
    if "json" not in recv:
        return bytes.fromhex(recv["data_hex"])
    # The IDENTIFY reply: the same bytes, with this lookupd's ports and hostname.
    doc = dict(recv["json"])
    doc.update(
        tcp_port=lookupd.tcp_port,
        http_port=lookupd.http_port,
        hostname=lookupd.options.hostname,
    )
    return json.dumps(doc, separators=(",", ":")).encode()


def options_for(t: LookupdTranscript) -> dict[str, int]:
    options = {}
    for flag, name in (
        ("inactive-producer-timeout", "inactive_producer_timeout"),
        ("tombstone-lifetime", "tombstone_lifetime"),
    ):
        value = t.flag_ms(flag)
        if value is not None:
            options[name] = value
    return options


@pytest.mark.parametrize("t", TRANSCRIPTS, ids=lambda t: t.name)
def test_replay(t: LookupdTranscript) -> None:
    peers: dict[str, V1Peer] = {}
    paced = t.name in PACED
    with EmbeddedNSQLookupd(**options_for(t)) as lookupd:
        address = (lookupd.host, lookupd.tcp_port)

        def peer(step: dict[str, Any]) -> V1Peer:
            name = step.get("conn", DEFAULT_CONN)
            if name not in peers:
                peers[name] = V1Peer(address)
            return peers[name]

        done, done_ms = time.monotonic(), t.steps[0]["t_ms"]
        try:
            for step in t.steps:
                if paced:
                    # Each step at least as long after the previous one finished as
                    # recorded: a check due after a timeout stays after it; those due
                    # before it have >= 1 s of margin.
                    due = done + (step["t_ms"] - done_ms) / 1000
                    time.sleep(max(0.0, due - time.monotonic()))
                replay_step(t, step, lookupd, peer, peers)
                done, done_ms = time.monotonic(), step["t_ms"]
        finally:
            for p in peers.values():
                p.close()


def replay_step(
    t: LookupdTranscript,
    step: dict[str, Any],
    lookupd: EmbeddedNSQLookupd,
    peer: Any,
    peers: dict[str, V1Peer],
) -> None:
    if "send_hex" in step:
        peer(step).send(bytes.fromhex(step["send_hex"]))
        if t.name == CRASH and step["send_hex"].endswith("ffffffff"):
            # Deviation: an error reply where nsqlookupd 1.3.0 panics and exits.
            assert peer(step).read_reply() == b"E_BAD_BODY IDENTIFY invalid body size -1"
    elif "recv" in step:
        for recv in step["recv"]:
            assert peer(step).read_reply() == expected_reply(recv, lookupd), step
    elif step.get("recv_closed"):
        assert peer(step).expect_closed() == step["close_kind"]
    elif "recv_nothing_within_ms" in step:
        window = step["recv_nothing_within_ms"] / 1000
        peer(step).expect_nothing(window if t.name in PACED else min(window, MAX_QUIET_WINDOW_S))
    elif "client_action" in step:
        if step["client_action"] == "close":
            peer(step).close()
        else:
            peer(step).shutdown_write()
    elif "check" in step:
        check_state(t, step, lookupd, peers)
    else:  # pragma: no cover - a new kind of step
        raise AssertionError(f"unknown step {step}")


def check_state(
    t: LookupdTranscript,
    step: dict[str, Any],
    lookupd: EmbeddedNSQLookupd,
    peers: dict[str, V1Peer],
) -> None:
    check = step["check"]
    if t.name == CRASH:
        # Deviation: the embedded lookupd is still up after the bad size.
        if check == "GET /ping after the crash":
            assert http_check(lookupd, "GET /ping") == (200, b"OK")
        return
    status, body = http_check(lookupd, check)
    assert status == step["status"], (check, body)
    if "json" in step:
        mine = {p.local_address for p in peers.values() if not p.closed and not p.closed_by_us}
        assert normalise(json.loads(body), mine) == normalise(step["json"]), check
    elif "body_text" in step:
        assert body.decode() == step["body_text"], check


def test_every_v1_recording_is_replayed() -> None:
    assert len(TRANSCRIPTS) == 34
