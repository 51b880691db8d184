"""A client's output buffer, as nsqd's bufio.Writer and flush timer behave
(docs/nsqd-facts.md section 6): frames wait here until something flushes
them; compression, once negotiated, applies to each flush."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class OutputBuffer:
    """Frames on their way to one client's transport."""

    __slots__ = ("_compress", "_frames", "_loop", "_timer", "size", "socket_transport", "transport")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._frames: list[bytes] = []
        self.size = 0  # bytes buffered
        self._timer: asyncio.TimerHandle | None = None
        self._compress: Callable[[bytes], bytes] | None = None
        self.transport: Any = None  # what frames are written to (TLS on top, once on)
        #: The TCP transport itself: once one of its writes failed (the client reset the
        #: connection) it is closing, while a TLS transport above it still takes writes
        #: until the loss reaches it; nothing more is written then (nsqd's writer stops
        #: at its first error).
        self.socket_transport: Any = None

    def __bool__(self) -> bool:
        return bool(self._frames)

    def add(self, frame: bytes) -> None:
        self._frames.append(frame)
        self.size += len(frame)

    def flush(self) -> None:
        """Write everything buffered (compressed when compression is on)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        frames = self._frames
        if not frames:
            return
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        self._frames = []
        self.size = 0
        transport = self.transport
        if not self.writable():
            return
        if self._compress is not None:
            data = self._compress(data)
        transport.write(data)

    def writable(self) -> bool:
        """Whether the client's connection can still be written: no write to it failed,
        nothing closed it."""
        transport, below = self.transport, self.socket_transport
        return not (
            transport is None
            or transport.is_closing()
            or (below is not None and below.is_closing())
        )

    def flush_within(self, seconds: float) -> None:
        """Flush ``seconds`` from now unless something flushes first (the output buffer
        timeout)."""
        if self._timer is None:
            self._timer = self._loop.call_later(seconds, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def compress_with(self, compress: Callable[[bytes], bytes]) -> None:
        """Compress every later flush (what is buffered now goes out plain first)."""
        self.flush()
        self._compress = compress

    def close(self) -> None:
        """Stop the timer; nothing more is written."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.transport = self.socket_transport = None
