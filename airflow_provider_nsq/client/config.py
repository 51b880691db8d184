"""``ClientConfig``: everything needed to open one connection to nsqd.

Plain data, validated on construction so a bad value fails with its name before any
socket is opened. Server limits (``max_msg_size`` and friends) are nsqd's defaults; set
them when nsqd runs with other flags, so the client can refuse oversized input before
sending instead of nsqd closing the connection.
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import __version__
from ..protocol.constants import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_MSG_SIZE,
    DEFAULT_MAX_REQ_TIMEOUT_MS,
    MIN_HEARTBEAT_INTERVAL_MS,
    MIN_MSG_TIMEOUT_MS,
    MIN_OUTPUT_BUFFER_SIZE,
    MIN_OUTPUT_BUFFER_TIMEOUT_MS,
)
from ..protocol.errors import NSQValueError
from .address import DEFAULT_NSQD_TCP_PORT, format_address, parse_address

Compression = Literal["none", "snappy", "deflate"]
COMPRESSIONS: tuple[str, ...] = ("none", "snappy", "deflate")

DEFAULT_USER_AGENT = f"airflow-provider-nsq/{__version__}"


def _default_client_id() -> str:
    return socket.gethostname().split(".")[0]


def _default_hostname() -> str:
    return socket.gethostname()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ClientConfig:
    """Connection settings for one nsqd (TCP protocol).

    Durations that nsqd negotiates are in nsqd's unit (ms); socket timeouts are seconds.
    ``None`` for a negotiable value means "nsqd's default" and leaves it out of IDENTIFY.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_NSQD_TCP_PORT
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    client_id: str = field(default_factory=_default_client_id)
    hostname: str = field(default_factory=_default_hostname)
    user_agent: str = DEFAULT_USER_AGENT
    feature_negotiation: bool = True
    heartbeat_interval_ms: int | None = None  # -1 disables (publish-only connections)
    msg_timeout_ms: int | None = None
    output_buffer_size: int | None = None  # -1 = unbuffered delivery
    output_buffer_timeout_ms: int | None = None
    sample_rate: int | None = None
    tls: bool = False
    tls_verify: bool = True
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_server_name: str | None = None  # defaults to host
    auth_secret: str | None = field(default=None, repr=False)
    compression: Compression = "none"
    deflate_level: int = 6
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    max_req_timeout_ms: int = DEFAULT_MAX_REQ_TIMEOUT_MS

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> NSQValueError:
            value = getattr(self, name)
            return NSQValueError(f"ClientConfig.{name}={value!r} is invalid: {why}")

        if not isinstance(self.host, str) or not self.host:
            raise bad("host", "expected a host name or IP address")
        if not _is_int(self.port) or not 0 < self.port < 65536:
            raise bad("port", "expected a TCP port 1-65535 (nsqd's TCP port, default 4150)")
        for name in ("connect_timeout", "read_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise bad(name, "expected a number of seconds > 0")
        for name in ("client_id", "hostname", "user_agent"):
            if not isinstance(getattr(self, name), str):
                raise bad(name, "expected a string")
        hb = self.heartbeat_interval_ms
        if hb is not None and not (
            _is_int(hb) and (hb in (-1, 0) or hb >= MIN_HEARTBEAT_INTERVAL_MS)
        ):
            raise bad(
                "heartbeat_interval_ms",
                f"expected -1 (off), 0 (server default) or >= {MIN_HEARTBEAT_INTERVAL_MS} ms",
            )
        mt = self.msg_timeout_ms
        if mt is not None and not (_is_int(mt) and (mt == 0 or mt >= MIN_MSG_TIMEOUT_MS)):
            raise bad(
                "msg_timeout_ms", f"expected 0 (server default) or >= {MIN_MSG_TIMEOUT_MS} ms"
            )
        obs = self.output_buffer_size
        if obs is not None and not (
            _is_int(obs) and (obs in (-1, 0) or obs >= MIN_OUTPUT_BUFFER_SIZE)
        ):
            raise bad("output_buffer_size", f"expected -1, 0 or >= {MIN_OUTPUT_BUFFER_SIZE} bytes")
        obt = self.output_buffer_timeout_ms
        if obt is not None and not (
            _is_int(obt) and (obt in (-1, 0) or obt >= MIN_OUTPUT_BUFFER_TIMEOUT_MS)
        ):
            raise bad(
                "output_buffer_timeout_ms",
                f"expected -1, 0 or >= {MIN_OUTPUT_BUFFER_TIMEOUT_MS} ms",
            )
        sr = self.sample_rate
        if sr is not None and not (_is_int(sr) and 0 <= sr <= 99):
            raise bad("sample_rate", "expected 0 (every message) to 99 (percent)")
        if self.compression not in COMPRESSIONS:
            raise bad("compression", f"expected one of {', '.join(COMPRESSIONS)}")
        if not _is_int(self.deflate_level) or not 1 <= self.deflate_level <= 9:
            raise bad("deflate_level", "expected 1-9")
        for name in ("max_msg_size", "max_body_size", "max_req_timeout_ms"):
            if not _is_int(getattr(self, name)) or getattr(self, name) <= 0:
                raise bad(name, "expected a positive integer")
        if (self.tls or self.compression != "none") and not self.feature_negotiation:
            raise bad("feature_negotiation", "TLS and compression need feature negotiation")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise NSQValueError(
                "ClientConfig.tls_cert_file and tls_key_file must be given together"
            )
        if self.auth_secret is not None and not isinstance(self.auth_secret, str):
            raise NSQValueError("ClientConfig.auth_secret must be a string")

    @property
    def address(self) -> str:
        """``host:port`` (``[v6]:port`` for an IPv6 host)."""
        return format_address(self.host, self.port)

    @property
    def effective_heartbeat_interval_ms(self) -> int:
        """The interval nsqd will use: -1 when disabled."""
        hb = self.heartbeat_interval_ms
        return hb if hb else DEFAULT_HEARTBEAT_INTERVAL_MS

    def replace(self, **changes: Any) -> ClientConfig:
        return dataclasses.replace(self, **changes)

    def for_nsqd(self, address: str, what: str = "nsqd address") -> ClientConfig:
        """These settings for the nsqd at ``address`` (``host:port``; a bare host means
        port 4150): how one connection's settings reach every nsqd of a topology."""
        host, port = parse_address(address, DEFAULT_NSQD_TCP_PORT, what)
        return self.replace(host=host, port=port)

    def identify_fields(self) -> dict[str, Any]:
        """The IDENTIFY body, in a fixed key order (the one the recordings use)."""
        fields: dict[str, Any] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "user_agent": self.user_agent,
        }
        if self.feature_negotiation:
            fields["feature_negotiation"] = True
        optional = (
            ("output_buffer_size", self.output_buffer_size),
            ("output_buffer_timeout", self.output_buffer_timeout_ms),
            ("heartbeat_interval", self.heartbeat_interval_ms),
            ("sample_rate", self.sample_rate),
            ("msg_timeout", self.msg_timeout_ms),
        )
        for key, value in optional:
            if value is not None:
                fields[key] = value
        if self.tls:
            fields["tls_v1"] = True
        if self.compression == "deflate":
            fields["deflate"] = True
            fields["deflate_level"] = self.deflate_level
        elif self.compression == "snappy":
            fields["snappy"] = True
        return fields
