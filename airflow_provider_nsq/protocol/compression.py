"""Stream codecs for the negotiated compression (FACTS.md section 8).

Both are pure transforms of one direction's byte stream; the connection core applies
them, the drivers never see them.

- deflate: raw DEFLATE (RFC 1951, ``wbits=-15``); the sender sync-flushes after each
  batch of commands so nsqd can decode it.
- snappy: the snappy *framing* format (stream identifier ``sNaPpY`` first, then chunks
  with a masked CRC-32C), via python-snappy/cramjam.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

from .errors import NSQProtocolError, NSQValueError


class StreamCodec(Protocol):
    name: str

    def compress(self, data: bytes) -> bytes: ...

    def decompress(self, data: bytes | memoryview) -> bytes: ...


class DeflateCodec:
    name = "deflate"

    def __init__(self, level: int = 6) -> None:
        if not 1 <= level <= 9:
            raise NSQValueError(f"deflate level {level!r} is out of range 1-9")
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)

    def compress(self, data: bytes) -> bytes:
        c = self._compressor
        return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)

    def decompress(self, data: bytes | memoryview) -> bytes:
        try:
            return self._decompressor.decompress(data)
        except zlib.error as exc:
            raise NSQProtocolError(f"invalid deflate stream from the peer: {exc}") from None


def _snappy_module() -> Any:
    try:
        import snappy
    except ImportError:  # pragma: no cover - python-snappy is a dependency
        raise NSQValueError(
            "snappy compression needs python-snappy: pip install 'airflow-provider-nsq[snappy]'"
        ) from None
    return snappy


class SnappyCodec:
    name = "snappy"

    def __init__(self) -> None:
        snappy = _snappy_module()
        self._compressor = snappy.StreamCompressor()
        self._decompressor = snappy.StreamDecompressor()

    def compress(self, data: bytes) -> bytes:
        # The first call also emits the stream identifier chunk nsqd's reader expects.
        return bytes(self._compressor.add_chunk(data))

    def decompress(self, data: bytes | memoryview) -> bytes:
        try:
            # python-snappy wants bytes (it calls .startswith on the input)
            return bytes(self._decompressor.decompress(bytes(data)))
        except Exception as exc:  # cramjam raises its own error types
            raise NSQProtocolError(f"invalid snappy stream from the peer: {exc}") from None
