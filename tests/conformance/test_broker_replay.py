"""Every real-nsqd 1.3.0 recording, replayed as a client against the embedded broker.

For each file: a broker with the equivalent flags (TLS files from the generator, the
auth server answering what the recorder's did), the recorded client bytes sent as they
were (message ids rewritten to the ids the broker gave out, commands compressed with the
negotiated codec), and the same frames, error texts and closing behaviour expected.
Only message ids and timestamps are normalised.

Timing-based recordings are also checked for order and bounds that real nsqd meets
too: never earlier than nominal, within a generous upper bound.
"""

from __future__ import annotations

import json
import re
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_nsq.testing.auth_server import AuthServer
from airflow_provider_nsq.testing.broker import EmbeddedNSQD
from airflow_provider_nsq.testing.certificates import TLSFiles
from tests.conformance.transcript import FILES, Transcript, sent_plain
from tests.support.nsqd_wire import Frame, Peer

# "Nothing arrives" windows longer than this are shortened, except in the timing
# recordings where the window is what proves a timer did not fire early.
MAX_QUIET_WINDOW_MS = 300
TIMING = {
    "dpub_ok",
    "heartbeat",
    "heartbeat_timeout",
    "inflight_after_disconnect",
    "msg_timeout",
    "output_buffer_timeout_disabled",
    "output_buffering_rdy_gt_1",
    "touch_ok",
}
SLACK_S = 0.6  # upper-bound allowance over the nominal time on a loaded CI machine
HEX16 = re.compile(rb"[0-9a-f]{16}")


@pytest.fixture
def auth_server(request: pytest.FixtureRequest) -> Iterator[AuthServer]:
    """The recorder's auth server: secrets and answers as in the files' notes."""
    answers: dict[str, Any] = {}
    for t in map(Transcript.load, FILES):
        for req in t.data.get("auth_server_requests", []):
            if req["responded_status"] == 200:
                answers[req["query"]["secret"]] = json.loads(req["responded_body"])
    with AuthServer(answers) as server:
        yield server


def broker_options(t: Transcript, tls_files: TLSFiles, auth: AuthServer | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for flag in t.flags:
        name, _, value = flag.lstrip("-").partition("=")
        key = name.replace("-", "_")
        if key in ("max_msg_size", "max_body_size"):
            options[key] = int(value)
        elif key == "tls_cert":
            options[key] = tls_files.server_cert
        elif key == "tls_key":
            options[key] = tls_files.server_key
        elif key == "tls_client_auth_policy":
            options[key] = value
        elif key == "tls_required":
            options[key] = value == "true"
        elif key == "auth_http_address":
            assert auth is not None
            options[key] = [auth.address]
        else:  # pragma: no cover - a new recording with a flag we do not map yet
            raise AssertionError(f"unmapped nsqd flag {flag}")
    return options


class Replay:
    """Walks one recording's steps over real sockets, collecting timings."""

    def __init__(self, t: Transcript, nsqd: EmbeddedNSQD, tls_files: TLSFiles) -> None:
        self.t = t
        self.nsqd = nsqd
        self.tls_files = tls_files
        self.peers: dict[str, Peer] = {}
        self.ids: dict[bytes, bytes] = {}  # recorded id -> id the broker gave
        self.times: list[float] = []  # per step: when it completed (monotonic)
        self.frames: list[list[Frame]] = []  # per step: frames read

    def peer(self, step: dict[str, Any]) -> Peer:
        name = step.get("conn", "main")
        if name not in self.peers:
            self.peers[name] = Peer((self.nsqd.host, self.nsqd.tcp_port))
        return self.peers[name]

    def run(self) -> None:
        try:
            for index, step in enumerate(self.t.steps):
                self.frames.append([])
                self.do(index, step)
                self.times.append(time.monotonic())
        finally:
            for p in self.peers.values():
                p.close()

    def do(self, index: int, step: dict[str, Any]) -> None:
        where = f"{self.t.name} step {index} {json.dumps(step)[:200]}"
        peer = self.peer(step)
        if "send_hex" in step:
            data = sent_plain(step)
            for recorded, actual in self.ids.items():
                data = data.replace(recorded, actual)
            peer.send_quietly(data)
        elif "recv" in step:
            expected = step["recv"]
            frames = peer.read_frames(len(expected), timeout=10.0)
            self.frames[index] = frames
            for want, got in zip(expected, frames, strict=True):
                self.check_frame(want, got, where)
        elif step.get("recv_closed"):
            kind = peer.expect_closed(timeout=10.0)
            assert kind == step["close_kind"], f"{where}: closed with {kind}"
        elif "recv_nothing_within_ms" in step:
            window = step["recv_nothing_within_ms"]
            if self.t.name not in TIMING:
                window = min(window, MAX_QUIET_WINDOW_MS)
            peer.expect_nothing(window / 1000.0)
        elif "client_action" in step:
            action = step["client_action"]
            if action == "tls_handshake":
                context = ssl.create_default_context(cafile=self.tls_files.ca_file)
                peer.start_tls(context)
                assert peer.sock.version() is not None  # type: ignore[attr-defined]
            elif action == "start_deflate":
                peer.start_compression("deflate")
            elif action == "start_snappy":
                peer.start_compression("snappy")
            elif action == "close":
                peer.close()
            else:  # pragma: no cover
                raise AssertionError(f"{where}: unknown client action {action}")
        else:  # pragma: no cover
            raise AssertionError(f"{where}: unknown step")

    def check_frame(self, want: dict[str, Any], got: Frame, where: str) -> None:
        assert got.type == want["frame_type"], f"{where}: got {got!r}"
        if got.type == 2:
            m = want["message"]
            assert got.attempts == m["attempts"], f"{where}: attempts of {got!r}"
            assert got.body == bytes.fromhex(m["body_hex"]), f"{where}: body of {got!r}"
            assert HEX16.fullmatch(got.msg_id), f"{where}: id {got.msg_id!r}"
            assert abs(got.timestamp - time.time_ns()) < 120e9, f"{where}: timestamp"
            recorded = m["id"].encode()
            assert self.ids.setdefault(recorded, got.msg_id) == got.msg_id, (
                f"{where}: the recording redelivers the same id, the broker used another"
            )
        elif "json" in want:
            assert json.loads(got.data) == want["json"], f"{where}: {got.data!r}"
            # exact bytes too: nsqd's key order and compact separators
            assert got.data == bytes.fromhex(want["data_hex"]), f"{where}: {got.data!r}"
        else:
            assert got.data == bytes.fromhex(want["data_hex"]), f"{where}: {got.data!r}"


# -- timing checks (tests/conformance/transcripts/FACTS.md sections 6 and 7) ---------------


def _send_index(t: Transcript, prefix: str, conn: str | None = None, nth: int = 0) -> int:
    hits = [
        i
        for i, s in enumerate(t.steps)
        if s.get("send_text", "").startswith(prefix) and (conn is None or s.get("conn") == conn)
    ]
    return hits[nth]


def _frame_times(r: Replay, pred: Any) -> list[float]:
    return [f.at for frames in r.frames for f in frames if pred(f)]


def _between(start: float, end: float, low: float, high: float, what: str) -> None:
    elapsed = end - start
    assert elapsed >= low, (
        f"{what}: after {elapsed * 1000:.0f} ms, earlier than {low * 1000:.0f} ms"
    )
    assert elapsed <= high + SLACK_S, (
        f"{what}: after {elapsed * 1000:.0f} ms, later than {high * 1000:.0f} ms"
    )


def check_timing(r: Replay) -> None:
    t = r.t
    name = t.name
    heartbeat = lambda f: f.type == 0 and f.data == b"_heartbeat_"  # noqa: E731
    message = lambda f: f.type == 2  # noqa: E731
    if name == "heartbeat":
        start = r.times[_send_index(t, "IDENTIFY")]
        beats = _frame_times(r, heartbeat)
        assert len(beats) == 4
        for k, at in enumerate(beats, 1):
            _between(start, at, k * 1.0, k * 1.0, f"heartbeat {k}")
    elif name == "heartbeat_timeout":
        start = r.times[_send_index(t, "IDENTIFY")]
        _between(start, _frame_times(r, heartbeat)[0], 1.0, 1.0, "heartbeat")
        _between(start, r.times[-1], 2.0, 2.0, "close after 2 silent intervals")
    elif name == "msg_timeout":
        _, again = _frame_times(r, message)
        _between(r.times[_send_index(t, "RDY")], again, 1.0, 1.0, "redelivery after msg_timeout")
    elif name == "touch_ok":
        _, again = _frame_times(r, message)
        _between(r.times[_send_index(t, "TOUCH")], again, 2.0, 2.0, "redelivery after TOUCH")
    elif name == "dpub_ok":
        (arrived,) = _frame_times(r, message)
        _between(r.times[_send_index(t, "DPUB")], arrived, 1.0, 1.0, "deferred delivery")
    elif name == "inflight_after_disconnect":
        _, again = _frame_times(r, message)
        pub = r.times[_send_index(t, "PUB", "producer")]
        _between(pub, again, 2.0, 2.0, "redelivery to B after A's msg_timeout")
    elif name == "output_buffering_rdy_gt_1":
        (arrived,) = _frame_times(r, message)
        # nsqd: 0-250 ms (a 250 ms ticker); the broker: at most 250 ms after buffering.
        _between(r.times[_send_index(t, "PUB")], arrived, 0.0, 0.25, "buffered delivery")
    elif name == "output_buffer_timeout_disabled":
        (arrived,) = _frame_times(r, message)
        (beat,) = _frame_times(r, heartbeat)
        assert arrived <= beat, "the message must come out with (before) the heartbeat"
        _between(r.times[_send_index(t, "IDENTIFY")], beat, 2.0, 2.0, "flushed by the heartbeat")


def _check_http_stats(r: Replay) -> None:
    check = r.t.data.get("http_stats_check")
    if not check:
        return
    topic = check["topics"][0]["topic_name"]
    stats = r.nsqd.stats(topic=topic)
    got = [
        {"topic_name": t["topic_name"], "message_count": t["message_count"]}
        for t in stats["topics"]
    ]
    assert got == check["topics"]


def _prepare(t: Transcript, nsqd: EmbeddedNSQD) -> None:
    # Recordings whose notes say the topic/channel was created beforehand over HTTP.
    for note in t.data.get("notes", []):
        match = re.search(r"topic/channel (\S+)/(\S+) was created", note)
        if match:
            topic, channel = match.groups()
            nsqd.call(lambda b, t=topic, c=channel: b.get_topic(t).get_channel(c))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_replay(path: Any, tls_files: TLSFiles, auth_server: AuthServer) -> None:
    t = Transcript.load(path)
    assert "recording_error" not in t.data
    uses_auth = any(f.startswith("--auth-http-address") for f in t.flags)
    with EmbeddedNSQD(**broker_options(t, tls_files, auth_server if uses_auth else None)) as nsqd:
        _prepare(t, nsqd)
        replay = Replay(t, nsqd, tls_files)
        replay.run()
        check_timing(replay)
        _check_http_stats(replay)
        for recorded in t.data.get("auth_server_requests", []):
            asked = [q for q in auth_server.requests if q.secret == recorded["query"]["secret"]]
            assert asked, "the broker never asked the auth server"
            assert asked[0].query == recorded["query"]
            assert asked[0].accept == recorded["accept_header"]
            assert asked[0].path == recorded["path"]


def test_every_recording_is_replayed() -> None:
    # The parametrisation globs the directory, so a new recording gets a test id.
    assert len(FILES) >= 75
