"""The broker's settings, under nsqd 1.3.0's flag names
(docs/nsqd-facts.md section 6).

Python keyword arguments use underscores (``max_msg_size``); durations are int
milliseconds (nsqd's flags take Go durations, the CLI accepts both).
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_nsq.client.settings.address import DEFAULT_LOOKUPD_TCP_PORT, parse_address
from airflow_provider_nsq.protocol.constants import (
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_DEFLATE_LEVEL,
    DEFAULT_MAX_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_MSG_SIZE,
    DEFAULT_MAX_MSG_TIMEOUT_MS,
    DEFAULT_MAX_OUTPUT_BUFFER_SIZE,
    DEFAULT_MAX_RDY_COUNT,
    DEFAULT_MAX_REQ_TIMEOUT_MS,
    DEFAULT_MSG_TIMEOUT_MS,
    DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS,
    MAX_OUTPUT_BUFFER_TIMEOUT_MS,
    MIN_OUTPUT_BUFFER_TIMEOUT_MS,
)

#: The version the broker reports in IDENTIFY and /stats: the nsqd it imitates.
NSQD_VERSION = "1.3.0"

#: nsqd spills to disk past --mem-queue-size (default 10000). This broker has no disk, so
#: the flag is a hard bound on each queue (a channel's queued + deferred messages, a
#: topic's messages waiting for a first channel): a publish that would pass it is refused
#: whole with a fatal ``E_PUB_FAILED`` / ``E_MPUB_FAILED`` / ``E_DPUB_FAILED`` (HTTP: 503),
#: so memory stays bounded when producers outpace consumers. The default is larger than
#: nsqd's so that benchmarks and tests that publish a burst before consuming still work.
#: See docs/testing.md.
DEFAULT_MEM_QUEUE_SIZE = 1_000_000

#: An authorizer is called as ``authorizer(secret, remote_ip, tls, common_name)`` and
#: returns an nsqd auth-server answer: ``{"ttl": s, "identity": .., "identity_url": ..,
#: "authorizations": [{"topic": re, "channels": [re, ..], "permissions": [..]}]}``, or
#: raises to refuse (the client gets ``E_AUTH_FAILED AUTH failed``).
Authorizer = Callable[[str, str, bool, str], Mapping[str, Any]]

_TLS_REQUIRED_VALUES = {False: "false", True: "true", "false": "false", "true": "true"}
_TLS_POLICIES = ("", "require", "require-verify")
_TLS_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


@dataclass
class BrokerOptions:
    """Every setting of the embedded broker; defaults are nsqd 1.3.0's.

    Sizes are bytes and durations int milliseconds. ``tls_required`` is ``False``,
    ``True`` (TCP and HTTP) or ``"tcp-https"`` (TCP only), as nsqd's ``--tls-required``.
    """

    host: str = "127.0.0.1"
    tcp_port: int = 0  # 0: a free port
    http_port: int = 0
    https_port: int | None = None  # served only with a TLS cert; None: a free port then
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    max_rdy_count: int = DEFAULT_MAX_RDY_COUNT
    max_req_timeout: int = DEFAULT_MAX_REQ_TIMEOUT_MS
    msg_timeout: int = DEFAULT_MSG_TIMEOUT_MS
    max_msg_timeout: int = DEFAULT_MAX_MSG_TIMEOUT_MS
    max_heartbeat_interval: int = DEFAULT_MAX_HEARTBEAT_INTERVAL_MS
    max_output_buffer_size: int = DEFAULT_MAX_OUTPUT_BUFFER_SIZE
    max_output_buffer_timeout: int = MAX_OUTPUT_BUFFER_TIMEOUT_MS
    min_output_buffer_timeout: int = MIN_OUTPUT_BUFFER_TIMEOUT_MS
    output_buffer_timeout: int = DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS
    max_deflate_level: int = DEFAULT_MAX_DEFLATE_LEVEL
    deflate: bool = True
    snappy: bool = True
    max_channel_consumers: int = 0  # 0: unlimited
    mem_queue_size: int = DEFAULT_MEM_QUEUE_SIZE
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_root_ca_file: str | None = None
    tls_required: bool | str = False
    tls_client_auth_policy: str = ""
    tls_min_version: str = "tls1.0"
    auth_http_address: Sequence[str] = field(default_factory=list)
    authorizer: Authorizer | None = None
    http_client_connect_timeout: int = 2000
    http_client_request_timeout: int = 5000
    broadcast_address: str = "127.0.0.1"
    # nsqlookupd registration (lookupd_registration.py): nsqd's --lookupd-tcp-address
    # (repeatable), --broadcast-tcp-port / --broadcast-http-port (what lookupds are told;
    # default: the ports listened on) and the PING interval (fixed at 15 s in nsqd).
    lookupd_tcp_addresses: Sequence[str] = field(default_factory=list)
    broadcast_tcp_port: int | None = None
    broadcast_http_port: int | None = None
    lookupd_ping_interval: int = 15_000

    def __post_init__(self) -> None:
        if isinstance(self.auth_http_address, str):
            self.auth_http_address = [self.auth_http_address]
        self.auth_http_address = list(self.auth_http_address)
        if isinstance(self.lookupd_tcp_addresses, str):
            self.lookupd_tcp_addresses = [self.lookupd_tcp_addresses]
        self.lookupd_tcp_addresses = list(self.lookupd_tcp_addresses)
        for address in self.lookupd_tcp_addresses:
            parse_address(address, DEFAULT_LOOKUPD_TCP_PORT, "lookupd_tcp_addresses")
        if self.tls_client_auth_policy not in _TLS_POLICIES:
            raise ValueError(
                f"tls_client_auth_policy must be one of {_TLS_POLICIES}, "
                f"got {self.tls_client_auth_policy!r}"
            )
        if self.tls_required not in ("tcp-https", *_TLS_REQUIRED_VALUES):
            raise ValueError(
                f"tls_required must be True, False or 'tcp-https', got {self.tls_required!r}"
            )
        self.tls_required = {"tcp-https": "tcp-https", **_TLS_REQUIRED_VALUES}[self.tls_required]
        # nsqd: setting a client auth policy forces --tls-required
        # (docs/nsqd-facts.md section 8).
        if self.tls_client_auth_policy and self.tls_required == "false":
            self.tls_required = "true"
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key must be given together")
        if self.tls_required != "false" and self.tls_cert is None:
            raise ValueError("tls_required needs tls_cert and tls_key")
        if self.tls_min_version not in _TLS_VERSIONS:
            raise ValueError(f"tls_min_version must be one of {sorted(_TLS_VERSIONS)}")
        if not 1 <= self.max_deflate_level <= 9:
            raise ValueError("max_deflate_level must be in 1..9")
        for name in (
            "max_msg_size",
            "max_body_size",
            "max_rdy_count",
            "msg_timeout",
            "max_msg_timeout",
            "max_heartbeat_interval",
            "max_output_buffer_size",
            "mem_queue_size",
            "lookupd_ping_interval",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.authorizer is not None and self.auth_http_address:
            raise ValueError("give either authorizer or auth_http_address, not both")

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert is not None

    @property
    def tcp_tls_required(self) -> bool:
        return self.tls_required != "false"

    @property
    def http_tls_required(self) -> bool:
        return self.tls_required == "true"

    @property
    def auth_enabled(self) -> bool:
        return bool(self.auth_http_address) or self.authorizer is not None

    def server_ssl_context(self, client_auth: bool = True) -> ssl.SSLContext | None:
        """The TLS context for the TCP upgrade (and, without client auth, HTTPS)."""
        if self.tls_cert is None:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = _TLS_VERSIONS[self.tls_min_version]
        ctx.load_cert_chain(self.tls_cert, self.tls_key)
        if self.tls_client_auth_policy and client_auth:
            # Python's ssl cannot ask for a certificate without verifying it, so "require"
            # (Go's RequireAnyClientCert) verifies too: it needs tls_root_ca_file.
            ctx.verify_mode = ssl.CERT_REQUIRED
            if self.tls_root_ca_file:
                ctx.load_verify_locations(self.tls_root_ca_file)
            else:
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return ctx

    def replace(self, **changes: Any) -> BrokerOptions:
        return dataclasses.replace(self, **changes)
