"""Fuzzing the server side (issue 11, item 6): whatever a client sends, in whatever pieces,
the broker answers only with nsqd's error codes and never fails with an unhandled
exception. Runs against the session's nsqd: the embedded broker (crashes are caught from
its loop's log), or a real nsqd with NSQD_ADDRESS (then only the answers are checked).

Example counts come from the hypothesis profile (tests/fuzz/conftest.py)."""

from __future__ import annotations

import json
import logging
import socket
import struct

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_nsq.protocol import ErrorFrame, FrameDecoder, NSQError, ResponseFrame

# Every code nsqd 1.3.0 sends (tests/conformance/transcripts/FACTS.md section 3).
NSQD_CODES = frozenset(
    {
        "E_INVALID",
        "E_BAD_BODY",
        "E_BAD_TOPIC",
        "E_BAD_CHANNEL",
        "E_BAD_MESSAGE",
        "E_PUB_FAILED",
        "E_MPUB_FAILED",
        "E_DPUB_FAILED",
        "E_SUB_FAILED",
        "E_IDENTIFY_FAILED",
        "E_AUTH_FIRST",
        "E_AUTH_FAILED",
        "E_UNAUTHORIZED",
        "E_AUTH_DISABLED",
        "E_AUTH_ERROR",
        "E_BAD_PROTOCOL",
        "E_FIN_FAILED",
        "E_REQ_FAILED",
        "E_TOUCH_FAILED",
    }
)

NAMES = st.one_of(
    st.sampled_from(["t", "fuzz_topic", "c", "x#ephemeral", "", "a" * 65, "bad name"]),
    st.text(max_size=8),
).map(lambda s: s.encode("utf-8", "surrogatepass"))
NUMBERS = st.one_of(st.integers(-5, 5000), st.just(2**40)).map(lambda n: str(n).encode())
IDS = st.one_of(st.binary(min_size=16, max_size=16), st.binary(max_size=20))
BODIES = st.binary(max_size=40)


def u32(n: int) -> bytes:
    return struct.pack(">I", n % 2**32)


def with_size(body: bytes, size: int | None) -> bytes:
    return u32(len(body) if size is None else size) + body


SIZES = st.one_of(st.none(), st.none(), st.integers(0, 2**32 - 1))
IDENTIFY_BODIES = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "feature_negotiation": st.booleans(),
            "heartbeat_interval": st.integers(-2, 70_000),
            "output_buffer_size": st.integers(-2, 70_000),
            "output_buffer_timeout": st.integers(-2, 40_000),
            "msg_timeout": st.integers(-1, 10**6),
            "sample_rate": st.integers(-1, 101),
            "deflate": st.booleans(),
            "deflate_level": st.integers(-1, 12),
            "snappy": st.booleans(),
            "tls_v1": st.booleans(),
            "client_id": st.one_of(st.text(max_size=5), st.integers()),
        },
    ).map(lambda d: json.dumps(d).encode()),
    st.sampled_from([b"[" * 10, b"[" * 5000, b"{" * 100_000, b"null", b"[]", b'"x"']),
    BODIES,
)


def mpub_body(bodies: list[bytes], count: int | None) -> bytes:
    return u32(len(bodies) if count is None else count) + b"".join(u32(len(b)) + b for b in bodies)


COMMANDS = st.one_of(
    st.builds(lambda b, s: b"IDENTIFY\n" + with_size(b, s), IDENTIFY_BODIES, SIZES),
    st.builds(lambda b, s: b"AUTH\n" + with_size(b, s), BODIES, SIZES),
    st.builds(lambda t, b, s: b"PUB " + t + b"\n" + with_size(b, s), NAMES, BODIES, SIZES),
    st.builds(
        lambda t, d, b, s: b"DPUB " + t + b" " + d + b"\n" + with_size(b, s),
        NAMES,
        NUMBERS,
        BODIES,
        SIZES,
    ),
    st.builds(
        lambda t, bs, c, s: b"MPUB " + t + b"\n" + with_size(mpub_body(bs, c), s),
        NAMES,
        st.lists(BODIES, max_size=4),
        st.one_of(st.none(), st.integers(0, 10)),
        SIZES,
    ),
    st.builds(lambda t, c: b"SUB " + t + b" " + c + b"\n", NAMES, NAMES),
    st.builds(lambda n: b"RDY " + n + b"\n", NUMBERS),
    st.builds(lambda i: b"FIN " + i + b"\n", IDS),
    st.builds(lambda i, n: b"REQ " + i + b" " + n + b"\n", IDS, NUMBERS),
    st.builds(lambda i: b"TOUCH " + i + b"\n", IDS),
    st.sampled_from([b"NOP\n", b"CLS\n", b"RDY\n", b"PUB\n", b"nop\n", b"\n", b"FIN\n"]),
    st.binary(max_size=30).map(lambda b: b + b"\n"),  # any line
    st.binary(max_size=30),  # any bytes
)
STREAMS = st.tuples(
    st.one_of(st.just(b"  V2"), st.just(b"  V2"), st.just(b"  V2"), st.binary(max_size=4)),
    st.lists(COMMANDS, max_size=8),
).map(lambda t: t[0] + b"".join(t[1]))


class LoopErrors(logging.Handler):
    """Collects what the broker's event loop logs: unhandled errors, and the warnings of
    writes to a connection already gone (``socket.send() raised exception.``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def converse(host: str, port: int, pieces: list[bytes]) -> bytes:
    """Send ``pieces``, end our side, read until the server closes (or goes quiet)."""
    with socket.create_connection((host, port), timeout=5) as sock:
        try:
            for piece in pieces:
                sock.sendall(piece)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server closed first: read what it said
        sock.settimeout(2)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except (OSError, TimeoutError):
            pass
        return data


def plain_frames(data: bytes) -> list:
    """The frames before the stream turns compressed or TLS (an accepted upgrade)."""
    decoder = FrameDecoder()
    decoder.feed(data)
    frames = []
    try:
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame)
            if isinstance(frame, ResponseFrame) and frame.data.startswith(b"{"):
                info = json.loads(frame.data)
                if info.get("deflate") or info.get("snappy") or info.get("tls_v1"):
                    break
    except NSQError as exc:
        raise AssertionError(f"the server sent something that is not NSQ: {exc}") from None
    return frames


@given(STREAMS, st.lists(st.integers(0, 10**4), max_size=4))
def test_broker_answers_any_client_input_with_nsqd_errors_only(nsqd, stream, cuts) -> None:
    points = sorted({c % (len(stream) + 1) for c in cuts})
    pieces = [
        stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True) if b > a
    ]
    handler = LoopErrors()
    loop_log = logging.getLogger("asyncio")
    disabled, loop_log.disabled = loop_log.disabled, False  # Airflow's logging config
    loop_log.addHandler(handler)  # disables loggers configured before it
    try:
        data = converse(nsqd.host, nsqd.tcp_port, pieces)
    finally:
        loop_log.removeHandler(handler)
        loop_log.disabled = disabled
    assert [r.getMessage() for r in handler.records] == []
    for frame in plain_frames(data):
        if isinstance(frame, ErrorFrame):
            assert frame.error().code in NSQD_CODES, frame
