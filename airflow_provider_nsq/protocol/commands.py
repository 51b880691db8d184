"""Encoders for the commands a client sends (tests/conformance/transcripts/FACTS.md section 1).

A command is a text line ending in ``\\n``; PUB, DPUB, MPUB, IDENTIFY and AUTH follow it
with ``[u32be length][bytes]``. MPUB's body is ``[u32be count]`` then ``count`` times
``[u32be len][bytes]``. Every encoder checks what nsqd would reject, so the caller gets a
clear error before anything is written instead of a fatal error frame afterwards.
"""

from __future__ import annotations

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


def check_delay_ms(delay_ms: object, max_delay_ms: int, what: str = "DPUB delay") -> int:
    """Validate a delay in milliseconds: an int in ``0..max_delay_ms``, never clamped."""
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int):
        raise NSQValueError(f"{what} must be whole milliseconds (int), got {delay_ms!r}")
    if not 0 <= delay_ms <= max_delay_ms:
        raise NSQValueError(
            f"{what} {delay_ms} ms is out of range 0-{max_delay_ms} ms (nsqd --max-req-timeout)"
        )
    return delay_ms


def _check_id(message_id: bytes) -> bytes:
    if not isinstance(message_id, bytes) or len(message_id) != MESSAGE_ID_LENGTH:
        raise NSQValueError(
            f"message id must be {MESSAGE_ID_LENGTH} bytes as nsqd sent it, got {message_id!r}"
        )
    return message_id


def encode_identify(fields: Mapping[str, Any]) -> bytes:
    """``IDENTIFY\\n[len][json]``: compact JSON, keys in the order given."""
    body = json.dumps(dict(fields), separators=(",", ":")).encode()
    return b"IDENTIFY\n" + _pack_u32(len(body)) + body


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
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= max_rdy_count:
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
    name = encode_topic(topic)
    if type(body) is not bytes or not 0 < len(body) <= max_msg_size:
        body = _check_body(body, max_msg_size)
    return b"PUB " + name + b"\n" + _pack_u32(len(body)) + body


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
    bodies = _checked_bodies(bodies, max_msg_size, "MPUB message")
    total = mpub_body_size(bodies)
    if total > max_body_size:
        raise NSQValueError(
            f"MPUB body is {total} bytes, over the max body size of {max_body_size} bytes "
            "(nsqd --max-body-size); split the batch with split_mpub()"
        )
    return _encode_mpub_checked(name, bodies, total)


def _encode_mpub_checked(name: bytes, bodies: Sequence[bytes], total: int) -> bytes:
    parts = [b"MPUB " + name + b"\n" + _pack_u32(total) + _pack_u32(len(bodies))]
    append = parts.append
    for body in bodies:
        append(_pack_u32(len(body)))
        append(body)
    return b"".join(parts)


def _checked_bodies(bodies: Sequence[bytes], max_msg_size: int, what: str) -> Sequence[bytes]:
    """``bodies`` if every one is non-empty bytes within the limit (checked with C-level
    calls); otherwise the per-message check that names the bad one."""
    sizes = list(map(len, bodies))
    if (
        sizes
        and min(sizes) > 0
        and max(sizes) <= max_msg_size
        and set(map(type, bodies)) == {bytes}
    ):
        return bodies
    return [_check_body(b, max_msg_size, f"{what} {i}") for i, b in enumerate(bodies)]


def split_mpub(
    bodies: Iterable[bytes],
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> list[list[bytes]]:
    """Split ``bodies`` into as few MPUB batches as fit ``max_body_size``, in order.

    Every body is checked first (non-empty, at most ``max_msg_size``, and small enough to
    travel alone in an MPUB), so a bad message is reported before any batch is sent.
    """
    if isinstance(bodies, list):
        items = bodies
    elif isinstance(bodies, (bytes, bytearray, memoryview, str)) or not isinstance(
        bodies, Iterable
    ):
        raise NSQValueError(
            f"MPUB messages must be a list of bodies, got {type(bodies).__name__}"
            + (" (a single message)" if isinstance(bodies, (bytes, str)) else "")
        )
    else:
        items = list(bodies)
    items = list(_checked_bodies(items, max_msg_size, "message"))
    if not items:
        return []
    largest = max(map(len, items))
    if largest > max_body_size - 8:
        index = next(i for i, b in enumerate(items) if len(b) == largest)
        raise NSQValueError(
            f"message {index} is {largest} bytes; with MPUB framing it exceeds the max body "
            f"size of {max_body_size} bytes (nsqd --max-body-size)"
        )
    if mpub_body_size(items) <= max_body_size:
        return [items]
    batches: list[list[bytes]] = []
    start, size = 0, 4
    for index, body in enumerate(items):
        n = 4 + len(body)
        if size + n > max_body_size:
            batches.append(items[start:index])
            start, size = index, 4
        size += n
    batches.append(items[start:])
    return batches


def encode_mpub_batches(
    topic: str,
    bodies: Iterable[bytes],
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> list[tuple[int, bytes]]:
    """``bodies`` as as few MPUB frames as fit the limits: ``(message count, frame)`` pairs.
    Every body is checked once, before any frame is built."""
    name = encode_topic(topic)
    return [
        (len(batch), _encode_mpub_checked(name, batch, mpub_body_size(batch)))
        for batch in split_mpub(bodies, max_msg_size, max_body_size)
    ]
