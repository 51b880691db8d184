"""Turning user values into message bodies."""

from __future__ import annotations

import json
from typing import Any

from ..protocol.errors import NSQValueError


def encode_body(value: Any) -> bytes:
    """bytes as they are, str as UTF-8, dict/list as compact JSON (UTF-8)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (dict, list)):
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise NSQValueError(f"message is not JSON-serialisable: {exc}") from None
    raise NSQValueError(
        f"message must be str, bytes, or a JSON-serialisable dict/list, got {type(value).__name__}"
    )
