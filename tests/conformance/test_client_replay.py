"""The client's protocol core against every recorded conversation.

For each connection in each recording, the client's calls are derived from what the
recorder sent. The core must emit exactly those bytes (after decompression when a
compression layer is on), turn the recorded server bytes into the matching events (reply,
message, heartbeat, fatal or non-fatal error, close), and end in the recorded state.

Commands the validated API refuses (a bad topic, an empty body, RDY above the server's
maximum, a REQ delay nsqd would silently clamp, ...) are checked to be refused, then
sent raw with ``send_raw`` so the server's recorded reaction is still replayed.
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_nsq.protocol import (
    ClientConnection,
    CommandFailed,
    ConnectionClosed,
    ConnectionState,
    Heartbeat,
    Message,
    NSQAuthError,
    NSQStateError,
    NSQTLSError,
    NSQValueError,
    Reply,
    ServerWarning,
    StartTLS,
)
from airflow_provider_nsq.protocol.compression import DeflateCodec, SnappyCodec
from airflow_provider_nsq.protocol.constants import MAGIC_V2
from tests.conformance.transcript import FILES, Transcript, recv_wire, sent_plain

# Sends the validated API cannot express at all (the recorder wrote malformed bytes).
UNEXPRESSIBLE = {
    "bad_magic": "magic other than '  V2'",
    "invalid_command": "unknown command FOO",
    "rdy_not_a_number": "RDY with a non-number",
    "identify_twice": "a second IDENTIFY",
    "auth_twice": "a second AUTH",
    "identify_deflate_and_snappy": "both compressions at once",
    "mpub_count_mismatch_fewer": "MPUB count not matching its messages",
    "mpub_count_mismatch_more": "MPUB count not matching its messages",
    "mpub_body_too_big": "MPUB body length not matching its messages",
    "pub_insufficient_params": "PUB without a topic",
    "sub_insufficient_params": "SUB without a channel",
}

# Recordings where the client stops on purpose when it reads the IDENTIFY response.
STOPS_AT_HANDSHAKE = {
    "auth_identify": NSQAuthError,  # nsqd requires AUTH and the recorder had no secret
    "identify_tls_not_configured": NSQTLSError,  # asked for TLS, nsqd offers none: no plaintext
    "identify_tls_without_negotiation": NSQTLSError,  # same, without feature negotiation
}

# Sends the API refuses on purpose although nsqd accepts them.
REFUSED_BUT_ACCEPTED = {
    "pub_topic_with_space": "nsqd ignores the text after the space; the client refuses the name",
    "req_timeout_clamped": "nsqd clamps the REQ delay silently; the client refuses it",
}

_REPLIED = {"PUB", "MPUB", "DPUB", "SUB", "CLS", "IDENTIFY", "AUTH"}


class Replay:
    """Drives one ClientConnection through one recorded connection."""

    def __init__(self, t: Transcript, conn: str) -> None:
        self.t = t
        self.conn = conn
        self.steps = t.steps_of(conn)
        self.core: ClientConnection | None = None
        self.expected = bytearray()
        self.emitted = bytearray()
        self.peer_codec: DeflateCodec | SnappyCodec | None = None
        self.refused: list[tuple[str, Exception | None]] = []
        self.diverged = False
        self.events: list[object] = []

    # what the client will be configured with, from the recorded IDENTIFY/AUTH
    def _identify(self) -> dict | None:
        sends = [s for s in self.steps if "send_hex" in s]
        if len(sends) > 1 and sent_plain(sends[1]).startswith(b"IDENTIFY\n"):
            return json.loads(sent_plain(sends[1])[13:])
        return None

    def _auth_secret(self) -> bytes | None:
        for s in self.steps:
            if "send_hex" in s and sent_plain(s).startswith(b"AUTH\n"):
                return sent_plain(s)[9:]
        return None

    def collect(self) -> None:
        assert self.core is not None
        data = self.core.data_to_send()
        if data and self.peer_codec is not None:
            data = self.peer_codec.decompress(data)
        self.emitted += data

    def run(self) -> None:
        stop = STOPS_AT_HANDSHAKE.get(self.t.name)
        if stop is None:
            return self._run()
        with pytest.raises(stop) as info:
            self._run()
        assert self.core is not None and self.core.state is ConnectionState.FAILED
        assert "secret" not in str(info.value) or "no AUTH secret" in str(info.value)
        return None

    def _run(self) -> None:
        for step in self.steps:
            if "send_hex" in step:
                self.on_send(step)
            elif "recv" in step or "raw_hex_without_frames" in step:
                self.on_recv(step)
            elif step.get("recv_closed"):
                self.on_closed()
            elif "recv_nothing_within_ms" in step:
                assert self.core is not None
                assert [e for e in self.core.events() if not isinstance(e, Heartbeat)] == []
            elif step.get("client_action"):
                self.on_action(step["client_action"])
        if self.t.name == "heartbeat_timeout":
            # The recorder played a dead client; ours answers every heartbeat with NOP.
            beats = sum(isinstance(e, Heartbeat) for e in self.events)
            assert beats >= 1
            self.expected += b"NOP\n" * beats
        assert self.emitted == self.expected

    def on_send(self, step: dict) -> None:
        plain = sent_plain(step)
        if self.core is None:
            self.core = ClientConnection(identify=self._identify(), auth_secret=self._auth_secret())
            self.core.initiate()
            if plain != MAGIC_V2:
                self.refused.append(("magic", None))
                self.core.data_to_send()
                self.emitted += plain
            else:
                self.collect()
        self.expected += plain
        if len(self.emitted) < len(self.expected):
            self.call(plain)
            self.collect()
        assert self.emitted[: len(self.expected)] == self.expected, (
            f"{self.t.name}/{self.conn}: client sent {bytes(self.emitted)!r}, recording "
            f"{bytes(self.expected)!r}"
        )

    def call(self, plain: bytes) -> None:
        """Make the API call that should produce ``plain``; fall back to send_raw."""
        core = self.core
        assert core is not None
        line, _, rest = plain.partition(b"\n")
        name, *params = line.decode("latin-1").split(" ")
        try:
            if self.t.name in UNEXPRESSIBLE and not self.diverged and self._is_quirk(name, params):
                raise LookupError
            if name == "PUB":
                core.pub(" ".join(params), rest[4:])
            elif name == "DPUB":
                core.dpub(params[0], int(params[1]), rest[4:])
            elif name == "MPUB":
                core.mpub(params[0], _mpub_bodies(rest[4:]))
            elif name == "SUB":
                core.sub(params[0], params[1])
            elif name == "RDY":
                core.rdy(int(params[0]))
            elif name == "FIN":
                core.fin(params[0].encode())
            elif name == "REQ":
                core.req(params[0].encode(), int(params[1]))
            elif name == "TOUCH":
                core.touch(params[0].encode())
            elif name == "NOP":
                core.nop()
            elif name == "CLS":
                core.cls()
            else:
                raise LookupError(name)
            return
        except (NSQValueError, NSQStateError) as exc:
            self.refused.append((name, exc))
        except (LookupError, ValueError, IndexError):
            self.refused.append((name, None))
        self.diverged = True
        core.send_raw(plain, name if name in _REPLIED else None)

    def _is_quirk(self, name: str, params: list[str]) -> bool:
        quirk = {
            "invalid_command": "FOO",
            "rdy_not_a_number": "RDY",
            "identify_twice": "IDENTIFY",
            "mpub_count_mismatch_fewer": "MPUB",
            "mpub_count_mismatch_more": "MPUB",
            "mpub_body_too_big": "MPUB",
            "pub_insufficient_params": "PUB",
            "sub_insufficient_params": "SUB",
        }.get(self.t.name)
        return quirk == name

    def on_recv(self, step: dict) -> None:
        core = self.core
        assert core is not None
        core.receive_data(
            recv_wire(step) if "recv" in step else bytes.fromhex(step["raw_hex_without_frames"])
        )
        events = core.events()
        self.events += events
        self.check_events(step.get("recv", []), events)
        self.collect()

    def check_events(self, frames: list[dict], events: list[object]) -> None:
        wanted = []
        for f in frames:
            data = bytes.fromhex(f["data_hex"])
            if f["frame_type"] == 0:
                wanted.append(("heartbeat",) if data == b"_heartbeat_" else ("reply", data))
            elif f["frame_type"] == 1:
                wanted.append(("error", data.decode()))
            else:
                m = f["message"]
                wanted.append(("message", m["id"], m["attempts"], bytes.fromhex(m["body_hex"])))
        got = []
        for e in events:
            if isinstance(e, Heartbeat):
                got.append(("heartbeat",))
            elif isinstance(e, Reply):
                got.append(("reply", e.data))
            elif isinstance(e, (CommandFailed, ServerWarning)):
                got.append(("error", str(e.error)))
                assert isinstance(e, CommandFailed) == e.error.fatal
            elif isinstance(e, Message):
                got.append(("message", e.id, e.attempts, e.body))
            elif isinstance(e, (StartTLS, ConnectionClosed)):
                continue
            else:  # pragma: no cover
                raise AssertionError(e)
        assert got == wanted, f"{self.t.name}/{self.conn}"

    def on_closed(self) -> None:
        core = self.core
        assert core is not None
        core.receive_data(b"")
        events = core.events()
        assert any(isinstance(e, ConnectionClosed) for e in events)
        assert core.state in (ConnectionState.CLOSED, ConnectionState.FAILED)

    def on_action(self, action: str) -> None:
        core = self.core
        assert core is not None
        if action == "tls_handshake":
            assert any(isinstance(e, StartTLS) for e in self.events)
            core.tls_established()
        elif action == "start_deflate":
            assert core.compression == "deflate"
            self.peer_codec = DeflateCodec()
        elif action == "start_snappy":
            assert core.compression == "snappy"
            self.peer_codec = SnappyCodec()
        elif action == "close":
            core.close()


def _mpub_bodies(body: bytes) -> list[bytes]:
    count = int.from_bytes(body[:4], "big")
    out, pos = [], 4
    for _ in range(count):
        size = int.from_bytes(body[pos : pos + 4], "big")
        out.append(body[pos + 4 : pos + 4 + size])
        pos += 4 + size
    if pos != len(body):
        raise ValueError("MPUB count does not match the body")
    return out


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_client_core_replays_recording(path) -> None:
    t = Transcript.load(path)
    fatal_errors = [
        e
        for e in t.observed["errors"]
        if e.split(" ")[0] not in ("E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED")
    ]
    for conn in t.connections:
        replay = Replay(t, conn)
        replay.run()
        failed = [e for e in replay.events if isinstance(e, CommandFailed)]
        if replay.core is not None and failed:
            assert replay.core.state is ConnectionState.FAILED
        if t.name in UNEXPRESSIBLE:
            continue
        for name, exc in replay.refused:
            # The client refuses only what nsqd would refuse too, or what it refuses on purpose.
            assert exc is not None, f"{t.name}: {name} not expressible through the API"
            assert fatal_errors or t.name in REFUSED_BUT_ACCEPTED, (t.name, name, exc)
    if t.observed.get("server_closed_connection"):
        assert fatal_errors or t.name == "heartbeat_timeout"


def test_every_quirk_listed_is_a_recording() -> None:
    names = {p.stem for p in FILES}
    assert set(UNEXPRESSIBLE) <= names
    assert set(REFUSED_BUT_ACCEPTED) <= names
