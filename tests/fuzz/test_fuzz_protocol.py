"""Fuzzing the client side of the protocol (issue 11): whatever a server sends, in whatever
pieces, the frame decoder and the client core raise nothing but NSQError; encoders refuse
bad input with NSQValueError only; encode/decode and compress/decompress round-trip.

Example counts come from the hypothesis profile (tests/fuzz/conftest.py)."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_nsq.client import encode_body
from airflow_provider_nsq.protocol import (
    ClientConnection,
    ConnectionClosed,
    ConnectionState,
    ErrorFrame,
    FrameDecoder,
    Message,
    NSQError,
    NSQValueError,
    ResponseFrame,
    StartTLS,
    encode_dpub,
    encode_error,
    encode_frame,
    encode_identify,
    encode_message,
    encode_mpub,
    encode_pub,
    encode_rdy,
    encode_req,
    encode_response,
    encode_sub,
    split_mpub,
)
from airflow_provider_nsq.protocol.compression import DeflateCodec, SnappyCodec

# -- what a server might send -----------------------------------------------------------------

MESSAGE_IDS = st.binary(min_size=16, max_size=16)
ERROR_CODES = st.sampled_from(
    ["E_INVALID", "E_BAD_BODY", "E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED", "E_X", ""]
)
IDENTIFY_INFO = st.fixed_dictionaries(
    {},
    optional={
        "max_rdy_count": st.one_of(st.integers(-5, 10_000), st.text(max_size=3), st.none()),
        "version": st.text(max_size=8),
        "msg_timeout": st.one_of(st.integers(-1, 10**7), st.floats(allow_nan=True)),
        "tls_v1": st.booleans(),
        "deflate": st.booleans(),
        "deflate_level": st.integers(-3, 12),
        "snappy": st.booleans(),
        "auth_required": st.booleans(),
    },
)
JSON_DOCS = st.one_of(
    IDENTIFY_INFO.map(lambda d: json.dumps(d).encode()),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 200_000).map(lambda n: b"[" * n),
    st.sampled_from([b"{", b"[]", b"null", b'{"identity": 1}', b"\xff\xfe", b'"x"']),
)
FRAMES = st.one_of(
    st.sampled_from([b"OK", b"_heartbeat_", b"CLOSE_WAIT"]).map(encode_response),
    JSON_DOCS.map(encode_response),
    st.binary(max_size=48).map(encode_response),
    st.builds(lambda c, d: encode_error(c, d), ERROR_CODES, st.binary(max_size=40)),
    st.builds(
        encode_message,
        st.integers(-(2**63), 2**63 - 1),
        st.integers(0, 65535),
        MESSAGE_IDS,
        st.binary(max_size=48),
    ),
    st.builds(encode_frame, st.integers(0, 2**32 - 1), st.binary(max_size=40)),
    st.integers(0, 2**32 - 1).map(lambda n: struct.pack(">II", n, 0)),  # any size prefix
    st.binary(max_size=24),  # garbage
)
STREAMS = st.lists(FRAMES, max_size=12).map(b"".join)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in [*points, len(data)]:
        pieces.append(data[last:p])
        last = p
    return [p for p in pieces if p]


# -- the frame decoder ---------------------------------------------------------------------------


def decode(data: list[bytes], max_frame_size: int, how: str) -> tuple[list[Any], str | None]:
    decoder = FrameDecoder(max_frame_size)
    frames: list[Any] = []
    try:
        for piece in data:
            decoder.feed(piece)
            if how == "next":
                while (frame := decoder.next_frame()) is not None:
                    frames.append(frame)
            elif how == "split":
                messages, others = decoder.split_frames()
                frames += others + messages  # compared as multisets below
            else:
                frames += decoder.frames()
    except NSQError as exc:
        return frames, type(exc).__name__
    return frames, None


def key(frame: Any) -> tuple:
    if isinstance(frame, Message):
        return ("m", frame.timestamp, frame.attempts, frame.raw_id, frame.body)
    return (type(frame).__name__, frame.data)


@given(
    STREAMS,
    st.lists(st.integers(0, 10**6), max_size=8),
    st.integers(4, 4096),
    st.sampled_from(["next", "frames", "split"]),
)
def test_frame_decoder_raises_only_nsq_errors_whatever_the_pieces(data, cuts, limit, how) -> None:
    whole, whole_error = decode([data], limit, "frames")
    pieces, pieces_error = decode(split(data, cuts), limit, how)
    assert pieces_error == whole_error
    if whole_error is None:
        assert sorted(map(key, pieces)) == sorted(map(key, whole))
    # else: frames decoded in the same call as a bad header may be dropped with it (the
    # connection is failed either way); the error is what matters.
    for frame in whole:
        assert isinstance(frame, (ResponseFrame, ErrorFrame, Message))


FRAME_VALUES = st.one_of(
    st.binary(max_size=100).map(ResponseFrame),
    st.binary(max_size=100).map(ErrorFrame),
    st.builds(
        Message,
        st.integers(-(2**63), 2**63 - 1),
        st.integers(0, 65535),
        MESSAGE_IDS,
        st.binary(max_size=200),
    ),
)


def encode_value(frame: Any) -> bytes:
    if isinstance(frame, Message):
        return encode_message(frame.timestamp, frame.attempts, frame.raw_id, frame.body)
    return encode_frame(0 if isinstance(frame, ResponseFrame) else 1, frame.data)


@given(st.lists(FRAME_VALUES, max_size=20), st.lists(st.integers(0, 10**5), max_size=10))
def test_frames_round_trip_through_the_decoder(frames, cuts) -> None:
    wire = b"".join(map(encode_value, frames))
    got, error = decode(split(wire, cuts), 1 << 20, "next")
    assert error is None
    assert got == frames


# -- the client core ---------------------------------------------------------------------------

CONFIGS = st.sampled_from(
    [
        (None, None),
        ({}, None),
        ({"feature_negotiation": True}, None),
        ({"feature_negotiation": True}, b"secret"),
        ({"feature_negotiation": True, "tls_v1": True}, None),
        ({"feature_negotiation": True, "deflate": True, "deflate_level": 6}, None),
        ({"feature_negotiation": True, "snappy": True}, b"s"),
        ({"feature_negotiation": True, "heartbeat_interval": -1}, None),
    ]
)
ACTIONS = st.lists(
    st.sampled_from(["pub", "mpub", "dpub", "sub", "rdy", "fin", "req", "touch", "cls", "ping"]),
    max_size=6,
)


def act(core: ClientConnection, action: str) -> None:
    if action == "pub":
        core.pub("t", b"x")
    elif action == "mpub":
        core.mpub_split("t", [b"a", b"b"])
    elif action == "dpub":
        core.dpub("t", 10, b"x")
    elif action == "sub":
        core.sub("t", "c")
    elif action == "rdy":
        core.rdy(5)
    elif action in ("fin", "req", "touch"):
        getattr(core, action)(b"0123456789abcdef")
    elif action == "cls":
        core.cls()
    else:
        core.ping()


def drive(core: ClientConnection, pieces: list[bytes], actions: list[str], fast: bool) -> None:
    """Feed ``pieces`` as a driver would; only NSQError may come out, and a core that
    raised from events() says FAILED."""
    closed_events = 0
    for i, piece in enumerate([*pieces, b""]):  # b"": the server closes at the end
        if i < len(actions):
            try:
                act(core, actions[i])
            except NSQError:
                pass
        core.receive_data(piece)
        try:
            if fast:
                _, events = core.messages_and_events()
            else:
                events = core.events()
        except NSQError:
            assert core.state is ConnectionState.FAILED
            assert core.error is not None
            continue
        for event in events:
            if isinstance(event, StartTLS):
                core.tls_established()  # as if the driver wrapped the socket
            closed_events += isinstance(event, ConnectionClosed)
        assert isinstance(core.data_to_send(), bytes)
    assert closed_events <= 1


@given(CONFIGS, STREAMS, st.lists(st.integers(0, 10**6), max_size=8), ACTIONS, st.booleans())
def test_client_core_raises_only_nsq_errors_whatever_the_server_sends(
    config, stream, cuts, actions, fast
) -> None:
    identify, secret = config
    core = ClientConnection(identify=identify, auth_secret=secret, max_msg_size=4096)
    core.initiate()
    core.data_to_send()
    drive(core, split(stream, cuts), actions, fast)


@given(
    st.sampled_from(["deflate", "snappy"]),
    st.booleans(),
    st.lists(FRAMES, max_size=10),
    st.binary(max_size=30),
    st.lists(st.integers(0, 10**6), max_size=8),
    ACTIONS,
    st.booleans(),
)
def test_client_core_raises_only_nsq_errors_on_compressed_streams(
    kind, auth, frames, garbage, cuts, actions, fast
) -> None:
    """A handshake that negotiates compression, then compressed frames (and maybe bytes
    that are not valid compressed data at all)."""
    core = ClientConnection(
        identify={"feature_negotiation": True, kind: True}, auth_secret=b"s" if auth else None
    )
    core.initiate()
    core.data_to_send()
    info = {"max_rdy_count": 2500, kind: True, "auth_required": auth}
    codec = DeflateCodec() if kind == "deflate" else SnappyCodec()
    stream = encode_response(json.dumps(info).encode()) + codec.compress(
        encode_response(b"OK") + b"".join(frames)
    )
    drive(core, split(stream + garbage, cuts), actions, fast)


# -- compression ------------------------------------------------------------------------------------


@given(
    st.sampled_from(["deflate", "snappy"]),
    st.lists(st.binary(max_size=3000), max_size=10),
    st.lists(st.integers(0, 10**5), max_size=10),
    st.integers(1, 70_000),
)
def test_compression_round_trips_through_bounded_reads(kind, chunks, cuts, max_length) -> None:
    new = DeflateCodec if kind == "deflate" else SnappyCodec
    sender, receiver = new(), new()
    wire = b"".join(sender.compress(c) for c in chunks)
    out = bytearray()
    for piece in split(wire, cuts):
        receiver.feed(piece)
        while receiver.pending:
            part = receiver.read(max_length)
            if not part:
                break
            assert len(part) <= max_length + 65536
            out += part
    assert out == b"".join(chunks)


@given(st.sampled_from(["deflate", "snappy"]), st.binary(max_size=2000), st.integers(1, 10**5))
def test_decompressing_garbage_raises_only_nsq_errors(kind, data, max_length) -> None:
    codec = DeflateCodec() if kind == "deflate" else SnappyCodec()
    codec.feed(data)
    try:
        while codec.pending and codec.read(max_length):
            pass
    except NSQError:
        pass


# -- encoders and bodies -------------------------------------------------------------------------------

ANY = st.one_of(
    st.text(max_size=70),
    st.binary(max_size=70),
    st.integers(),
    st.none(),
    st.floats(),
    st.lists(st.binary(max_size=5), max_size=3),
)


@given(ANY, ANY, st.one_of(st.integers(-5, 10**8), ANY))
def test_encoders_refuse_bad_input_with_value_errors_only(topic, body, number) -> None:
    for encode in (
        lambda: encode_pub(topic, body),
        lambda: encode_dpub(topic, number, body),
        lambda: encode_mpub(topic, body),
        lambda: split_mpub(body),
        lambda: encode_sub(topic, body),
        lambda: encode_rdy(number),
        lambda: encode_req(body, number),
    ):
        try:
            assert isinstance(encode(), (bytes, list))
        except NSQValueError:
            pass


@given(st.dictionaries(st.text(max_size=10), st.one_of(st.integers(), st.text(), st.booleans())))
def test_identify_bodies_are_the_json_they_were_given(fields) -> None:
    wire = encode_identify(fields)
    assert wire.startswith(b"IDENTIFY\n")
    (size,) = struct.unpack(">I", wire[9:13])
    assert json.loads(wire[13:]) == fields and size == len(wire) - 13


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def strict(text: bytes) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(map(has_non_finite, value))
    if isinstance(value, dict):
        return any(map(has_non_finite, value.values()))
    return False


@given(st.one_of(JSONISH, st.text(), st.binary()))
def test_message_bodies_are_strict_utf8_json_or_a_value_error(value) -> None:
    try:
        body = encode_body(value)
    except NSQValueError as exc:
        assert str(exc).startswith("message ")
        return
    assert isinstance(body, bytes)
    if isinstance(value, (dict, list)):
        assert not has_non_finite(value)
        assert strict(body) == json.loads(json.dumps(value))
    elif isinstance(value, str):
        assert body.decode("utf-8") == value
