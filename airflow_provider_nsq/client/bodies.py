"""Turning user values into message bodies."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..protocol.errors import NSQValueError

__all__ = ["encode_bodies", "encode_body"]

# Compact, strict JSON; one encoder for every call (json.dumps makes one per call when
# given options).
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_body(value: Any, what: str = "message") -> bytes:
    """bytes as they are, str as UTF-8, dict/list as compact, strict JSON (UTF-8).

    Strict means what every consumer can parse: no ``NaN`` or ``Infinity`` (Python's
    json writes them; Go's encoding/json and most others refuse them), and text that
    is valid UTF-8 (no lone surrogates). Anything else is an :class:`NSQValueError`
    naming ``what`` (e.g. ``"message 3"`` in a batch), never a bare TypeError,
    RecursionError or UnicodeEncodeError.
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return _utf8(value, what, "")
    if isinstance(value, (dict, list)):
        try:
            text = _JSON.encode(value)
        except RecursionError:
            raise NSQValueError(
                f"{what} is nested too deeply to be written as JSON; flatten it or send bytes"
            ) from None
        except ValueError as exc:
            hint = " (JSON has no NaN or Infinity)" if "float" in str(exc) else ""
            raise NSQValueError(f"{what} cannot be written as JSON: {exc}{hint}") from None
        except TypeError as exc:
            raise NSQValueError(f"{what} is not JSON-serialisable: {exc}") from None
        return _utf8(text, what, " of its JSON text")
    raise NSQValueError(
        f"{what} must be str, bytes, or a JSON-serialisable dict/list, got {type(value).__name__}"
    )


def encode_bodies(messages: Iterable[Any]) -> list[bytes]:
    """:func:`encode_body` for each message of a batch; an error names the message by
    its index (``message 3``). A batch of bytes passes as it is, at no cost per message."""
    bodies = list(messages)
    if set(map(type, bodies)) <= {bytes}:  # one pass in C
        return bodies
    return [encode_body(m, f"message {i}") for i, m in enumerate(bodies)]


def _utf8(text: str, what: str, where: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise NSQValueError(
            f"{what} is not valid Unicode text: {bad!r} at position {exc.start}{where} is a "
            "lone surrogate, which UTF-8 cannot encode; fix the text or send bytes"
        ) from None
