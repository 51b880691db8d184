"""Encoders for the commands a client sends (docs/nsqd-facts.md section 1).

A command is a text line ending in ``\\n``; PUB, DPUB, MPUB, IDENTIFY and AUTH follow it
with ``[u32be length][bytes]``. MPUB's body is ``[u32be count]`` then ``count`` times
``[u32be len][bytes]``. Every encoder checks what nsqd would reject, so the caller gets a
clear error before anything is written instead of a fatal error frame afterwards.
"""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .constants import (
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_MSG_SIZE,
    DEFAULT_MAX_RDY_COUNT,
    DEFAULT_MAX_REQ_TIMEOUT_MS,
    MESSAGE_ID_LENGTH,
)
from .errors import NSQValueError
from .names import validate_channel_name, validate_topic_name
from .value_checks import check_delay_ms, is_int

_U32 = struct.Struct(">I")
_pack_u32 = _U32.pack

NOP = b"NOP\n"
CLS = b"CLS\n"


_TOPICS: dict[str, bytes] = {}


def encode_topic(topic: str) -> bytes:
    """A validated topic, encoded (cached: publishers reuse a handful of topics). Anything
    but a valid name, unhashable values included, is an :class:`NSQValueError`."""
    try:
        return _TOPICS[topic]
    except (KeyError, TypeError):
        name = validate_topic_name(topic).encode()
        if len(_TOPICS) < 4096:
            _TOPICS[topic] = name
        return name


def _check_body(body: object, max_msg_size: int, what: str = "message") -> bytes:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise NSQValueError(f"{what} body must be bytes, got {type(body).__name__}")
    size = len(body)
    if size == 0:
        raise NSQValueError(f"{what} body is empty: nsqd rejects empty messages")
    if size > max_msg_size:
        raise NSQValueError(
            f"{what} body is {size} bytes, over the max message size of {max_msg_size} bytes "
            "(nsqd --max-msg-size)"
        )
    return bytes(body)


def _check_id(message_id: bytes) -> bytes:
    if not isinstance(message_id, bytes) or len(message_id) != MESSAGE_ID_LENGTH:
        raise NSQValueError(
            f"message id must be {MESSAGE_ID_LENGTH} bytes as nsqd sent it, got {message_id!r}"
        )
    return message_id


_IDENTIFIES: dict[tuple[tuple[str, Any], ...], bytes] = {}


def encode_identify(fields: Mapping[str, Any]) -> bytes:
    """``IDENTIFY\\n[len][json]``: compact JSON, keys in the order given. Cached: a
    client sends the same IDENTIFY on every connection it opens."""
    try:
        key = tuple(fields.items())
        return _IDENTIFIES[key]
    except (KeyError, TypeError):
        pass
    body = json.dumps(dict(fields), separators=(",", ":")).encode()
    command = b"IDENTIFY\n" + _pack_u32(len(body)) + body
    with contextlib.suppress(TypeError):  # an unhashable value: not cached
        if len(_IDENTIFIES) < 256:
            _IDENTIFIES[key] = command
    return command


def encode_auth(secret: bytes | str) -> bytes:
    """``AUTH\\n[len][secret]``. The secret never appears in an error message."""
    data = secret.encode() if isinstance(secret, str) else bytes(secret)
    if not data:
        raise NSQValueError("AUTH secret is empty")
    return b"AUTH\n" + _pack_u32(len(data)) + data


def encode_sub(topic: str, channel: str) -> bytes:
    validate_topic_name(topic)
    validate_channel_name(channel)
    return f"SUB {topic} {channel}\n".encode()


def encode_rdy(count: int, max_rdy_count: int = DEFAULT_MAX_RDY_COUNT) -> bytes:
    if not is_int(count) or not 0 <= count <= max_rdy_count:
        raise NSQValueError(
            f"RDY count {count!r} is out of range 0-{max_rdy_count} (nsqd --max-rdy-count)"
        )
    return b"RDY %d\n" % count


def encode_fin(message_id: bytes) -> bytes:
    return b"FIN " + _check_id(message_id) + b"\n"


def encode_fin_many(message_ids: Sequence[bytes]) -> bytes:
    """FIN for every id, as one buffer (nsqd handles a batch of FINs far faster than FINs
    written one by one)."""
    if not message_ids:
        return b""
    if set(map(len, message_ids)) != {MESSAGE_ID_LENGTH}:
        for message_id in message_ids:
            _check_id(message_id)
    return b"FIN " + b"\nFIN ".join(message_ids) + b"\n"


def encode_req(
    message_id: bytes, delay_ms: int = 0, max_delay_ms: int = DEFAULT_MAX_REQ_TIMEOUT_MS
) -> bytes:
    # nsqd silently clamps a REQ delay above --max-req-timeout; we refuse instead.
    check_delay_ms(delay_ms, max_delay_ms, "REQ delay")
    return b"REQ " + _check_id(message_id) + b" %d\n" % delay_ms


def encode_touch(message_id: bytes) -> bytes:
    return b"TOUCH " + _check_id(message_id) + b"\n"


def encode_pub(topic: str, body: bytes, max_msg_size: int = DEFAULT_MAX_MSG_SIZE) -> bytes:
    try:
        name = _TOPICS[topic]  # encode_topic's cache, without the call
    except (KeyError, TypeError):
        name = encode_topic(topic)
    size = len(body) if type(body) is bytes else -1
    if not 0 < size <= max_msg_size:
        body = _check_body(body, max_msg_size)
        size = len(body)
    return b"PUB %s\n%s%s" % (name, _pack_u32(size), body)  # one allocation


def encode_dpub(
    topic: str,
    delay_ms: int,
    body: bytes,
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
    max_delay_ms: int = DEFAULT_MAX_REQ_TIMEOUT_MS,
) -> bytes:
    name = encode_topic(topic)
    check_delay_ms(delay_ms, max_delay_ms)
    data = _check_body(body, max_msg_size)
    return b"DPUB %s %d\n" % (name, delay_ms) + _pack_u32(len(data)) + data


def mpub_body_size(bodies: Sequence[bytes]) -> int:
    """Size of MPUB's body for ``bodies``: count prefix plus a length prefix per message."""
    return 4 + 4 * len(bodies) + sum(map(len, bodies))


def encode_mpub(
    topic: str,
    bodies: Sequence[bytes],
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> bytes:
    """One MPUB frame. Use :func:`split_mpub` first when the batch may exceed a limit."""
    name = encode_topic(topic)
    if isinstance(bodies, (bytes, str)) or not isinstance(bodies, Sequence):
        raise NSQValueError(f"MPUB messages must be a list of bodies, got {type(bodies).__name__}")
    if not bodies:
        raise NSQValueError("MPUB needs at least one message")
    items = list(bodies)
    sizes = _sizes_within(items, max_msg_size)
    if sizes and 4 + 4 * len(sizes) + sum(sizes) <= max_body_size:
        frame = _mpub_frame(name, items, sizes)
        if frame is not None:
            return frame
    items, sizes = _checked_sizes(items, max_msg_size, "MPUB message")
    total = 4 + 4 * len(sizes) + sum(sizes)
    if total > max_body_size:
        raise NSQValueError(
            f"MPUB body is {total} bytes, over the max body size of {max_body_size} bytes "
            "(nsqd --max-body-size); split the batch with split_mpub()"
        )
    frame = _mpub_frame(name, items, sizes)
    assert frame is not None  # checked bodies always make a frame
    return frame


def split_mpub(
    bodies: Iterable[bytes],
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> list[list[bytes]]:
    """Split ``bodies`` into as few MPUB batches as fit ``max_body_size``, in order.

    Every body is checked first (non-empty, at most ``max_msg_size``, and small enough to
    travel alone in an MPUB), so a bad message is reported before any batch is sent.
    """
    items = _batch_list(bodies)
    if not items:
        return []
    items, sizes = _checked_sizes(items, max_msg_size, "message")
    return [items[start:stop] for start, stop in _batch_bounds(sizes, max_body_size)]


def encode_mpub_batches(
    topic: str,
    bodies: Iterable[bytes],
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> list[tuple[int, bytes]]:
    """``bodies`` as as few MPUB frames as fit the limits: ``(message count, frame)`` pairs.
    Every body is checked before any frame is built (refused as :func:`split_mpub` does).

    The publisher's hot path: each body's size is taken once, in C, and a batch of bytes
    is checked by building its frames (see :func:`_mpub_frame`); only a batch that fails
    that is checked body by body, to name the bad one.
    """
    name = encode_topic(topic)
    items = _batch_list(bodies)
    if not items:
        return []
    sizes = _sizes_within(items, max_msg_size)
    if sizes:
        frames = _mpub_frames(name, items, sizes, max_body_size)
        if frames is not None:
            return frames
    items, sizes = _checked_sizes(items, max_msg_size, "message")
    frames = _mpub_frames(name, items, sizes, max_body_size)
    assert frames is not None  # checked bodies always make frames
    return frames


def _mpub_frames(
    name: bytes, items: list[bytes], sizes: list[int], max_body_size: int
) -> list[tuple[int, bytes]] | None:
    bounds = _batch_bounds(sizes, max_body_size)
    if len(bounds) == 1:
        frame = _mpub_frame(name, items, sizes)
        return None if frame is None else [(len(items), frame)]
    frames = []
    for start, stop in bounds:
        frame = _mpub_frame(name, items[start:stop], sizes[start:stop])
        if frame is None:
            return None
        frames.append((stop - start, frame))
    return frames


def _sizes_within(items: list[bytes], max_msg_size: int) -> list[int]:
    """Each body's size (one pass in C), or ``[]`` when one has no size or is over the
    limit: the caller then checks them one by one, naming the bad one."""
    try:
        sizes = list(map(len, items))
    except TypeError:
        return []
    if sizes and max(sizes) > max_msg_size:
        return []
    return sizes


def _batch_list(bodies: Iterable[bytes]) -> list[bytes]:
    """``bodies`` as a list, or the error for something that is not a batch."""
    if type(bodies) is list:
        return bodies
    if isinstance(bodies, (bytes, bytearray, memoryview, str)) or not isinstance(bodies, Iterable):
        raise NSQValueError(
            f"MPUB messages must be a list of bodies, got {type(bodies).__name__}"
            + (" (a single message)" if isinstance(bodies, (bytes, str)) else "")
        )
    return list(bodies)


def _checked_sizes(
    items: list[bytes], max_msg_size: int, what: str
) -> tuple[list[bytes], list[int]]:
    """Every body checked (non-empty bytes within the limit; bytearray and memoryview
    copied to bytes), naming the first bad one ``f"{what} {index}"``; with their sizes."""
    checked = [_check_body(b, max_msg_size, f"{what} {i}") for i, b in enumerate(items)]
    return checked, list(map(len, checked))


def _batch_bounds(sizes: list[int], max_body_size: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each MPUB frame, as few as fit ``max_body_size``."""
    if 4 + 4 * len(sizes) + sum(sizes) <= max_body_size:
        return [(0, len(sizes))]
    largest = max(sizes)
    if largest > max_body_size - 8:
        raise NSQValueError(
            f"message {sizes.index(largest)} is {largest} bytes; with MPUB framing it "
            f"exceeds the max body size of {max_body_size} bytes (nsqd --max-body-size)"
        )
    bounds = []
    start, size = 0, 4
    for index, body_size in enumerate(sizes):
        n = 4 + body_size
        if size + n > max_body_size:
            bounds.append((start, index))
            start, size = index, 4
        size += n
    bounds.append((start, len(sizes)))
    return bounds


#: The 4-byte length prefix of each body size seen so far: MPUB writes one per message,
#: and packing each one costs more than the rest of its framing. Bounded (a size past
#: the bound is packed each time); never 0 (an empty body is refused).
_PREFIXES: dict[int, bytes] = {}
_MAX_PREFIXES = 8192


def _length_prefix(size: int) -> bytes:
    prefix = _PREFIXES.get(size)
    if prefix is None:
        prefix = _pack_u32(size)
        if len(_PREFIXES) < _MAX_PREFIXES:
            _PREFIXES[size] = prefix
    return prefix


def _mpub_frame(name: bytes, items: list[bytes], sizes: list[int]) -> bytes | None:
    """One MPUB frame of ``items`` (``sizes``: their lengths), built by one join over
    ``[head, prefix, body, prefix, body, ...]``; None when a body is not what its size
    said: empty, or not bytes-like (the join fails), or a buffer whose length is not its
    size in bytes (the frame comes out the wrong length). The caller then checks the
    bodies one by one, so checking a batch of good bytes costs no pass of its own."""
    count = len(items)
    body_size = 4 + 4 * count + sum(sizes)
    parts: list[Any] = [None] * (2 * count + 1)
    parts[0] = head = b"MPUB %s\n%s%s" % (name, _pack_u32(body_size), _pack_u32(count))
    try:
        parts[1::2] = map(_PREFIXES.__getitem__, sizes)
    except KeyError:
        if 0 in sizes:
            return None
        parts[1::2] = map(_length_prefix, sizes)
    parts[2::2] = items
    try:
        frame = b"".join(parts)
    except TypeError:
        return None
    if len(frame) != len(head) + body_size - 4:
        return None
    return frame
