"""The ``"  V1"`` codec, both roles, against the recorded nsqlookupd conversations.

Server role: every ``v1_`` recording's client bytes, fed whole and one byte at a time,
give the events whose answers are the recorded replies (an ``E_...`` text for each
error, ``OK`` for PING/REGISTER/UNREGISTER, the JSON for IDENTIFY) and close where
nsqlookupd closed. Client role: our encoders produce the bytes real nsqd sent in the
``nsqd_`` recordings, and the reply reader splits what nsqlookupd sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from airflow_provider_nsq.protocol.errors import (
    NSQFrameTooLargeError,
    NSQProtocolError,
    NSQServerError,
)
from airflow_provider_nsq.testing.wire.registration import (
    OK_REPLY,
    Event,
    Identify,
    LookupdServerConnection,
    Ping,
    ProtocolError,
    Register,
    ReplyReader,
    Unregister,
    encode_identify,
    encode_identify_reply,
    encode_register,
    encode_reply,
    encode_unregister,
    go_trim_space,
    parse_identify_reply,
)
from tests.conformance.lookupd_transcript import DEFAULT_CONN, LookupdTranscript, load

V1 = load("v1")
NSQD = load("nsqd")


def _chunks(data: bytes, mode: str) -> Iterator[bytes]:
    if mode == "whole":
        yield data
    else:
        yield from (data[i : i + 1] for i in range(len(data)))


def _answer(event: Event) -> bytes | None:
    """What a server writes for the event (None: the IDENTIFY JSON, checked apart)."""
    if isinstance(event, ProtocolError):
        return event.payload
    if isinstance(event, Identify):
        return None
    return b"OK"


@pytest.mark.parametrize("mode", ["whole", "bytewise"])
@pytest.mark.parametrize("t", V1, ids=lambda t: t.name)
def test_server_core_answers_as_recorded(t: LookupdTranscript, mode: str) -> None:
    for conn in {s.get("conn", DEFAULT_CONN) for s in t.steps if "send_hex" in s}:
        core = LookupdServerConnection()
        answers: list[bytes | None] = []
        expected: list[bytes | None] = []
        closed = False
        for step in t.steps:
            if step.get("conn", DEFAULT_CONN) != conn:
                continue
            if "send_hex" in step:
                for chunk in _chunks(bytes.fromhex(step["send_hex"]), mode):
                    core.receive_data(chunk)
                    while (event := core.next_event()) is not None:
                        if isinstance(event, Identify):
                            core_peer = event.peer
                            assert core_peer.tcp_port and core_peer.version
                        answers.append(_answer(event))
            elif step.get("client_action") == "shutdown_write":
                core.receive_eof()
                while (event := core.next_event()) is not None:
                    answers.append(_answer(event))
            elif "recv" in step:
                expected += [
                    None if "json" in r else bytes.fromhex(r["data_hex"]) for r in step["recv"]
                ]
            elif step.get("recv_closed"):
                closed = True
        if t.name == "v1_identify_negative_size_crash":
            # Deviation (docs/testing.md): an error where nsqlookupd 1.3.0 panics.
            expected = [b"E_BAD_BODY IDENTIFY invalid body size -1"]
        assert answers == expected
        assert core.closed == closed


def test_trim_space_and_split_as_go() -> None:
    assert go_trim_space(b"  PING  \r") == b"PING"
    assert go_trim_space("\u00a0PING\u3000".encode()) == b"PING"
    assert go_trim_space(b"\x85PING") == b"\x85PING"  # an invalid byte is not a space
    core = LookupdServerConnection()
    core.receive_data(b"  V1  PING  \r\nFOO\n")
    assert core.next_event() == Ping()
    assert core.next_event() == ProtocolError(b"E_INVALID invalid command FOO")
    assert core.closed and core.next_event() is None


def test_registration_params_in_nsqlookupd_order() -> None:
    def events(data: bytes) -> list[Event]:
        core = LookupdServerConnection()
        core.receive_data(b"  V1" + encode_identify(_PEER) + data)
        out = []
        while (event := core.next_event()) is not None:
            out.append(event)
        return out[1:]

    assert events(b"REGISTER t c extra\n") == [Register("t", "c")]
    assert events(b"UNREGISTER t\n") == [Unregister("t", None)]
    # A double space makes an empty parameter: here an empty channel, i.e. the topic.
    assert events(b"REGISTER t  c\n") == [Register("t", None)]
    assert events(b"REGISTER t bad!c\n") == [
        ProtocolError(b"E_BAD_CHANNEL REGISTER channel name 'bad!c' is not valid")
    ]
    assert events(b"UNREGISTER\n") == [
        ProtocolError(b"E_INVALID UNREGISTER insufficient number of params")
    ]


def test_identify_twice_is_refused_before_the_body_is_read() -> None:
    core = LookupdServerConnection()
    core.receive_data(b"  V1" + encode_identify(_PEER) + b"IDENTIFY\n")
    assert isinstance(core.next_event(), Identify)
    assert core.next_event() == ProtocolError(b"E_INVALID cannot IDENTIFY again")


@pytest.mark.parametrize(
    ("size", "payload"),
    [
        (b"\xff\xff\xff\xff", b"E_BAD_BODY IDENTIFY invalid body size -1"),
        (b"\x80\x00\x00\x00", b"E_BAD_BODY IDENTIFY invalid body size -2147483648"),
        (b"\x7f\xff\xff\xff", b"E_BAD_BODY IDENTIFY invalid body size 2147483647"),
    ],
)
def test_identify_sizes_nsqlookupd_crashes_on_or_allocates_are_errors(
    size: bytes, payload: bytes
) -> None:
    core = LookupdServerConnection()
    core.receive_data(b"  V1IDENTIFY\n" + size)
    assert core.next_event() == ProtocolError(payload)
    assert core.closed


def test_identify_body_decoded_as_go_decodes_it() -> None:
    def identify(body: bytes) -> Event | None:
        core = LookupdServerConnection()
        core.receive_data(b"  V1IDENTIFY\n" + len(body).to_bytes(4, "big") + body)
        return core.next_event()

    full = dict(_PEER)
    event = identify(json.dumps({k.upper(): v for k, v in full.items()}).encode())
    assert isinstance(event, Identify) and event.peer.tcp_port == 4150  # keys fold case
    bad = ProtocolError(b"E_BAD_BODY IDENTIFY failed to decode JSON body")
    for body in (
        b"",
        b"[]",
        b'{"tcp_port": 4150.0}',
        b'{"tcp_port": 1e3}',
        b'{"tcp_port": NaN}',
        b'{"tcp_port": "4150"}',
        b'{"tcp_port": "x", "tcp_port": 4150}',  # Go decodes both: the first is an error
        b"{} trailing",
        b"[" * 100_000,
    ):
        assert identify(body) == bad, body
    missing = ProtocolError(b"E_BAD_BODY IDENTIFY missing fields")
    assert identify(b"null") == missing
    assert identify(json.dumps({**full, "tcp_port": 0}).encode()) == missing
    no_hostname = {k: v for k, v in full.items() if k != "hostname"}
    event = identify(json.dumps(no_hostname).encode())
    assert isinstance(event, Identify) and event.peer.hostname == ""


def test_overlong_line_is_an_error_not_unbounded_memory() -> None:
    core = LookupdServerConnection(max_line_length=100)
    core.receive_data(b"  V1" + b"x" * 101)
    event = core.next_event()
    assert isinstance(event, ProtocolError) and event.code == "E_INVALID"


# -- client role -----------------------------------------------------------------------

_PEER = {
    "broadcast_address": "127.0.0.1",
    "hostname": "raw-client",
    "http_port": 4151,
    "tcp_port": 4150,
    "version": "1.3.0",
}


def _nsqd_sends() -> list[dict]:
    return [s for t in NSQD for s in t.steps if s.get("from") == "nsqd"]


def test_identify_bytes_equal_real_nsqd() -> None:
    for step in _nsqd_sends():
        if "body_json" in step:
            # The recorded dict is in nsqd's order already; ours must sort it the same.
            shuffled = dict(reversed(list(step["body_json"].items())))
            assert encode_identify(shuffled) == bytes.fromhex(step["send_hex"])


def test_register_and_unregister_bytes_equal_real_nsqd() -> None:
    seen = 0
    for step in _nsqd_sends():
        text = bytes.fromhex(step["send_hex"])
        command, *names = text.decode().split()
        if command in ("REGISTER", "UNREGISTER"):
            encode = encode_register if command == "REGISTER" else encode_unregister
            assert encode(*names) == text
            seen += 1
    assert seen >= 30


def test_reply_reader_splits_recorded_replies_whole_and_bytewise() -> None:
    for t in NSQD:
        replies = [
            bytes.fromhex(r["data_hex"])
            for s in t.steps
            if s.get("from") == "nsqlookupd"
            for r in s["recv"]
        ]
        wire = b"".join(encode_reply(r) for r in replies)
        for mode in ("whole", "bytewise"):
            reader, got = ReplyReader(), []
            for chunk in _chunks(wire, mode):
                reader.feed(chunk)
                while (reply := reader.next_reply()) is not None:
                    got.append(reply)
            assert got == replies


def test_identify_reply_round_trip_and_errors() -> None:
    data = encode_identify_reply(
        broadcast_address="127.0.0.1",
        hostname="vm",
        tcp_port=24300,
        http_port=24301,
        version="1.3.0",
    )
    recorded = NSQD[0].steps
    wire = next(
        bytes.fromhex(s["recv"][0]["data_hex"]) for s in recorded if s.get("from") == "nsqlookupd"
    )
    assert data == encode_reply(wire)
    info = parse_identify_reply(wire)
    assert (info.broadcast_address, info.http_port, info.tcp_port) == ("127.0.0.1", 24301, 24300)
    with pytest.raises(NSQServerError) as exc:
        parse_identify_reply(b"E_INVALID cannot IDENTIFY again")
    assert exc.value.code == "E_INVALID"
    with pytest.raises(NSQProtocolError):
        parse_identify_reply(b"not json")
    assert OK_REPLY == b"\x00\x00\x00\x02OK"


def test_reply_reader_refuses_bad_sizes() -> None:
    reader = ReplyReader(max_size=10)
    reader.feed(b"\x00\x00\x00\x0b")
    with pytest.raises(NSQFrameTooLargeError):
        reader.next_reply()
    reader = ReplyReader()
    reader.feed(b"\xff\xff\xff\xff")
    with pytest.raises(NSQProtocolError):
        reader.next_reply()


def test_encoders_refuse_invalid_names() -> None:
    with pytest.raises(ValueError):
        encode_register("bad!topic")
    with pytest.raises(ValueError):
        encode_unregister("t", "bad channel")
