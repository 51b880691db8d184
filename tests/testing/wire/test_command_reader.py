"""The server-role reader: client bytes in, command lines, sizes and bodies out."""

from __future__ import annotations

import struct

import pytest

from airflow_provider_nsq.protocol import NSQProtocolError, encode_mpub, encode_pub
from airflow_provider_nsq.protocol.commands import encode_fin
from airflow_provider_nsq.protocol.frames import encode_message, encode_response, frame_length
from airflow_provider_nsq.testing.wire.command_reader import (
    MAX_LINE_SIZE,
    BadMessageSize,
    CommandReader,
    command_length,
)


def reader_with(*chunks: bytes) -> CommandReader:
    reader = CommandReader()
    for chunk in chunks:
        reader.feed(chunk)
    return reader


def test_the_line_comes_before_its_body_so_a_server_can_refuse_it_first() -> None:
    reader = reader_with(b"PUB bad!topic\n")
    assert reader.read_line() == [b"PUB", b"bad!topic"]
    assert reader.read_size() is None  # the body has not arrived; nothing was consumed
    reader.feed(b"\x00\x00\x00\x03ab")
    assert reader.read_size() == 3
    assert reader.read_exact(3) is None
    reader.feed(b"c")
    assert reader.read_exact(3) == b"abc" and reader.buffered == 0


def test_lines_split_on_single_spaces_and_lose_a_trailing_cr() -> None:
    reader = reader_with(b"RDY \r\nSUB t  c\nNOP")
    assert reader.read_line() == [b"RDY", b""]
    assert reader.read_line() == [b"SUB", b"t", b"", b"c"]
    assert reader.read_line() is None  # no newline yet
    assert reader.buffered == 3


def test_sizes_are_signed_as_nsqd_reads_them() -> None:
    assert reader_with(b"\xff\xff\xff\xff").read_size() == -1
    assert reader_with(b"\x80\x00\x00\x00").read_size() == -(2**31)


def test_a_line_longer_than_nsqds_read_buffer_is_a_protocol_error() -> None:
    fits = reader_with(b"x" * (MAX_LINE_SIZE - 1) + b"\n")
    assert len(fits.read_line()[0]) == MAX_LINE_SIZE - 1  # type: ignore[index]
    reader = reader_with(b"x" * (MAX_LINE_SIZE - 1))
    assert reader.read_line() is None
    reader.feed(b"x\n")  # the newline lands just past the buffer
    with pytest.raises(NSQProtocolError, match="longer than 16384"):
        reader.read_line()


@pytest.mark.parametrize("split", ["whole", "bytewise", "trailing"])
def test_whole_commands_however_the_bytes_arrive(split: str) -> None:
    stream = b"  V2" + encode_pub("t", b"hi") + b"RDY 5\n" + encode_mpub("t", [b"a", b"bc"])
    commands = [([b"PUB", b"t"], b"hi"), ([b"RDY", b"5"], None)]
    commands.append(([b"MPUB", b"t"], b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x02bc"))
    chunks = [stream[i : i + 1] for i in range(len(stream))] if split == "bytewise" else [stream]
    if split == "trailing":
        chunks.append(b"PUB t\n\x00\x00")
    reader, magic, got = CommandReader(), None, []
    for chunk in chunks:
        reader.feed(chunk)
        magic = reader.read_magic() if magic is None else magic
        while magic and (command := reader.read_command()) is not None:
            got.append(command)
        reader.compact()
    assert magic is True and got == commands
    assert reader.buffered == (8 if split == "trailing" else 0)  # nothing half-consumed


def test_a_wrong_magic_is_reported_after_four_bytes() -> None:
    reader = reader_with(b"  V")
    assert reader.read_magic() is None
    reader.feed(b"1IDENTIFY\n")
    assert reader.read_magic() is False and reader.read_line() == [b"IDENTIFY"]


def test_mpub_messages_are_read_as_they_arrive() -> None:
    body = struct.pack(">I", 3) + b"one" + struct.pack(">I", 3) + b"two"
    reader = reader_with(body[:9])
    out: list[bytes] = []
    assert reader.read_messages(2, 10, out) == 4  # the second size is not there yet
    assert out == [b"one"]
    reader.feed(body[9:12])
    assert reader.read_messages(2, 10, out) == 4 + 3  # its size is, its body is short
    reader.feed(body[12:])
    assert reader.read_messages(2, 10, out) == 0 and out == [b"one", b"two"]


@pytest.mark.parametrize(("size", "index"), [(0, 1), (-5, 1), (11, 1)])
def test_a_bad_mpub_message_size_names_the_message(size: int, index: int) -> None:
    reader = reader_with(struct.pack(">I", 1) + b"a" + struct.pack(">i", size) + b"rest")
    with pytest.raises(BadMessageSize) as info:
        reader.read_messages(3, 10, [])
    assert (info.value.index, info.value.size, info.value.max_size) == (index, size, 10)
    assert reader.read_exact(4) == b"rest"  # the bad size itself was read, as nsqd does


def test_unread_counts_from_the_command_a_server_refuses() -> None:
    reader = reader_with(b"  V2NOP\nPUB bad!\n" + b"\x00\x00\x4e\x20" + b"x" * 100)
    reader.read_magic()
    reader.read_line()
    assert reader.read_line() == [b"PUB", b"bad!"]
    assert reader.unread == len(b"PUB bad!\n") + 4 + 100


def test_take_rest_hands_back_what_follows_the_current_command() -> None:
    reader = reader_with(b"IDENTIFY\n\x00\x00\x00\x02{}compressed...")
    assert reader.read_line() == [b"IDENTIFY"] and reader.read_body() == b"{}"
    assert reader.take_rest() == b"compressed..."
    assert reader.buffered == 0


def test_command_and_frame_lengths_cut_a_stream_without_decoding_it() -> None:
    pub = encode_pub("t", b"hello")
    fin = encode_fin(b"0123456789abcdef")
    stream = pub + fin
    assert command_length(stream) == len(pub)
    assert command_length(stream[len(pub) :]) == len(fin)
    # Incomplete: no newline yet, or the body's size not all there.
    assert command_length(pub[:3]) is None
    assert command_length(pub[: pub.index(b"\n") + 3]) is None

    frames = encode_response(b"OK") + encode_message(1, 1, b"0123456789abcdef", b"body")
    first = frame_length(frames)
    assert first == len(encode_response(b"OK"))
    assert frame_length(frames, first) == len(frames) - first
    assert frame_length(frames[:3]) is None
