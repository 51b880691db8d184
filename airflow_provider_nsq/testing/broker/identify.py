"""IDENTIFY: decoding the client's JSON as Go's encoding/json would, and nsqd's answer.

FACTS.md section 4: keys match case-insensitively, unknown keys are ignored, a value of
the wrong type is ``E_BAD_BODY IDENTIFY failed to decode JSON body``; the JSON response
has exactly nsqd's keys, in nsqd's order, written by :func:`go_json`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import ClientError

# field -> Go type ("s" string, "b" bool, "i" int64, "i32" int32)
_FIELDS = {
    "client_id": "s",
    "hostname": "s",
    "heartbeat_interval": "i",
    "output_buffer_size": "i",
    "output_buffer_timeout": "i",
    "feature_negotiation": "b",
    "tls_v1": "b",
    "deflate": "b",
    "deflate_level": "i",
    "snappy": "b",
    "sample_rate": "i32",
    "user_agent": "s",
    "msg_timeout": "i",
}


@dataclass
class IdentifyData:
    client_id: str = ""
    hostname: str = ""
    heartbeat_interval: int = 0
    output_buffer_size: int = 0
    output_buffer_timeout: int = 0
    feature_negotiation: bool = False
    tls_v1: bool = False
    deflate: bool = False
    deflate_level: int = 0
    snappy: bool = False
    sample_rate: int = 0
    user_agent: str = ""
    msg_timeout: int = 0


def _bad_json() -> ClientError:
    return ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN / Infinity are not JSON for Go


def decode_identify(body: bytes) -> IdentifyData:
    try:
        doc = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError):
        raise _bad_json() from None
    data = IdentifyData()
    if doc is None:  # Go: unmarshalling null into a struct is a no-op
        return data
    if not isinstance(doc, dict):
        raise _bad_json()
    for key, value in doc.items():
        name = key.lower()
        kind = _FIELDS.get(name)
        if kind is None or value is None:
            continue
        if kind == "s":
            ok = isinstance(value, str)
        elif kind == "b":
            ok = isinstance(value, bool)
        else:
            bits = 31 if kind == "i32" else 63
            ok = (
                isinstance(value, int)
                and not isinstance(value, bool)
                and -(1 << bits) <= value < (1 << bits)
            )
        if not ok:
            raise _bad_json()
        setattr(data, name, value)
    return data
