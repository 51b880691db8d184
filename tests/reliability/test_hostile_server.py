"""A hostile or broken server (issue 11, items 2 and 5): deeply nested JSON in handshake
replies and decompression bombs end in NSQProtocolError, with memory bounded by about one
frame, in the core and in both drivers."""

from __future__ import annotations

import json
import struct
import tracemalloc
import zlib
from collections.abc import Callable

import pytest
import snappy

from airflow_provider_nsq.client import ClientConfig
from airflow_provider_nsq.protocol import (
    ClientConnection,
    ConnectionState,
    Heartbeat,
    Message,
    NSQFrameTooLargeError,
    NSQProtocolError,
    Reply,
    encode_message,
    encode_response,
)
from airflow_provider_nsq.protocol.compression import DeflateCodec, SnappyCodec
from tests.support.drivers import DRIVERS, make_driver
from tests.support.scripted_nsqd import IDENTIFY_JSON, Peer, ScriptedNSQD

DEEP = b"[" * 100_000
MIB = 1 << 20


# -- deeply nested JSON (item 2) ------------------------------------------------------------


def test_deep_identify_reply_is_a_protocol_error_in_the_core() -> None:
    core = ClientConnection(identify={"feature_negotiation": True})
    core.initiate()
    core.receive_data(encode_response(DEEP))
    with pytest.raises(NSQProtocolError, match="nested too deeply"):
        core.events()
    assert core.state is ConnectionState.FAILED


def test_deep_auth_reply_is_a_protocol_error_in_the_core() -> None:
    core = ClientConnection(identify={"feature_negotiation": True}, auth_secret=b"s")
    core.initiate()
    core.receive_data(
        encode_response(json.dumps({**IDENTIFY_JSON, "auth_required": True}).encode())
    )
    core.events()
    core.receive_data(encode_response(DEEP))
    with pytest.raises(NSQProtocolError, match="AUTH response"):
        core.events()
    assert core.state is ConnectionState.FAILED


def deep_identify(peer: Peer) -> None:
    peer.expect_magic()
    peer.read_command()
    peer.send_response(DEEP)
    peer.read_command()  # wait for the client to give up


def deep_auth(peer: Peer) -> None:
    peer.handshake(auth_required=True)
    assert peer.read_command()[0] == "AUTH"
    peer.send_response(DEEP)
    peer.read_command()


@pytest.mark.parametrize("kind", DRIVERS)
@pytest.mark.parametrize("script", [deep_identify, deep_auth], ids=["identify", "auth"])
def test_deep_handshake_reply_fails_connect_with_a_protocol_error(
    kind: str, script: Callable[[Peer], None]
) -> None:
    with ScriptedNSQD(script) as server:
        config = ClientConfig(port=server.port, auth_secret="s", connect_timeout=5)
        conn = make_driver(kind, config)
        try:
            with pytest.raises(NSQProtocolError, match="nested too deeply"):
                conn.connect()
            assert not conn.connected
        finally:
            conn.close()


# -- decompression bombs (item 5) ----------------------------------------------------------


def frame_header(size: int, frame_type: int = 0) -> bytes:
    return struct.pack(">II", size, frame_type)


def deflated(data: bytes | list[bytes]) -> bytes:
    parts = data if isinstance(data, list) else [data]
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return b"".join(c.compress(p) for p in parts) + c.flush(zlib.Z_SYNC_FLUSH)


def snappied(data: bytes | list[bytes]) -> bytes:
    parts = data if isinstance(data, list) else [data]
    c = snappy.StreamCompressor()
    return b"".join(bytes(c.add_chunk(p)) for p in parts)


COMPRESS = {"deflate": deflated, "snappy": snappied}


def compressed_core(kind: str) -> ClientConnection:
    """A core whose handshake negotiated ``kind``; the next bytes fed are compressed."""
    core = ClientConnection(identify={"feature_negotiation": True, kind: True})
    core.initiate()
    core.data_to_send()
    core.receive_data(encode_response(json.dumps({**IDENTIFY_JSON, kind: True}).encode()))
    core.events()
    return core


def zeros(n: int) -> list[bytes]:
    return [bytes(MIB)] * (n // MIB)


def peak_while(fn: Callable[[], object]) -> tuple[int, object]:
    tracemalloc.start()
    try:
        result: object = fn()
    except Exception as exc:
        result = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, result


@pytest.mark.parametrize("kind", ["deflate", "snappy"])
def test_a_frame_bigger_than_the_limit_is_refused_before_it_is_inflated(kind: str) -> None:
    core = compressed_core(kind)
    bomb = COMPRESS[kind]([encode_response(b"OK"), frame_header(200 * MIB), *zeros(200 * MIB)])
    assert len(bomb) < 10 * MIB  # 200 MiB inflated

    def run() -> object:
        core.receive_data(bomb)
        return core.events()

    peak, result = peak_while(run)
    assert isinstance(result, NSQFrameTooLargeError), result
    assert peak < len(bomb) + 2 * MIB  # the input plus about one step, not 200 MiB
    assert core.state is ConnectionState.FAILED


@pytest.mark.parametrize("kind", ["deflate", "snappy"])
def test_a_flood_of_valid_heartbeats_is_answered_once(kind: str) -> None:
    core = compressed_core(kind)
    beat = encode_response(b"_heartbeat_")
    flood = beat * (MIB // len(beat))
    bomb = COMPRESS[kind]([encode_response(b"OK"), flood])  # 70,000 heartbeats

    def run() -> object:
        core.receive_data(bomb)
        return core.events()

    peak, events = peak_while(run)
    assert isinstance(events, list), events
    assert [type(e) for e in events] == [Reply, Heartbeat]
    answer = DeflateCodec() if kind == "deflate" else SnappyCodec()
    assert answer.decompress(core.data_to_send()) == b"NOP\n"  # one NOP for them all
    assert peak < len(bomb) + 3 * MIB
    assert core.state is ConnectionState.READY


@pytest.mark.parametrize("kind", ["deflate", "snappy"])
def test_a_full_size_message_still_inflates_across_many_steps(kind: str) -> None:
    core = compressed_core(kind)
    core.receive_data(COMPRESS[kind](encode_response(b"OK")))
    core.events()
    core.sub("t", "c")
    core.receive_data(COMPRESS[kind](encode_response(b"OK")))
    core.events()
    body = bytes(range(256)) * (MIB // 256)
    data = COMPRESS[kind](encode_message(1, 1, b"0123456789abcdef", body) * 3)
    got: list[Message] = []
    for i in range(0, len(data), 1000):  # arriving in small pieces
        core.receive_data(data[i : i + 1000])
        messages, events = core.messages_and_events()
        got += messages
        assert events == []
    assert [m.body == body for m in got] == [True] * 3


def test_a_snappy_chunk_over_the_format_limit_is_refused_unread() -> None:
    core = compressed_core("snappy")
    core.receive_data(b"\xff\x06\x00\x00sNaPpY" + b"\x00" + (1 << 23).to_bytes(3, "little"))
    with pytest.raises(NSQProtocolError, match="over the framing format's limit"):
        core.events()


@pytest.mark.parametrize("kind", ["deflate", "snappy"])
def test_codecs_round_trip_through_bounded_reads(kind: str) -> None:
    send = DeflateCodec() if kind == "deflate" else SnappyCodec()
    receive = DeflateCodec() if kind == "deflate" else SnappyCodec()
    data = b"".join(b"%d," % i for i in range(300_000))
    receive.feed(send.compress(data))
    out = bytearray()
    while receive.pending:
        part = receive.read(4096)
        assert len(part) <= 4096 + 65536
        if not part:
            break
        out += part
    assert out == data


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_deflate_bomb_from_the_server_fails_both_drivers_cleanly(driver: str) -> None:
    bomb = [frame_header(100 * MIB, 2), *zeros(100 * MIB)]

    def script(peer: Peer) -> None:
        peer.handshake(deflate=True)
        codec = DeflateCodec()
        peer.send(codec.compress(encode_response(b"OK")))
        peer.sock.recv(1)  # the client's first compressed command
        try:
            for part in bomb:
                peer.send(codec.compress(part))
            peer.sock.recv(1)
        except OSError:
            pass  # the client hung up: what it should do

    with ScriptedNSQD(script) as server:
        conn = make_driver(driver, ClientConfig(port=server.port, compression="deflate"))
        try:
            conn.connect()
            with pytest.raises(NSQFrameTooLargeError):
                conn.publish("t", b"x")
            assert not conn.connected
        finally:
            conn.close()


@pytest.mark.parametrize(
    ("stream", "says"),
    [
        (b"\x01\x06\x00\x00" + b"\x00" * 6, "does not start with the stream identifier"),
        (b"\xff\x06\x00\x00sNaPpX", "bad stream identifier"),
        (b"\xff\x06\x00\x00sNaPpY\x02\x01\x00\x00x", "reserved chunk type 0x02"),
    ],
    ids=["no-identifier", "bad-identifier", "reserved-chunk"],
)
def test_snappy_streams_nsqd_would_refuse_are_refused(stream: bytes, says: str) -> None:
    # golang/snappy (nsqd's reader) refuses these; python-snappy alone would not.
    core = compressed_core("snappy")
    core.receive_data(stream)
    with pytest.raises(NSQProtocolError, match=says):
        core.events()
