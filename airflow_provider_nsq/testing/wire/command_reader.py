"""The server's side of the wire: client bytes in, commands out
(docs/nsqd-facts.md section 1).

A command is a text line ending in ``\\n`` (a trailing ``\\r`` dropped), split on each
single space; PUB, DPUB, MPUB, IDENTIFY and AUTH follow it with ``[u32be size][bytes]``,
MPUB's bytes being ``[u32be count]`` then ``count`` times ``[u32be size][bytes]``. nsqd
reads sizes as signed 32-bit integers, so a size of 2**31 or more is negative.

Line first, then the body: :meth:`CommandReader.read_line` hands over a command as soon
as its line is complete, so a server can refuse it before reading a byte of its body
(nsqd checks a PUB's topic first, and closes without reading what follows). Every read
returns ``None`` while its bytes have not all arrived; nothing is consumed then.

Server frames are encoded by :mod:`airflow_provider_nsq.protocol.frames`
(``encode_response``, ``encode_error``, ``encode_message``). Only servers read commands,
so this lives with the embedded broker, not in :mod:`airflow_provider_nsq.protocol`.
"""

from __future__ import annotations

import struct

from airflow_provider_nsq.protocol.constants import MAGIC_V2
from airflow_provider_nsq.protocol.errors import NSQProtocolError

#: nsqd reads commands through a 16 KiB buffer: a longer line closes the connection.
MAX_LINE_SIZE = 16 * 1024
#: The commands whose line is followed by ``[u32be size][bytes]``.
COMMANDS_WITH_BODY = frozenset({b"PUB", b"DPUB", b"MPUB", b"IDENTIFY", b"AUTH"})

_SIZE = struct.Struct(">i")
_unpack_size = _SIZE.unpack_from


_unpack_u32 = struct.Struct(">I").unpack_from


def command_length(buf: bytes | bytearray) -> int | None:
    """How many bytes the command at the start of ``buf`` takes: its line, and for
    :data:`COMMANDS_WITH_BODY` the 4-byte size and the body (read unsigned). None until
    the line (and the body's size) arrived. Unchecked: for tools that cut a stream into
    commands without running them (the fault proxy); :class:`CommandReader` checks."""
    newline = buf.find(b"\n")
    if newline < 0:
        return None
    name = bytes(buf[:newline]).split(b" ", 1)[0].rstrip(b"\r")
    if name not in COMMANDS_WITH_BODY:
        return newline + 1
    if len(buf) < newline + 5:
        return None
    size: int = _unpack_u32(buf, newline + 1)[0]
    return newline + 5 + size


class BadMessageSize(NSQProtocolError):
    """An MPUB message's size field is not 1 to ``max_size`` (nsqd: E_BAD_MESSAGE)."""

    def __init__(self, index: int, size: int, max_size: int) -> None:
        self.index = index
        self.size = size
        self.max_size = max_size
        super().__init__(f"MPUB message {index} has size {size}, not 1-{max_size}")


class CommandReader:
    """Feed a client's bytes in; read its magic, command lines, sizes and bodies out.

    ``unread`` counts the bytes from the start of the current command on: what nsqd
    leaves unread in its socket when it refuses a command before its body.
    """

    __slots__ = ("_buf", "_pos", "_start", "max_line_size")

    def __init__(self, max_line_size: int = MAX_LINE_SIZE) -> None:
        self._buf = bytearray()
        self._pos = 0  # read position
        self._start = 0  # where the current command's line began
        self.max_line_size = max_line_size

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet read."""
        return len(self._buf) - self._pos

    @property
    def unread(self) -> int:
        """Bytes received from the start of the current command on."""
        return len(self._buf) - self._start

    def read_magic(self) -> bool | None:
        """Whether the first 4 bytes are ``"  V2"`` (None until 4 bytes arrived). Only
        the 4 bytes are consumed, as nsqd reads them."""
        if self.buffered < 4:
            return None
        pos = self._pos
        self._pos = self._start = pos + 4
        return self._buf[pos : pos + 4] == MAGIC_V2

    def read_line(self) -> list[bytes] | None:
        """The next command line, split on single spaces (``[b"PUB", b"topic"]``), or
        None until its ``\\n`` arrived. Raises :class:`NSQProtocolError` when
        ``max_line_size`` bytes arrived with no ``\\n``."""
        buf = self._buf
        pos = self._pos
        end = buf.find(b"\n", pos, pos + self.max_line_size)
        if end < 0:
            if len(buf) - pos >= self.max_line_size:
                raise NSQProtocolError(
                    f"command line longer than {self.max_line_size} bytes without a newline"
                )
            return None
        self._start = pos
        self._pos = end + 1
        if end > pos and buf[end - 1] == 13:  # "\r"
            end -= 1
        return bytes(buf[pos:end]).split(b" ")

    def read_size(self) -> int | None:
        """A ``[u32be]`` size or count as nsqd reads it (signed), or None until 4 bytes."""
        pos = self._pos
        if len(self._buf) - pos < 4:
            return None
        self._pos = pos + 4
        value: int = _unpack_size(self._buf, pos)[0]
        return value

    def read_exact(self, n: int) -> bytes | None:
        """The next ``n`` bytes, or None until they all arrived."""
        pos = self._pos
        if len(self._buf) - pos < n:
            return None
        self._pos = pos + n
        return bytes(self._buf[pos : pos + n])

    def read_body(self) -> bytes | None:
        """A whole ``[u32be size][bytes]`` body, or None (nothing consumed) until it all
        arrived. Sizes are not checked: for servers that need no nsqd error texts."""
        pos = self._pos
        size = self.read_size()
        body = None if size is None else self.read_exact(max(size, 0))
        if body is None:
            self._pos = pos
        return body

    def read_command(self) -> tuple[list[bytes], bytes | None] | None:
        """A whole command, its line and (for a command with a body) its body, or None
        (nothing consumed) until it all arrived. For servers that need not refuse a
        command before its body: stand-ins and test servers."""
        pos, start = self._pos, self._start
        params = self.read_line()
        if params is None or params[0] not in COMMANDS_WITH_BODY:
            return None if params is None else (params, None)
        body = self.read_body()
        if body is None:
            self._pos, self._start = pos, start
            return None
        return params, body

    def read_messages(self, count: int, max_size: int, out: list[bytes]) -> int:
        """Read MPUB messages (``[u32be size][bytes]`` each) into ``out`` until it holds
        ``count``; as many as have arrived. Returns 0 when ``out`` is complete, else how
        many bytes the next message needs past the read position: 4 while its size is
        not there, ``4 + size`` once it is. A size outside 1 to ``max_size`` raises
        :class:`BadMessageSize` with that size read."""
        buf = self._buf
        pos = self._pos
        end = len(buf)
        append = out.append
        index = len(out)
        with memoryview(buf) as view:
            try:
                while index < count:
                    if end - pos < 4:
                        return 4
                    size = _unpack_size(buf, pos)[0]
                    if size <= 0 or size > max_size:
                        pos += 4
                        raise BadMessageSize(index, size, max_size)
                    stop = pos + 4 + size
                    if stop > end:
                        return 4 + size
                    append(view[pos + 4 : stop].tobytes())
                    pos = stop
                    index += 1
                return 0
            finally:
                self._pos = pos

    def take_rest(self) -> bytes:
        """Remove and return every byte not yet read: the stream changes encoding after
        the current command (compression starts), so they must be decoded again."""
        rest = bytes(self._buf[self._pos :])
        del self._buf[self._pos :]
        return rest

    def compact(self) -> None:
        """Forget the bytes already read (call between batches of commands)."""
        pos = self._pos
        if pos:
            if pos >= len(self._buf):
                self._buf.clear()
            else:
                del self._buf[:pos]
            self._pos = self._start = 0
