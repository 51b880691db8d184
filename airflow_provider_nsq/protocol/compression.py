"""Stream codecs for the negotiated compression (docs/nsqd-facts.md section 8).

Both are pure transforms of one direction's byte stream; the connection core applies
them, the drivers never see them.

- deflate: raw DEFLATE (RFC 1951, ``wbits=-15``); the sender sync-flushes after each
  batch of commands so nsqd can decode it.
- snappy: the snappy *framing* format (stream identifier ``sNaPpY`` first, then chunks
  with a masked CRC-32C), via python-snappy/cramjam.

Decompression is incremental and bounded: :meth:`feed` takes the peer's compressed bytes,
:meth:`read` returns at most about ``max_length`` decompressed bytes and keeps the rest
pending. A few KiB from a hostile peer can inflate to hundreds of MiB; the connection
core reads a step at a time and checks the frame-size limit in between, so it never
holds much more than one frame.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

from .errors import NSQProtocolError, NSQValueError


class StreamCodec(Protocol):
    name: str

    def compress(self, data: bytes) -> bytes: ...

    def feed(self, data: bytes | memoryview) -> None:
        """Compressed bytes from the peer (copied: the caller may reuse its buffer)."""

    def read(self, max_length: int) -> bytes:
        """Up to about ``max_length`` decompressed bytes; ``b""`` when more input is
        needed."""

    @property
    def pending(self) -> bool:
        """Whether input is left that :meth:`read` may turn into more output."""

    def decompress(self, data: bytes | memoryview) -> bytes:
        """:meth:`feed` then everything :meth:`read` gives (unbounded: trusted input)."""


def _read_all(codec: StreamCodec, data: bytes | memoryview) -> bytes:
    codec.feed(data)
    parts = []
    while codec.pending:
        part = codec.read(1 << 20)
        if not part:
            break
        parts.append(part)
    return b"".join(parts)


class DeflateCodec:
    name = "deflate"

    def __init__(self, level: int = 6) -> None:
        if not 1 <= level <= 9:
            raise NSQValueError(f"deflate level {level!r} is out of range 1-9")
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)
        self._input = b""  # compressed bytes not yet given to zlib
        self._full = False  # the last read stopped at max_length: zlib may hold more

    def compress(self, data: bytes) -> bytes:
        c = self._compressor
        return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)

    def feed(self, data: bytes | memoryview) -> None:
        self._input = self._input + bytes(data) if self._input else bytes(data)

    @property
    def pending(self) -> bool:
        return bool(self._input) or self._full

    def read(self, max_length: int) -> bytes:
        try:
            out = self._decompressor.decompress(self._input, max_length)
        except zlib.error as exc:
            raise NSQProtocolError(f"invalid deflate stream from the peer: {exc}") from None
        self._input = self._decompressor.unconsumed_tail
        self._full = len(out) >= max_length
        return out

    def decompress(self, data: bytes | memoryview) -> bytes:
        return _read_all(self, data)


def _snappy_module() -> Any:
    try:
        import snappy
    except ImportError:  # pragma: no cover - python-snappy is a dependency
        raise NSQValueError(
            "snappy compression needs python-snappy, a dependency: pip install 'python-snappy>=0.7'"
        ) from None
    return snappy


# Snappy framing format: [type u8][length u24le][data]. A data chunk holds at most 64 KiB
# of uncompressed data; with its CRC-32C, an uncompressed chunk is at most 65536 + 4
# bytes and a compressed one at most 76490 + 4 (golang/snappy's maxEncodedLenOfMaxBlockSize).
_SNAPPY_COMPRESSED = 0x00
_SNAPPY_UNCOMPRESSED = 0x01
_SNAPPY_STREAM_ID = 0xFF
_SNAPPY_MAGIC = b"sNaPpY"
# Data chunks, and the skippable ones (0x80-0xfe, padding included); 0x02-0x7f are
# reserved and unskippable.
_SNAPPY_KNOWN = frozenset({0x00, 0x01, *range(0x80, 0xFF)})
_SNAPPY_MAX_BLOCK = 65536
_SNAPPY_MAX_CHUNK = {_SNAPPY_COMPRESSED: 76490 + 4, _SNAPPY_UNCOMPRESSED: _SNAPPY_MAX_BLOCK + 4}


class SnappyCodec:
    name = "snappy"

    def __init__(self) -> None:
        snappy = _snappy_module()
        self._compressor = snappy.StreamCompressor()
        self._decompressor = snappy.StreamDecompressor()
        self._input = bytearray()
        self._identified = False  # the stream identifier chunk came first

    def compress(self, data: bytes) -> bytes:
        # The first call also emits the stream identifier chunk nsqd's reader expects.
        return bytes(self._compressor.add_chunk(data))

    def feed(self, data: bytes | memoryview) -> None:
        self._input += data

    @property
    def pending(self) -> bool:
        return self._whole_chunks(1) > 0

    def _whole_chunks(self, max_length: int) -> int:
        """How many leading input bytes form whole chunks whose output is at most about
        ``max_length`` (at least one chunk when there is one)."""
        buf = self._input
        pos = out = 0
        end = len(buf)
        while end - pos >= 4 and out < max_length:
            kind = buf[pos]
            length = int.from_bytes(buf[pos + 1 : pos + 4], "little")
            # Checked on the header, as golang/snappy does, not once the body arrived.
            limit = _SNAPPY_MAX_CHUNK.get(kind)
            if limit is not None and length > limit:
                raise NSQProtocolError(
                    f"invalid snappy stream from the peer: a chunk of {length} bytes is over "
                    f"the framing format's limit of {limit}"
                )
            if kind == _SNAPPY_STREAM_ID:
                if length != len(_SNAPPY_MAGIC):
                    self._check_stream_id(b"(%d bytes)" % length)
            elif not self._identified or kind not in _SNAPPY_KNOWN:
                self._refuse_chunk(kind)
            if end - pos < 4 + length:
                break
            if kind == _SNAPPY_STREAM_ID:
                self._check_stream_id(bytes(buf[pos + 4 : pos + 4 + length]))
            pos += 4 + length
            if kind == _SNAPPY_COMPRESSED:
                out += _SNAPPY_MAX_BLOCK  # its size is known only once decompressed
            elif kind == _SNAPPY_UNCOMPRESSED:
                out += length - 4
        return pos

    def _check_stream_id(self, body: bytes) -> None:
        if body != _SNAPPY_MAGIC:
            raise NSQProtocolError(
                f"invalid snappy stream from the peer: bad stream identifier {body[:16]!r}"
            )
        self._identified = True

    def _refuse_chunk(self, kind: int) -> None:
        # What golang/snappy's reader (nsqd's) refuses and python-snappy lets through.
        if not self._identified:
            raise NSQProtocolError(
                "invalid snappy stream from the peer: it does not start with the stream "
                "identifier chunk"
            )
        raise NSQProtocolError(
            f"invalid snappy stream from the peer: reserved chunk type 0x{kind:02x}"
        )

    def read(self, max_length: int) -> bytes:
        take = self._whole_chunks(max_length)
        if not take:
            return b""
        chunks = bytes(self._input[:take])
        del self._input[:take]
        try:
            # python-snappy wants bytes (it calls .startswith on the input)
            return bytes(self._decompressor.decompress(chunks))
        except Exception as exc:  # cramjam raises its own error types
            raise NSQProtocolError(f"invalid snappy stream from the peer: {exc}") from None

    def decompress(self, data: bytes | memoryview) -> bytes:
        return _read_all(self, data)
