"""Server frames: values, an incremental decoder, and encoders (for servers and tests).

Layout (docs/nsqd-facts.md section 1)::

    frame    = [u32be size][u32be frame_type][payload]     size = 4 + len(payload)
    message  = [i64be timestamp_ns][u16be attempts][16-byte id][body]

The decoder is binary-safe and allocates a frame only once its size has been checked
against ``max_frame_size``; "incomplete frame" is a normal outcome, not an exception.
"""

from __future__ import annotations

import struct

from .constants import (
    DEFAULT_MAX_FRAME_SIZE,
    FRAME_HEADER_SIZE,
    HTTP_AS_FRAME_SIZE,
    MESSAGE_HEADER_SIZE,
    MESSAGE_ID_LENGTH,
    FrameType,
)
from .errors import NSQFrameTooLargeError, NSQProtocolError, NSQServerError

_FRAME_HEADER = struct.Struct(">II")
_MESSAGE_HEADER = struct.Struct(">IIqH16s")  # frame header + message header, one unpack
_MESSAGE_ONLY_HEADER = struct.Struct(">qH")
_MESSAGE_PREFIX = _MESSAGE_HEADER.size  # 34
_pack_message_prefix = struct.Struct(">IIqH").pack  # frame header, timestamp, attempts
_MESSAGE_FRAME_BASE = 4 + MESSAGE_HEADER_SIZE  # a message frame's size field, less the body


class Message:
    """A message as nsqd delivered it. ``id`` is the 16-character id as text."""

    __slots__ = ("attempts", "body", "raw_id", "timestamp")

    def __init__(self, timestamp: int, attempts: int, raw_id: bytes, body: bytes) -> None:
        self.timestamp = timestamp  # ns since the epoch, set when it was published
        self.attempts = attempts  # 1 on first delivery, +1 on each redelivery
        self.raw_id = raw_id  # 16 ASCII bytes, echoed verbatim by FIN/REQ/TOUCH
        self.body = body

    @property
    def id(self) -> str:
        return self.raw_id.decode("ascii", "replace")

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 40 else self.body[:40] + b"..."
        return (
            f"{type(self).__name__}(id={self.id!r}, attempts={self.attempts}, "
            f"timestamp={self.timestamp}, body={body!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.timestamp, self.attempts, self.raw_id, self.body) == (
            other.timestamp,
            other.attempts,
            other.raw_id,
            other.body,
        )

    __hash__ = None  # type: ignore[assignment]


class ResponseFrame:
    """A type-0 frame: ``OK``, ``CLOSE_WAIT``, ``_heartbeat_`` or a JSON document."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"ResponseFrame({self.data!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResponseFrame) and other.data == self.data

    __hash__ = None  # type: ignore[assignment]


class ErrorFrame:
    """A type-1 frame: ``<CODE> <description>``."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def error(self) -> NSQServerError:
        return NSQServerError.from_payload(self.data)

    def __repr__(self) -> str:
        return f"ErrorFrame({self.data!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ErrorFrame) and other.data == self.data

    __hash__ = None  # type: ignore[assignment]


Frame = ResponseFrame | ErrorFrame | Message


def _bad_size(size: int, max_frame_size: int, head: bytes | bytearray = b"") -> NSQProtocolError:
    """The error for a frame whose size header is ``size`` (``head``: the bytes that
    start with it, as far as they arrived)."""
    if size == HTTP_AS_FRAME_SIZE:
        return NSQProtocolError(
            f"got an HTTP response where NSQ frames were expected{_http_seen(head)}: is "
            "this nsqd's HTTP port (4151 by default) or an HTTP proxy? Point the "
            "connection at nsqd's TCP port (4150 by default)"
        )
    if size < 4:
        return NSQProtocolError(f"invalid frame size {size}: a frame is at least 4 bytes")
    if size >= 1 << 31:
        return NSQFrameTooLargeError(
            f"invalid frame size {size} (negative as a signed 32-bit integer)"
        )
    return NSQFrameTooLargeError(
        f"frame of {size} bytes exceeds the limit of {max_frame_size} bytes; raise "
        "max_frame_size if nsqd runs with a larger --max-msg-size"
    )


def _http_seen(head: bytes | bytearray) -> str:
    """What of the HTTP response arrived, for the error: its status line and the
    ``Server`` header when they are there (a proxy often names itself)."""
    lines = bytes(head[:2048]).split(b"\r\n")
    if len(lines) < 2:  # the status line is not complete yet
        return ""
    seen = [lines[0]]
    seen += [line for line in lines[1:-1] if line[:7].lower() == b"server:"][:1]
    text = "; ".join(line.decode("ascii", "replace")[:100] for line in seen)
    return f" ({text})"


class FrameDecoder:
    """Feed bytes in, get frames out.

    ``feed(data)`` appends; ``next_frame()`` returns one complete frame or ``None``;
    ``frames()`` returns every complete frame at once (the fast path for consumers).
    Frames larger than ``max_frame_size`` or with a size below 4 raise
    :class:`NSQProtocolError` as soon as their header arrives.
    """

    __slots__ = ("max_frame_size", "message_class", "undecoded")

    def __init__(
        self,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        message_class: type[Message] = Message,
    ) -> None:
        if max_frame_size < 4:
            raise ValueError("max_frame_size must be at least 4")
        self.max_frame_size = max_frame_size
        #: What a message frame is decoded into (settable: a connection sets it on SUB).
        self.message_class = message_class
        #: The bytes received and not yet decoded into a frame (read it; :meth:`feed`
        #: adds to it).
        self.undecoded = bytearray()

    def feed(self, data: bytes | memoryview) -> None:
        self.undecoded += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet decoded into a frame."""
        return len(self.undecoded)

    def needed(self) -> int:
        """Bytes still missing for the next whole frame (0: one is buffered). Raises
        :class:`NSQProtocolError` as soon as the next frame's size header is invalid, so
        a caller can stop feeding (e.g. inflating) before the frame's body arrives."""
        buf = self.undecoded
        if len(buf) < FRAME_HEADER_SIZE:
            return FRAME_HEADER_SIZE - len(buf)
        size, _ = _FRAME_HEADER.unpack_from(buf, 0)
        if size > self.max_frame_size or size < 4:
            raise _bad_size(size, self.max_frame_size, buf)
        return max(0, 4 + size - len(buf))

    def take_buffered(self) -> bytes:
        """Remove and return the undecoded bytes (used when the stream changes encoding)."""
        data = bytes(self.undecoded)
        self.undecoded.clear()
        return data

    def next_frame(self) -> Frame | None:
        buf = self.undecoded
        if len(buf) < FRAME_HEADER_SIZE:
            return None
        size, ftype = _FRAME_HEADER.unpack_from(buf, 0)
        if size > self.max_frame_size or size < 4:
            raise _bad_size(size, self.max_frame_size, buf)
        stop = 4 + size
        if len(buf) < stop:
            return None
        payload = bytes(buf[FRAME_HEADER_SIZE:stop])
        del buf[:stop]
        return _make_frame(ftype, payload, self.message_class)

    def frames(self) -> list[Frame]:
        """Every complete frame, in order."""
        out: list[Frame] = []
        self._decode(out, out)
        return out

    def split_frames(self) -> tuple[list[Message], list[Frame]]:
        """Every complete frame, messages apart from the rest (order kept within each)."""
        messages: list[Message] = []
        others: list[Frame] = []
        self._decode(messages, others)  # type: ignore[arg-type]
        return messages, others

    def _decode(self, messages: list[Frame], others: list[Frame]) -> None:
        buf = self.undecoded
        end = len(buf)
        if end < FRAME_HEADER_SIZE:
            return
        add_message = messages.append
        add_other = others.append
        pos = 0
        limit = self.max_frame_size
        msg_class = self.message_class
        unpack_header = _FRAME_HEADER.unpack_from
        unpack_message = _MESSAGE_HEADER.unpack_from
        view = memoryview(buf)
        try:
            while end - pos >= FRAME_HEADER_SIZE:
                if end - pos >= _MESSAGE_PREFIX:
                    # One unpack reads a message's whole header; for other frames the
                    # extra fields are ignored.
                    size, ftype, timestamp, attempts, raw_id = unpack_message(buf, pos)
                else:
                    size, ftype = unpack_header(buf, pos)
                if size > limit or size < 4:
                    raise _bad_size(size, limit, buf[pos:])
                stop = pos + 4 + size
                if stop > end:
                    break
                if ftype == 2 and size >= 4 + MESSAGE_HEADER_SIZE:
                    add_message(
                        msg_class(
                            timestamp, attempts, raw_id, bytes(view[pos + _MESSAGE_PREFIX : stop])
                        )
                    )
                else:
                    frame = _make_frame(
                        ftype, bytes(view[pos + FRAME_HEADER_SIZE : stop]), msg_class
                    )
                    (add_message if frame.__class__ is msg_class else add_other)(frame)
                pos = stop
        finally:
            view.release()
            if pos:
                del buf[:pos]


_unpack_u32 = struct.Struct(">I").unpack_from


def frame_length(buf: bytes | bytearray, offset: int = 0) -> int | None:
    """How many bytes the frame starting at ``offset`` takes, its 4-byte size included
    (None until those 4 bytes arrived). Unchecked: for tools that cut a stream into
    frames without decoding it (the fault proxy); :class:`FrameDecoder` checks sizes."""
    if len(buf) - offset < 4:
        return None
    size: int = _unpack_u32(buf, offset)[0]
    return 4 + size


def _make_frame(ftype: int, payload: bytes, message_class: type[Message]) -> Frame:
    if ftype == FrameType.RESPONSE:
        return ResponseFrame(payload)
    if ftype == FrameType.ERROR:
        return ErrorFrame(payload)
    if ftype == FrameType.MESSAGE:
        return parse_message(payload, message_class)
    raise NSQProtocolError(f"unknown frame type {ftype}")


def parse_message(payload: bytes, message_class: type[Message] = Message) -> Message:
    """Parse a type-2 payload: timestamp, attempts, 16-byte id, body (bytes, untouched)."""
    if len(payload) < MESSAGE_HEADER_SIZE:
        raise NSQProtocolError(
            f"message frame of {len(payload)} bytes is shorter than the "
            f"{MESSAGE_HEADER_SIZE}-byte message header"
        )
    timestamp, attempts = _MESSAGE_ONLY_HEADER.unpack_from(payload, 0)
    return message_class(
        timestamp, attempts, payload[10 : 10 + MESSAGE_ID_LENGTH], payload[MESSAGE_HEADER_SIZE:]
    )


# Encoders for the server side: the embedded broker and scripted test servers use them.


def encode_frame(frame_type: int, payload: bytes) -> bytes:
    return _FRAME_HEADER.pack(4 + len(payload), frame_type) + payload


def encode_response(data: bytes) -> bytes:
    return encode_frame(FrameType.RESPONSE, data)


def encode_error(code: str, description: str | bytes = "") -> bytes:
    """``<CODE> <description>``; ``description`` may be bytes, as nsqd echoes raw input
    (e.g. ``E_INVALID invalid command <bytes>``)."""
    if isinstance(description, str):
        description = description.encode()
    text = code.encode() + b" " + description if description else code.encode()
    return encode_frame(FrameType.ERROR, text)


def encode_message(timestamp: int, attempts: int, raw_id: bytes, body: bytes) -> bytes:
    """A whole message frame (a broker's hot path: one pack, two joins)."""
    if len(raw_id) != MESSAGE_ID_LENGTH:
        raise ValueError("message id must be 16 bytes")
    return (
        _pack_message_prefix(_MESSAGE_FRAME_BASE + len(body), 2, timestamp, attempts)
        + raw_id
        + body
    )
