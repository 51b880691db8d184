"""A minimal NSQ client over a raw socket: the floor of Python overhead.

No validation, no state machine, no error recovery: just the bytes each workload needs
(tests/conformance/transcripts/FACTS.md section 1 for the framing). It shows how fast Python
can go when the only per-message work is ``struct`` and ``bytes.join``; the project's client
is judged by how close it gets.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from .base import (
    BODY,
    MAX_RDY,
    MPUB_BATCH,
    ConsumeClock,
    Context,
    fill_channel,
    measure_connects,
    timed_calls,
)

# Frame: size (4, big-endian, counts type + data) | type (4) | data.
# Message data: timestamp (8) | attempts (2) | id (16) | body.
_HEADER = struct.Struct(">ll")
_SIZE = struct.Struct(">l")
_FRAME_RESPONSE, _FRAME_ERROR, _FRAME_MESSAGE = 0, 1, 2
_HEARTBEAT = b"_heartbeat_"
_RECV = 256 * 1024


class PlainConnection:
    """One socket and one receive buffer, reused for every read: ``recv_into`` it
    rather than ``recv(256 KiB)``, which allocates (mmap), shrinks (mremap) and frees
    (munmap) a 256 KiB bytes object on every read, three syscalls a reply."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(_RECV)
        self.view = memoryview(self.buf)
        self.have = 0  # received bytes at the start of buf, not yet parsed
        identify = json.dumps(
            {
                "client_id": "bench",
                "hostname": "bench",
                "user_agent": "plain-socket/1.0",
                "feature_negotiation": True,
            }
        ).encode()
        self.sock.sendall(b"  V2IDENTIFY\n" + _SIZE.pack(len(identify)) + identify)
        self.read_response()

    def close(self) -> None:
        self.view.release()
        self.sock.close()

    def fill(self) -> int:
        """Receive more after the ``have`` bytes already buffered; returns the total."""
        n = self.sock.recv_into(self.view[self.have :])
        if not n:
            raise ConnectionError("nsqd closed the connection")
        self.have += n
        return self.have

    def consumed(self, pos: int) -> None:
        """Drop the first ``pos`` bytes: the rest (a partial frame) moves to the front."""
        left = self.have - pos
        if left:  # a copy first: the two ranges may overlap
            self.buf[:left] = bytes(self.view[pos : self.have])
        self.have = left

    def read_frame(self) -> tuple[int, bytes]:
        while True:
            if self.have >= 8:
                size, kind = _HEADER.unpack_from(self.buf)
                end = 4 + size
                if self.have >= end:
                    data = bytes(self.view[8:end])
                    self.consumed(end)
                    return kind, data
            self.fill()

    def read_response(self) -> bytes:
        while True:
            kind, data = self.read_frame()
            if kind == _FRAME_ERROR:
                raise RuntimeError(data.decode())
            if data == _HEARTBEAT:
                self.sock.sendall(b"NOP\n")
                continue
            return data

    def pub(self, topic: bytes, body: bytes) -> None:
        self.sock.sendall(b"PUB %s\n%s%s" % (topic, _SIZE.pack(len(body)), body))
        self.read_response()

    def mpub(self, topic: bytes, bodies: list[bytes]) -> None:
        # count | (size | body)*, built with one join; then the frame header in front.
        size = _SIZE.pack
        payload = b"".join([size(len(bodies)), *(x for b in bodies for x in (size(len(b)), b))])
        self.sock.sendall(b"MPUB %s\n%s%s" % (topic, size(len(payload)), payload))
        self.read_response()


def pub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("pub").encode()
    conn = PlainConnection(ctx.host, ctx.port)
    try:
        return timed_calls(ctx, "pub", lambda: conn.pub(topic, BODY))
    finally:
        conn.close()


def mpub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("mpub").encode()
    batch = [BODY] * MPUB_BATCH
    conn = PlainConnection(ctx.host, ctx.port)
    try:
        return timed_calls(ctx, "mpub", lambda: conn.mpub(topic, batch))
    finally:
        conn.close()


def consume(ctx: Context) -> dict[str, Any]:
    topic, channel = ctx.topic("consume"), "bench"
    clock = ConsumeClock(ctx)
    fill_channel(ctx, topic, channel, clock.total + clock.backlog)
    conn = PlainConnection(ctx.host, ctx.port)
    sock = conn.sock
    try:
        sock.sendall(b"SUB %s %s\n" % (topic.encode(), channel.encode()))
        conn.read_response()
        sock.sendall(b"RDY %d\n" % MAX_RDY)
        sock.settimeout(10.0)
        buf, view = conn.buf, conn.view
        unpack_from = _HEADER.unpack_from
        while not clock.done:
            end_of_data = conn.fill()
            pos, n, fins = 0, 0, []
            while end_of_data - pos >= 8:
                size, kind = unpack_from(buf, pos)
                end = pos + 4 + size
                if end > end_of_data:
                    break
                if kind == _FRAME_MESSAGE:
                    # FIN <16-byte id>\n; the body is view[pos + 34 : end], left unread.
                    fins.append(b"FIN " + bytes(view[pos + 18 : pos + 34]) + b"\n")
                    n += 1
                elif kind == _FRAME_RESPONSE and view[pos + 8 : end] == _HEARTBEAT:
                    fins.append(b"NOP\n")
                elif kind == _FRAME_ERROR:
                    raise RuntimeError(bytes(view[pos + 8 : end]).decode())
                pos = end
            conn.consumed(pos)
            if fins:
                sock.sendall(b"".join(fins))  # one write for every FIN of this read
            clock.add(n)
        return clock.result()
    finally:
        conn.close()


def connect(ctx: Context) -> dict[str, Any]:
    def once() -> Any:
        return PlainConnection(ctx.host, ctx.port).close

    return measure_connects(ctx, once)
