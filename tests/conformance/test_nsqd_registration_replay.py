"""The embedded broker registers with a lookupd as real nsqd 1.3.0 did (``nsqd_`` files).

Each recording is replayed with the embedded broker in nsqd's place and the embedded
lookupd in nsqlookupd's, with a recording proxy between them as the recorder had: the
same actions (publishes, channel and topic creates and deletes over the broker's HTTP
API, consumers subscribing over ``"  V2"``, SIGTERM), and between every two checks the
broker must have sent the same commands, byte for byte (IDENTIFY carries this broker's
ports and this machine's hostname), compared as a multiset where nsqd's order varies
(README.md), and the lookupd must have answered as nsqlookupd did. The recorder's
checks of the lookupd's and the broker's state must hold too.

Recordings that take real minutes run scaled (``nsqd_ping_cadence``,
``nsqd_inactive_producer_timeout``), and two show deliberate differences
(docs/testing.md): ``nsqd_reconnect`` (the broker re-registers at once instead of losing
commands for up to 15 s) and ``nsqd_restart_with_topics`` (no disk: the broker's topics
are registered once, when the lookupd becomes reachable).
"""

from __future__ import annotations

import json
import re
import socket
import struct
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_provider_nsq.client.transport.http_request import NSQ_V1_ACCEPT, http_request
from airflow_provider_nsq.testing.broker import EmbeddedNSQD
from airflow_provider_nsq.testing.lookupd import EmbeddedNSQLookupd
from airflow_provider_nsq.testing.polling import wait_for
from tests.conformance.lookupd_transcript import LookupdTranscript, load, normalise, with_ports
from tests.conformance.recording_proxy import RecordingProxy

TRANSCRIPTS = {t.name: t for t in load("nsqd")}
CUSTOM = {
    "nsqd_ping_cadence",
    "nsqd_inactive_producer_timeout",
    "nsqd_reconnect",
    "nsqd_restart_with_topics",
}
MAGIC = b"  V1"
SUB_OK = bytes.fromhex("00000006000000004f4b")


# -- the broker's byte stream, split without our codec ------------------------------------


def split_commands(stream: bytes) -> list[bytes]:
    """Magic, then each command line (IDENTIFY with its sized body); a partial tail is
    left out."""
    out: list[bytes] = []
    if len(stream) < 4:
        return out
    out.append(stream[:4])
    pos = 4
    while (end := stream.find(b"\n", pos)) >= 0:
        line = stream[pos : end + 1]
        if line == b"IDENTIFY\n":
            if len(stream) < end + 5:
                break
            (size,) = struct.unpack_from(">I", stream, end + 1)
            if len(stream) < end + 5 + size:
                break
            line = stream[pos : end + 5 + size]
        out.append(line)
        pos += len(line)
    return out


def split_replies(stream: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 4 <= len(stream):
        (size,) = struct.unpack_from(">I", stream, pos)
        if pos + 4 + size > len(stream):
            break
        out.append(stream[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return out


# -- a recorded scenario, replayed --------------------------------------------------------


@dataclass
class Replay:
    t: LookupdTranscript
    lookupd: EmbeddedNSQLookupd
    proxy: RecordingProxy
    broker_options: dict[str, Any] = field(default_factory=dict)
    broker: EmbeddedNSQD | None = None
    consumers: list[socket.socket] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)  # commands compared, per conn
    ports: dict[str, int] = field(default_factory=dict)

    # -- expectations -------------------------------------------------------------------

    def actual_ports(self) -> dict[str, int]:
        assert self.lookupd.lookupd is not None
        ports = {
            "nsqlookupd_tcp": self.lookupd.tcp_port,
            "nsqlookupd_http": self.lookupd.http_port,
            "proxy": self.proxy.port,
        }
        if self.broker is not None and "nsqd_A_tcp" not in self.ports:
            ports.update(nsqd_A_tcp=self.broker.tcp_port, nsqd_A_http=self.broker.http_port)
        self.ports.update(ports)
        return dict(self.ports)

    def expected_command(self, step: dict[str, Any]) -> bytes:
        if "body_json" not in step:
            return bytes.fromhex(step["send_hex"])
        body = with_ports(step["body_json"], self.t.ports, self.actual_ports())
        body["hostname"] = socket.gethostname()
        data = json.dumps(dict(sorted(body.items())), separators=(",", ":")).encode()
        return b"IDENTIFY\n" + struct.pack(">I", len(data)) + data

    def expected_reply(self, recv: dict[str, Any]) -> bytes:
        if "json" not in recv:
            return bytes.fromhex(recv["data_hex"])
        doc = with_ports(recv["json"], self.t.ports, self.actual_ports())
        doc["hostname"] = self.lookupd.options.hostname
        return json.dumps(doc, separators=(",", ":")).encode()

    # -- the proxy's view -----------------------------------------------------------------

    def conn_index(self, name: str) -> int:
        return int(name.removeprefix("conn")) - 1

    def commands(self, conn: int) -> list[bytes]:
        if conn >= len(self.proxy.connections):
            return []
        return split_commands(bytes(self.proxy.connections[conn].sent))

    def replies(self, conn: int) -> list[bytes]:
        if conn >= len(self.proxy.connections):
            return []
        return split_replies(bytes(self.proxy.connections[conn].received))

    def expect_batch(
        self, expected: dict[str, list[bytes]], replies: dict[str, list[bytes]]
    ) -> None:
        """The next commands of each connection are ``expected`` (in any order, as
        nsqd's are) and the lookupd answered each as recorded."""
        for name, commands in expected.items():
            conn = self.conn_index(name)
            start = self.seen[name]
            want = start + len(commands)
            got = self.proxy.wait_for(lambda c=conn, w=want: len(self.commands(c)) >= w)
            assert got
            new = self.commands(conn)[start:want]
            assert Counter(new) == Counter(commands), (self.t.name, name, new, commands)
            if start == 0:  # the magic first, then IDENTIFY: this order is fixed
                assert new[:2] == commands[:2]
            self.seen[name] = want
            # Answered: the lookupd updates its DB before it replies.
            self.proxy.wait_for(lambda c=conn, n=want - 1: len(self.replies(c)) >= n)
        for name, wanted in replies.items():
            conn = self.conn_index(name)
            count = self.seen[name] - 1  # every command but the magic is answered
            got_replies = self.proxy.wait_for(
                lambda c=conn, n=count: len(self.replies(c)) >= n and self.replies(c)
            )
            assert Counter(got_replies[count - len(wanted) : count]) == Counter(wanted)

    def expect_no_more(self, quiet_s: float = 0.2) -> None:
        time.sleep(quiet_s)
        for name, count in self.seen.items():
            assert len(self.commands(self.conn_index(name))) == count, (
                self.t.name,
                name,
                self.commands(self.conn_index(name))[count:],
            )

    # -- actions and checks ---------------------------------------------------------------

    def start_broker(self) -> None:
        self.broker = EmbeddedNSQD(
            lookupd_tcp_addresses=[self.proxy.address], **self.broker_options
        ).start()

    def act(self, action: str) -> None:
        if action.startswith("start nsqd_A"):
            self.start_broker()
        elif match := re.fullmatch(r"nsqd_A: POST (\S+)(?: \(body '(.*)'\))?", action):
            assert self.broker is not None
            target, body = match.group(1), (match.group(2) or "").encode()
            response = http_request(
                self.broker.host,
                self.broker.http_port,
                target,
                method="POST",
                body=body,
                timeout=10,
            )
            assert response.status == 200, (action, response.body)
        elif match := re.fullmatch(r"consumer -> nsqd_A TCP: '  V2' 'SUB (\S+) (\S+)'", action):
            assert self.broker is not None
            sock = socket.create_connection((self.broker.host, self.broker.tcp_port), timeout=10)
            sock.sendall(b"  V2" + f"SUB {match.group(1)} {match.group(2)}\n".encode())
            reply = b""
            while len(reply) < len(SUB_OK):
                reply += sock.recv(64)
            assert reply == SUB_OK
            self.consumers.append(sock)
        elif action == "consumer closes its nsqd connection":
            self.consumers.pop().close()
        elif action.startswith("SIGTERM to nsqd_A"):
            assert self.broker is not None
            self.broker.stop()
        elif action == "nsqd_A process exited":
            pass
        else:  # pragma: no cover - a new recording
            raise AssertionError(f"unmapped action {action!r}")

    def check(self, step: dict[str, Any]) -> None:
        check = step["check"]
        if check.startswith("nsqd_A GET /stats"):
            assert self.broker is not None
            topic = re.search(r"topic=(\S+)", check)
            assert topic
            stats = self.broker.stats(topic.group(1))["topics"][0]["channels"]
            assert [c["channel_name"] for c in stats] == step["channels"]
            assert [c["depth"] for c in stats] == step["channel_depths"]
            return
        method, target = check.split(" ", 1)
        expected = with_ports(step.get("json"), self.t.ports, self.actual_ports())

        def answer() -> tuple[int, Any]:
            response = http_request(
                self.lookupd.host,
                self.lookupd.http_port,
                target,
                method=method,
                timeout=10,
                headers=[("Accept", NSQ_V1_ACCEPT)],
            )
            if "json" not in step:
                return response.status, None
            mine = {c.server_address for c in self.proxy.connections}
            return response.status, normalise(response.json(), mine)

        # A close reaches the lookupd's DB a moment after the proxy saw it: poll.
        wanted = (step["status"], normalise(expected) if "json" in step else None)
        wait_for(
            lambda: answer() == wanted,
            5,
            0.01,
            message=lambda: f"{check}: answered {answer()}, not {wanted}",
        )


@contextmanager
def replay(t: LookupdTranscript, **lookupd_options: Any) -> Iterator[Replay]:
    with EmbeddedNSQLookupd(**lookupd_options) as lookupd:
        proxy = RecordingProxy((lookupd.host, lookupd.tcp_port)).start()
        r = Replay(t, lookupd, proxy)
        try:
            yield r
        finally:
            for sock in r.consumers:
                sock.close()
            if r.broker is not None:
                r.broker.stop()
            proxy.stop()


def run_generic(r: Replay) -> None:
    commands: dict[str, list[bytes]] = {}
    replies: dict[str, list[bytes]] = {}
    for step in r.t.steps:
        if step.get("from") == "nsqd":
            commands.setdefault(step["conn"], []).append(r.expected_command(step))
        elif step.get("from") == "nsqlookupd":
            replies.setdefault(step["conn"], []).extend(r.expected_reply(x) for x in step["recv"])
        elif "action" in step:
            r.act(step["action"])
        elif "check" in step or "nsqd closed its side" in step.get("event", ""):
            r.expect_batch(commands, replies)
            commands, replies = {}, {}
            if "check" in step:
                r.check(step)
            else:
                index = r.conn_index(step["conn"])
                closer = r.proxy.wait_for(lambda i=index: r.proxy.connections[i].closed_by)
                assert closer == "client"  # the broker closed, sending nothing first
    r.expect_batch(commands, replies)
    r.expect_no_more()


@pytest.mark.parametrize("name", sorted(set(TRANSCRIPTS) - CUSTOM), ids=lambda n: n)
def test_replay(name: str) -> None:
    with replay(TRANSCRIPTS[name]) as r:
        run_generic(r)


def test_every_nsqd_recording_is_replayed() -> None:
    assert len(TRANSCRIPTS) == 11
    assert set(TRANSCRIPTS) >= CUSTOM


# -- the custom replays ------------------------------------------------------------------


def _commands_of(t: LookupdTranscript, conn: str, r: Replay) -> list[bytes]:
    return [r.expected_command(s) for s in t.steps if s.get("from") == "nsqd" and s["conn"] == conn]


def test_restart_with_topics_registers_every_channel_or_topic_once_identified() -> None:
    """The first half of the recording: after IDENTIFY, ``REGISTER T C`` per channel and
    ``REGISTER T`` for a topic without channels. Real nsqd then sent them all again (the
    notifications queued while it loaded its metadata from disk); the broker has no disk.
    Here the broker has the topics before the lookupd can be reached."""
    t = TRANSCRIPTS["nsqd_restart_with_topics"]
    with EmbeddedNSQLookupd() as lookupd:
        placeholder = socket.socket()
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
        placeholder.close()  # nothing listens there yet: the broker keeps retrying
        with EmbeddedNSQD(lookupd_tcp_addresses=[f"127.0.0.1:{port}"]) as broker:
            broker.publish("rs_topic1", b"x")
            broker.publish("rs_topic2", b"x")
            for channel in ("rs_ch1", "rs_ch2"):
                broker.call(lambda b, c=channel: b.get_topic("rs_topic1").get_channel(c))
            with RecordingProxy((lookupd.host, lookupd.tcp_port), port=port) as proxy:
                r = Replay(t, lookupd, proxy, broker=broker)
                recorded = _commands_of(t, "conn1", r)
                first_round = recorded[:5]  # magic, IDENTIFY, 3 REGISTERs
                # nsqd's repeat (metadata-loading notifications) is a superset.
                assert set(recorded[5:]) > set(first_round[2:])
                r.expect_batch({"conn1": first_round}, {})
                r.check(next(s for s in t.steps if "check" in s))
                r.expect_no_more()


def test_reconnect_registers_everything_again_at_once() -> None:
    """Deviation from ``nsqd_reconnect``: nsqd wrote ``REGISTER rc_topic3`` into the cut
    connection, lost it, and re-registered on its next 15 s tick; the broker notices the
    cut at once, reconnects and registers everything again, so ``rc_topic3`` is never
    missing. The commands of the new connection are the recorded ones (but its PING)."""
    t = TRANSCRIPTS["nsqd_reconnect"]
    with replay(t) as r:
        r.act("start nsqd_A with --lookupd-tcp-address=127.0.0.1:<proxy>")
        conn1 = _commands_of(t, "conn1", r)
        r.act("nsqd_A: POST /pub?topic=rc_topic1 (body 'hello')")
        r.act("nsqd_A: POST /channel/create?topic=rc_topic1&channel=rc_ch")
        r.act("nsqd_A: POST /pub?topic=rc_topic2 (body 'hello')")
        r.expect_batch({"conn1": conn1}, {})
        r.proxy.connections[0].cut()
        conn2 = [c for c in _commands_of(t, "conn2", r) if c != b"PING\n"]
        before_pub = [c for c in conn2 if c != b"REGISTER rc_topic3\n"]
        r.expect_batch({"conn2": before_pub}, {})
        assert r.lookupd.producers("rc_topic1")  # back at once, not after 15 s
        r.act("nsqd_A: POST /pub?topic=rc_topic3 (body 'hello')")
        r.expect_batch({"conn2": [b"REGISTER rc_topic3\n"]}, {})
        for step in t.steps[-2:]:  # the recorder's final checks hold
            r.check(step)
        r.expect_no_more()


def test_ping_cadence_scaled() -> None:
    """nsqd PINGs every 15 s (fixed); the broker's interval is an option (default 15 s)
    so this runs in under a second: the same ``PING\\n`` bytes at the same cadence."""
    assert EmbeddedNSQD().options.lookupd_ping_interval == 15_000
    t = TRANSCRIPTS["nsqd_ping_cadence"]
    interval = t.data["measured"]["ms_between_pings"] / 50  # 300 ms
    with replay(t) as r:
        r.broker_options = {"lookupd_ping_interval": int(interval)}
        r.act("start nsqd_A with --lookupd-tcp-address=127.0.0.1:<proxy>")
        identified = time.monotonic()
        r.act("nsqd_A: POST /pub?topic=ping_topic (body 'hello')")
        commands = _commands_of(t, "conn1", r)
        assert commands[-2:] == [b"PING\n", b"PING\n"]
        r.expect_batch({"conn1": commands}, {})
        elapsed_ms = (time.monotonic() - identified) * 1000
        assert elapsed_ms >= 2 * interval * 0.9  # two ticks, never early
        r.check(t.steps[-1])


def test_inactive_producer_timeout_scaled() -> None:
    """With an inactive-producer timeout shorter than the PING interval the producer
    flickers, as recorded (5 s / 15 s), here at a tenth of the time."""
    t = TRANSCRIPTS["nsqd_inactive_producer_timeout"]
    changes = t.data["measured"]["visibility_changes"]
    assert [c["producer_listed_in_lookup"] for c in changes] == [True, False, True]
    timeout_ms, ping_ms = 500, 1500
    with replay(t, inactive_producer_timeout=timeout_ms) as r:
        r.broker_options = {"lookupd_ping_interval": ping_ms}
        r.act("start nsqd_A with --lookupd-tcp-address=127.0.0.1:<proxy>")
        identified = time.monotonic()  # start() returns once IDENTIFY was answered
        r.act("nsqd_A: POST /pub?topic=inactive_topic (body 'hello')")
        r.proxy.wait_for(lambda: len(r.replies(0)) >= 2)  # IDENTIFY and REGISTER answered
        seen: list[tuple[float, bool]] = []
        while time.monotonic() - identified < (ping_ms + 2000) / 1000:
            listed = bool(r.lookupd.producers("inactive_topic"))
            if not seen or seen[-1][1] != listed:
                seen.append((time.monotonic() - identified, listed))
            if len(seen) >= 2 and not seen[-2][1] and seen[-1][1]:
                break  # hidden, then back
            time.sleep(0.02)
        states = [listed for _, listed in seen]
        # Listed until the timeout (unless this loaded machine polled too late to see
        # it), hidden, then back with the first PING.
        assert states in ([True, False, True], [False, True]), seen
        assert seen[-1][0] * 1000 >= ping_ms * 0.8, seen
        commands = _commands_of(t, "conn1", r)
        r.expect_batch({"conn1": commands}, {})
