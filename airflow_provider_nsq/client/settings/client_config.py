"""``ClientConfig``: everything needed to open one connection to nsqd.

Plain data, validated on construction so a bad value fails with its name before any
socket is opened. Server limits (``max_msg_size`` and friends) are nsqd's defaults; set
them when nsqd runs with other flags, so the client can refuse oversized input before
sending instead of nsqd closing the connection.
"""

from __future__ import annotations

import dataclasses
import functools
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ...protocol.constants import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_MSG_SIZE,
    DEFAULT_MAX_REQ_TIMEOUT_MS,
    MIN_HEARTBEAT_INTERVAL_MS,
    MIN_MSG_TIMEOUT_MS,
    MIN_OUTPUT_BUFFER_SIZE,
    MIN_OUTPUT_BUFFER_TIMEOUT_MS,
)
from ...protocol.errors import NSQSettingError
from ...version import __version__
from .address import DEFAULT_NSQD_TCP_PORT, format_address, parse_address
from .fields import check_fields, setting

__all__ = [
    "COMPRESSIONS",
    "DEFAULT_USER_AGENT",
    "MAX_READ_TIMEOUT_S",
    "ClientConfig",
    "Compression",
]

Compression = Literal["none", "snappy", "deflate"]
COMPRESSIONS: tuple[str, ...] = get_args(Compression)

DEFAULT_USER_AGENT = f"airflow-provider-nsq/{__version__}"
#: The longest ``read_timeout``: a frozen nsqd may cost a task at most this per command.
MAX_READ_TIMEOUT_S = 3600


def _default_client_id() -> str:
    return socket.gethostname().split(".")[0]


def _default_hostname() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class ClientConfig:
    """Connection settings for one nsqd (TCP protocol).

    Durations that nsqd negotiates are in nsqd's unit (ms); socket timeouts are seconds.
    ``None`` for a negotiable value means "nsqd's default" and leaves it out of IDENTIFY.

    Each field is described once, in its ``metadata`` (:mod:`.fields`): its checks
    here, and every place users write settings (each a
    :class:`~.fields.SettingSource`, described by its caller), come from that
    description. A field added here is taken by every such place that does not refuse it.
    """

    host: str = field(
        default="127.0.0.1",
        metadata=setting("nsqd host", "nsqd's host name or IP address.", code_only=True),
    )
    port: int = field(
        default=DEFAULT_NSQD_TCP_PORT,
        metadata=setting(
            "nsqd TCP port",
            "nsqd's TCP port (4150 by default), not its HTTP port.",
            kind="integer",
            minimum=1,
            maximum=65535,
            code_only=True,
        ),
    )
    auth_secret: str | None = field(
        default=None,
        repr=False,
        metadata=setting(
            "AUTH secret",
            "The secret sent with AUTH when nsqd runs with --auth-http-address.",
            secret=True,
        ),
    )
    tls: bool = field(
        default=False,
        metadata=setting(
            "TLS",
            "Upgrade the connection to TLS after IDENTIFY (nsqd needs --tls-cert/--tls-key).",
            kind="boolean",
        ),
    )
    tls_verify: bool = field(
        default=True,
        metadata=setting(
            "Verify TLS certificate",
            "Check nsqd's certificate and host name (default true). Turn off only for testing.",
            kind="boolean",
        ),
    )
    tls_ca_file: str | None = field(
        default=None,
        metadata=setting(
            "TLS CA file",
            "Path (on the worker) to the CA bundle that signed nsqd's certificate; "
            "empty: the system CAs.",
            placeholder="/etc/ssl/nsq/ca.pem",
        ),
    )
    tls_cert_file: str | None = field(
        default=None,
        metadata=setting(
            "TLS client certificate file",
            "Path to a client certificate, for nsqd --tls-client-auth-policy; needs the key "
            "file too.",
        ),
    )
    tls_key_file: str | None = field(
        default=None,
        metadata=setting("TLS client key file", "Path to the client certificate's private key."),
    )
    tls_server_name: str | None = field(
        default=None,
        metadata=setting(
            "TLS server name",
            "The name to verify in nsqd's certificate when it differs from the host; "
            "empty: the host.",
        ),
    )
    compression: Compression = field(
        default="none",
        metadata=setting(
            "Compression",
            "Compress the connection: none, snappy or deflate (negotiated with nsqd).",
            choices=COMPRESSIONS,
            placeholder="none",
        ),
    )
    deflate_level: int = field(
        default=6,
        metadata=setting(
            "Deflate level",
            "1-9; nsqd caps it at its --max-deflate-level (6 by default).",
            kind="integer",
            minimum=1,
            maximum=9,
        ),
    )
    heartbeat_interval_ms: int | None = field(
        default=None,
        metadata=setting(
            "Heartbeat interval (ms)",
            "How often nsqd sends heartbeats; empty: nsqd's default (30000). nsqd drops a "
            "client that is silent for two intervals.",
            kind="integer",
            minimum=MIN_HEARTBEAT_INTERVAL_MS,
            special={-1: "off", 0: "nsqd's default"},
        ),
    )
    msg_timeout_ms: int | None = field(
        default=None,
        metadata=setting(
            "Message timeout (ms)",
            "How long a delivered message may stay unanswered before nsqd redelivers it; "
            "empty: nsqd's --msg-timeout (60000).",
            kind="integer",
            minimum=MIN_MSG_TIMEOUT_MS,
            special={0: "nsqd's default"},
        ),
    )
    client_id: str = field(
        default_factory=_default_client_id,
        metadata=setting("Client ID", "Shown in nsqd's /stats; empty: the short host name."),
    )
    connect_timeout: float = field(
        default=5.0,
        metadata=setting(
            "Connect timeout (s)",
            "Seconds to open the TCP connection and finish the handshake (default 5).",
            kind="seconds",
        ),
    )
    read_timeout: float = field(
        default=30.0,
        metadata=setting(
            "Read timeout (s)",
            "Seconds to wait for nsqd's answer to a command (a publish's OK) before failing "
            "(default 30, at most 3600). Bounds what a frozen nsqd costs a task.",
            kind="seconds",
            maximum=MAX_READ_TIMEOUT_S,
        ),
    )
    max_msg_size: int = field(
        default=DEFAULT_MAX_MSG_SIZE,
        metadata=setting(
            "Max message size (bytes)",
            "nsqd's --max-msg-size (1048576); bigger bodies are refused before sending.",
            kind="integer",
            minimum=1,
        ),
    )
    max_body_size: int = field(
        default=DEFAULT_MAX_BODY_SIZE,
        metadata=setting(
            "Max body size (bytes)",
            "nsqd's --max-body-size (5242880); MPUB batches are split to fit.",
            kind="integer",
            minimum=1,
        ),
    )
    max_req_timeout_ms: int = field(
        default=DEFAULT_MAX_REQ_TIMEOUT_MS,
        metadata=setting(
            "Max defer/requeue delay (ms)",
            "nsqd's --max-req-timeout (3600000); longer DPUB delays are refused before sending.",
            kind="integer",
            minimum=1,
        ),
    )
    # Set from code only: what IDENTIFY says about the client, and nsqd's delivery tuning.
    hostname: str = field(
        default_factory=_default_hostname,
        metadata=setting("Host name", "Sent in IDENTIFY.", code_only=True),
    )
    user_agent: str = field(
        default=DEFAULT_USER_AGENT,
        metadata=setting("User agent", "Sent in IDENTIFY.", code_only=True),
    )
    feature_negotiation: bool = field(
        default=True,
        metadata=setting(
            "Feature negotiation",
            "Ask nsqd for its settings in IDENTIFY (TLS and compression need it).",
            kind="boolean",
            code_only=True,
        ),
    )
    output_buffer_size: int | None = field(
        default=None,
        metadata=setting(
            "Output buffer size (bytes)",
            "nsqd's buffer for this client's deliveries.",
            kind="integer",
            minimum=MIN_OUTPUT_BUFFER_SIZE,
            special={-1: "unbuffered", 0: "nsqd's default"},
            code_only=True,
        ),
    )
    output_buffer_timeout_ms: int | None = field(
        default=None,
        metadata=setting(
            "Output buffer timeout (ms)",
            "How long nsqd buffers deliveries before writing them.",
            kind="integer",
            minimum=MIN_OUTPUT_BUFFER_TIMEOUT_MS,
            special={-1: "off", 0: "nsqd's default"},
            code_only=True,
        ),
    )
    sample_rate: int | None = field(
        default=None,
        metadata=setting(
            "Sample rate (%)",
            "Deliver only this percentage of the channel's messages (0: every message).",
            kind="integer",
            minimum=0,
            maximum=99,
            code_only=True,
        ),
    )

    def __post_init__(self) -> None:
        check_fields(self, "ClientConfig.")
        if (self.tls or self.compression != "none") and not self.feature_negotiation:
            raise NSQSettingError(
                "feature_negotiation", "must be on for TLS and compression", "ClientConfig."
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            given = "tls_cert_file" if self.tls_key_file is None else "tls_key_file"
            missing = "tls_key_file" if self.tls_key_file is None else "tls_cert_file"
            raise NSQSettingError(
                given, f"needs {missing} too (set both together, or neither)", "ClientConfig."
            )

    # What is derived from the fields is worked out once per config (each connection a
    # config opens reads it again): cached on the frozen instance, never a field.

    @functools.cached_property
    def address(self) -> str:
        """``host:port`` (``[v6]:port`` for an IPv6 host)."""
        return format_address(self.host, self.port)

    @functools.cached_property
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

    @functools.cached_property
    def identify_fields(self) -> Mapping[str, Any]:
        """The IDENTIFY body, in a fixed key order (the one the recordings use). One
        mapping per config, shared by its connections: read it, never change it."""
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
