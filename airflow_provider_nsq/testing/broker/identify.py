"""IDENTIFY: decoding the client's JSON as Go's encoding/json would, the settings it
negotiates, and nsqd's answer.

docs/nsqd-facts.md section 4: keys match case-insensitively, unknown
keys are ignored, a value of the wrong type is
``E_BAD_BODY IDENTIFY failed to decode JSON body``; the JSON response has exactly nsqd's
keys, in nsqd's order, written by :func:`go_json`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from airflow_provider_nsq.protocol.value_checks import is_bool, is_int

from .errors import ClientError
from .options import BrokerOptions

#: Before IDENTIFY: ClientTimeout (60 s) / 2 (docs/nsqd-facts.md section 7).
DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000
DEFAULT_OUTPUT_BUFFER_SIZE = 16 * 1024

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
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
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
            ok = is_bool(value)
        else:
            bits = 31 if kind == "i32" else 63
            ok = is_int(value) and -(1 << bits) <= value < (1 << bits)
        if not ok:
            raise _bad_json()
        setattr(data, name, value)
    return data


@dataclass
class ClientSettings:
    """What a client's IDENTIFY negotiated (nsqd's clientV2.Identify), and the values
    nsqd's message pump took from the first IDENTIFY only (the ``pump_`` fields)."""

    client_id: str = ""
    hostname: str = ""
    user_agent: str = ""
    heartbeat_interval: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    output_buffer_size: int = DEFAULT_OUTPUT_BUFFER_SIZE
    output_buffer_timeout: int = 250
    sample_rate: int = 0
    msg_timeout: int = 60_000
    identified: bool = False
    pump_output_buffer_timeout: int = 250
    pump_sample_rate: int = 0
    pump_msg_timeout: int = 60_000

    @classmethod
    def defaults(cls, opts: BrokerOptions) -> ClientSettings:
        """A client's settings before any IDENTIFY."""
        timeout = opts.output_buffer_timeout
        return cls(
            output_buffer_timeout=timeout,
            msg_timeout=opts.msg_timeout,
            pump_output_buffer_timeout=timeout,
            pump_msg_timeout=opts.msg_timeout,
        )

    def apply(self, data: IdentifyData, opts: BrokerOptions) -> str | None:
        """Take an IDENTIFY's values; returns nsqd's error text for a bad one."""
        self.client_id = data.client_id
        self.hostname = data.hostname
        self.user_agent = data.user_agent
        hb = data.heartbeat_interval
        if hb == -1:
            self.heartbeat_interval = 0
        elif hb != 0:
            if not 1000 <= hb <= opts.max_heartbeat_interval:
                return f"heartbeat interval ({hb}) is invalid"
            self.heartbeat_interval = hb
        obt = data.output_buffer_timeout
        if obt == -1:
            self.output_buffer_timeout = 0
        elif obt != 0:
            if not opts.min_output_buffer_timeout <= obt <= opts.max_output_buffer_timeout:
                return f"output buffer timeout ({obt}) is invalid"
            self.output_buffer_timeout = obt
        obs = data.output_buffer_size
        if obs == -1:
            self.output_buffer_size = 1  # unbuffered, and no flush timer
            self.output_buffer_timeout = 0
        elif obs != 0:
            if not 64 <= obs <= opts.max_output_buffer_size:
                return f"output buffer size ({obs}) is invalid"
            self.output_buffer_size = obs
        if not 0 <= data.sample_rate <= 99:
            return f"sample rate ({data.sample_rate}) is invalid"
        self.sample_rate = data.sample_rate
        mt = data.msg_timeout
        if mt != 0:
            if not 1000 <= mt <= opts.max_msg_timeout:
                return f"msg timeout ({mt}) is invalid"
            self.msg_timeout = mt
        if not self.identified:
            # nsqd's message pump takes only the first IDENTIFY into account.
            self.identified = True
            self.pump_output_buffer_timeout = self.output_buffer_timeout
            if self.sample_rate > 0:
                self.pump_sample_rate = self.sample_rate
            self.pump_msg_timeout = self.msg_timeout
        return None
