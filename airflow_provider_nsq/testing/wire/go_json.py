"""JSON as Go's ``encoding/json`` writes and reads it (nsqd and nsqlookupd are Go).

- :func:`go_json`: compact, UTF-8, with ``<``, ``>``, ``&``, U+2028 and U+2029 escaped,
  keys in the order given (pass them sorted where Go marshals a map).
- :func:`decode_go_struct`: ``json.Unmarshal`` into a struct of string and int fields:
  keys match case-insensitively, unknown keys and ``null`` values are ignored, a value of
  the wrong JSON type (``"4150"`` for an int, ``4150.0``, ``1e3``) is an error, and so is
  anything that is not JSON (``NaN``, trailing bytes, invalid nesting).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow_provider_nsq.protocol.value_checks import is_int

_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class GoJSONError(ValueError):
    """The bytes are not JSON Go would decode into the struct."""


def go_json(value: Any) -> bytes:
    """Compact JSON as Go's ``json.Marshal`` writes it (dict keys in the order given)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _ESCAPES:
        if raw in text:
            text = text.replace(raw, escaped)
    return text.encode()


def _reject_constant(name: str) -> Any:
    raise GoJSONError(f"{name} is not JSON")


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in order: Go decodes a repeated key twice."""


def _go_string(value: str) -> str:
    # Go decodes a lone surrogate escape ("\ud800") to U+FFFD; Python keeps it, and it
    # could not be encoded back to UTF-8 later.
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    return value


def decode_go_struct(body: bytes, fields: Mapping[str, type]) -> dict[str, Any]:
    """Decode ``body`` as Go decodes it into a struct whose JSON fields are ``fields``
    (lowercase names to ``str`` or ``int``). Returns only the fields present (non-null).

    :raises GoJSONError: when Go's decoder would return an error.
    """
    try:
        # Go replaces invalid UTF-8 with U+FFFD instead of failing.
        doc = json.loads(
            body.decode("utf-8", "replace"),
            parse_constant=_reject_constant,
            object_pairs_hook=_Pairs,
        )
    except (ValueError, RecursionError) as exc:
        raise GoJSONError(f"invalid JSON: {exc}") from None
    if doc is None:  # Go: unmarshalling null into a struct is a no-op
        return {}
    if not isinstance(doc, _Pairs):
        raise GoJSONError(f"cannot unmarshal {type(doc).__name__} into a struct")
    out: dict[str, Any] = {}
    for key, value in doc:
        # Go matches keys case-insensitively (with its Unicode folds for 's' and 'k').
        name = key.lower().replace("\u017f", "s")
        kind = fields.get(name)
        if kind is None or value is None:
            continue
        if kind is str:
            if not isinstance(value, str):
                raise GoJSONError(f"{key}: expected a string, got {value!r}")
            out[name] = _go_string(value)
        elif kind is int:
            if not is_int(value) or not _INT64[0] <= value <= _INT64[1]:
                raise GoJSONError(f"{key}: expected an integer, got {value!r}")
            out[name] = value
        else:  # pragma: no cover - a programming error in the caller's field table
            raise TypeError(f"unsupported field type {kind!r}")
    return out
