"""The codec decodes every recorded server stream into the recorded frames, and every
recorded client stream into the commands the client sent (the server role).

Each stream is fed whole, one byte at a time, and followed by trailing bytes of the next
frame (h11's approach), and compressed streams go through our deflate/snappy decoders
exactly as nsqd sent them.
"""

from __future__ import annotations

import pytest

from airflow_provider_nsq.protocol import (
    ErrorFrame,
    FrameDecoder,
    Message,
    NSQServerError,
    ResponseFrame,
    parse_message,
)
from airflow_provider_nsq.protocol.compression import DeflateCodec, SnappyCodec
from airflow_provider_nsq.testing.wire.command_reader import CommandReader
from tests.conformance.transcript import FILES, Transcript, recv_wire, sent_plain


def _expected(frame: dict) -> object:
    data = bytes.fromhex(frame["data_hex"])
    if frame["frame_type"] == 0:
        return ResponseFrame(data)
    if frame["frame_type"] == 1:
        return ErrorFrame(data)
    m = frame["message"]
    return Message(m["timestamp_ns"], m["attempts"], m["id"].encode(), bytes.fromhex(m["body_hex"]))


def _streams(t: Transcript) -> list[tuple[str, str | None, bytes, list[object]]]:
    """Per connection and compression layer: the wire bytes and the frames they carry."""
    out = []
    for conn in t.connections:
        layer: str | None = None
        wire, frames = bytearray(), []
        for step in t.steps_of(conn):
            action = step.get("client_action")
            if action in ("start_deflate", "start_snappy"):
                if frames:
                    out.append((conn, layer, bytes(wire), frames))
                layer, wire, frames = action.removeprefix("start_"), bytearray(), []
            if "recv" in step:
                wire += recv_wire(step)
                frames += [_expected(f) for f in step["recv"]]
            elif "raw_hex_without_frames" in step:
                wire += bytes.fromhex(step["raw_hex_without_frames"])
        if frames:
            out.append((conn, layer, bytes(wire), frames))
    return out


def _decompress(layer: str | None, wire: bytes, chunks: list[bytes]) -> bytes:
    if layer is None:
        return wire
    codec = DeflateCodec() if layer == "deflate" else SnappyCodec()
    return b"".join(codec.decompress(c) for c in chunks)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_server_bytes_decode_to_recorded_frames(path) -> None:
    t = Transcript.load(path)
    for conn, layer, wire, frames in _streams(t):
        whole = _decompress(layer, wire, [wire])
        bytewise = _decompress(layer, wire, [wire[i : i + 1] for i in range(len(wire))])
        assert whole == bytewise, f"{conn}: {layer} decoder depends on chunking"

        decoder = FrameDecoder()
        decoder.feed(whole)
        assert decoder.frames() == frames, conn
        assert decoder.buffered == 0

        decoder = FrameDecoder()
        got = []
        for i in range(len(whole)):
            decoder.feed(whole[i : i + 1])
            frame = decoder.next_frame()
            if frame is not None:
                got.append(frame)
        assert got == frames, conn

        decoder = FrameDecoder()
        decoder.feed(whole + whole[:5])  # trailing partial frame stays buffered
        assert decoder.frames() == frames
        assert decoder.buffered == min(5, len(whole))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_errors_parse_with_code_text_and_fatality(path) -> None:
    t = Transcript.load(path)
    errors = [
        NSQServerError.from_payload(bytes.fromhex(f["data_hex"]))
        for s in t.steps
        if "recv" in s
        for f in s["recv"]
        if f["frame_type"] == 1
    ]
    assert [str(e) for e in errors] == t.observed["errors"]
    closes = [s for s in t.steps if s.get("recv_closed")]
    for error in errors:
        # every fatal error is followed by nsqd closing; the three non-fatal ones are not
        assert error.fatal == bool(closes), (error, closes)
        assert error.code.startswith("E_")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_messages_keep_binary_bodies_and_ids(path) -> None:
    t = Transcript.load(path)
    for s in t.steps:
        for f in s.get("recv", []):
            if f["frame_type"] != 2:
                continue
            m = f["message"]
            msg = parse_message(bytes.fromhex(f["data_hex"]))
            assert msg.id == m["id"] and len(msg.raw_id) == 16
            assert msg.timestamp == m["timestamp_ns"] and msg.attempts == m["attempts"]
            assert msg.body.hex() == m["body_hex"]


def _client_streams(t: Transcript) -> list[tuple[str, bytes]]:
    """Per connection: every byte the client wrote, decompressed."""
    return [
        (conn, b"".join(sent_plain(s) for s in t.steps_of(conn) if "send_hex" in s))
        for conn in t.connections
    ]


def _read_commands(chunks: list[bytes]) -> tuple[bool | None, list[bytes], int]:
    """Feed ``chunks`` to a CommandReader; the magic, each whole command re-encoded, and
    the bytes left over."""
    reader, magic, commands = CommandReader(), None, []
    for chunk in chunks:
        reader.feed(chunk)
        magic = reader.read_magic() if magic is None else magic
        while magic and (command := reader.read_command()) is not None:
            params, body = command
            line = b" ".join(params) + b"\n"
            commands.append(line if body is None else line + encode_sized(body))
    return magic, commands, reader.buffered


def encode_sized(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_client_bytes_read_back_as_the_commands_sent(path) -> None:
    t = Transcript.load(path)
    for conn, stream in _client_streams(t):
        magic, commands, left = _read_commands([stream])
        assert magic is (stream[:4] == b"  V2"), conn
        if magic:
            # Every whole command, re-encoded, is the stream again: nothing dropped,
            # nothing reordered, the unfinished tail still buffered.
            assert b"  V2" + b"".join(commands) + stream[len(stream) - left :] == stream, conn
        bytewise = _read_commands([stream[i : i + 1] for i in range(len(stream))])
        assert bytewise == (magic, commands, left), conn
