"""The buffers both drivers read into, one per open connection, reused.

A connection reads into one buffer of its own (``recv_into``): ``recv(256 KiB)`` would
allocate, shrink and free a 256 KiB object on every read. Allocating and zeroing that
buffer costs about as much as a connection's handshake parsing, so a closed connection
leaves its buffer here for the next one (a publisher that reconnects, a consumer's
connections, a task that opens one per call). At most :data:`SPARE` wait here.
"""

from __future__ import annotations

#: Bytes per buffer: what one read may take (a consumer's reads of many messages).
SIZE = 256 * 1024
#: Buffers kept for reuse, at most.
SPARE = 8

_spare: list[tuple[bytearray, memoryview]] = []


def take() -> tuple[bytearray, memoryview]:
    """A buffer (and a view of it) for a connection that opens."""
    try:
        return _spare.pop()  # atomic: threads may open connections at once
    except IndexError:
        buffer = bytearray(SIZE)
        return buffer, memoryview(buffer)


def give_back(buffer: bytearray, view: memoryview) -> None:
    """``buffer`` is no longer read into (its connection is closed)."""
    if len(_spare) < SPARE:
        _spare.append((buffer, view))
