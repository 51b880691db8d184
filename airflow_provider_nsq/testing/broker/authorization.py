"""AUTH: asking an authorizer, and checking PUB/SUB against its answer
(docs/nsqd-facts.md section 9).

The authorizer is either a Python callable (``BrokerOptions.authorizer``) or nsqd-style
auth HTTP servers (``auth_http_address``), queried exactly as nsqd 1.3.0 does::

    GET http://<addr>/auth?common_name=<cn>&remote_ip=<ip>&secret=<s>&tls=<true|false>
    Accept: application/vnd.nsq; version=1.0

Only a 200 with a valid JSON answer authorizes. A 403 whose body is ``{"https_port": N}``
is retried over HTTPS on that port. Several servers: start at a random one, try the
others in turn. Answers are cached for ``ttl`` seconds, then asked again.
"""

from __future__ import annotations

import json
import logging
import random
import re
import ssl
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_nsq.client.transport.http_request import NSQ_V1_ACCEPT, http_request
from airflow_provider_nsq.protocol.errors import NSQError
from airflow_provider_nsq.protocol.value_checks import is_int

from .options import Authorizer

log = logging.getLogger("airflow_provider_nsq.testing.broker")

_PERMISSIONS = ("subscribe", "publish")


class AuthFailed(Exception):
    """The authorizer refused or could not be asked; the reason is only logged."""


@dataclass
class Authorization:
    topic: re.Pattern[str]
    channels: list[re.Pattern[str]]
    permissions: list[str]

    def allows(self, topic: str, channel: str) -> bool:
        # A publish is checked with an empty channel (auth_publish_needs_channel_match).
        needed = "subscribe" if channel else "publish"
        if needed not in self.permissions:
            return False
        if not self.topic.search(topic):  # unanchored, like Go's MatchString
            return False
        return any(c.search(channel) for c in self.channels)


@dataclass
class AuthState:
    identity: str
    identity_url: str
    authorizations: list[Authorization]
    expires: float  # time.monotonic()

    @property
    def expired(self) -> bool:
        return self.expires < time.monotonic()

    def allows(self, topic: str, channel: str) -> bool:
        return any(a.allows(topic, channel) for a in self.authorizations)


def _str(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AuthFailed(f"{what} must be a string")
    return value


def parse_auth_response(doc: Mapping[str, Any]) -> AuthState:
    """Validate an auth answer as nsqd does: known permissions, regexes compile, ttl > 0."""
    if not isinstance(doc, Mapping):
        raise AuthFailed("auth response is not a JSON object")
    authorizations = []
    for entry in doc.get("authorizations") or []:
        if not isinstance(entry, Mapping):
            raise AuthFailed("authorization entry is not a JSON object")
        permissions = [_str(p, "permission") for p in entry.get("permissions") or []]
        for p in permissions:
            if p not in _PERMISSIONS:
                raise AuthFailed(f"unknown permission {p}")
        topic = _str(entry.get("topic"), "topic")
        try:
            topic_re = re.compile(topic)
        except re.error as exc:
            raise AuthFailed(f"unable to compile topic {topic!r} {exc}") from None
        channels = []
        for c in entry.get("channels") or []:
            c = _str(c, "channel")
            try:
                channels.append(re.compile(c))
            except re.error as exc:
                raise AuthFailed(f"unable to compile channel {c!r} {exc}") from None
        authorizations.append(Authorization(topic_re, channels, permissions))
    ttl = doc.get("ttl", 0)
    if not is_int(ttl) or ttl <= 0:
        raise AuthFailed(f"invalid TTL {ttl} (must be >0)")
    return AuthState(
        identity=_str(doc.get("identity"), "identity"),
        identity_url=_str(doc.get("identity_url"), "identity_url"),
        authorizations=authorizations,
        expires=time.monotonic() + ttl,
    )


def auth_query(remote_ip: str, tls: bool, secret: bytes | str, common_name: str) -> str:
    """The query string nsqd sends: Go's url.Values.Encode sorts the keys."""
    items: list[tuple[str, str | bytes]] = [
        ("common_name", common_name),
        ("remote_ip", remote_ip),
        ("secret", secret),  # bytes as sent: percent-encoded byte by byte, like Go
        ("tls", "true" if tls else "false"),
    ]
    return urllib.parse.urlencode(items)


def _get(url: str, timeout: float, context: ssl.SSLContext | None) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    https = parts.scheme == "https"
    response = http_request(
        parts.hostname or "",
        parts.port or (443 if https else 80),
        urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, "")),
        timeout=timeout,
        headers=[("Accept", NSQ_V1_ACCEPT)],
        ssl_context=(context or ssl.create_default_context()) if https else None,
    )
    return response.status, response.body


def query_authd(
    address: str,
    remote_ip: str,
    tls: bool,
    common_name: str,
    secret: bytes | str,
    timeout: float = 5.0,
    context: ssl.SSLContext | None = None,
) -> AuthState:
    """Ask one auth HTTP server (blocking; the broker runs it in a worker thread)."""
    endpoint = address if "://" in address else f"http://{address}/auth"
    url = f"{endpoint}?{auth_query(remote_ip, tls, secret, common_name)}"
    while True:
        try:
            status, body = _get(url, timeout, context)
        except (OSError, NSQError) as exc:
            raise AuthFailed(f"failed to auth against {address} - {exc}") from None
        if status == 403 and not url.startswith("https"):
            # nsqd's convention: 403 {"https_port": N} means "ask me over HTTPS".
            try:
                port = json.loads(body)["https_port"]
            except (ValueError, KeyError, TypeError, RecursionError):
                raise AuthFailed(
                    f"failed to auth against {address} - got response 403 {body[:200]!r}"
                ) from None
            parts = urllib.parse.urlsplit(url)
            host = parts.hostname or ""
            if ":" in host:
                host = f"[{host}]"
            url = urllib.parse.urlunsplit(parts._replace(scheme="https", netloc=f"{host}:{port}"))
            continue
        if status != 200:
            raise AuthFailed(f"failed to auth against {address} - got response {status}")
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise AuthFailed(f"failed to auth against {address} - {exc}") from None
        return parse_auth_response(doc)


def query_any(
    addresses: Sequence[str],
    remote_ip: str,
    tls: bool,
    common_name: str,
    secret: bytes | str,
    timeout: float = 5.0,
    context: ssl.SSLContext | None = None,
) -> AuthState:
    """Start at a random server, try the others in turn, as nsqd's QueryAnyAuthd."""
    n = len(addresses)
    start = random.randrange(n)
    error: Exception = AuthFailed("no auth server configured")
    for i in range(n):
        address = addresses[(start + i) % n]
        try:
            return query_authd(address, remote_ip, tls, common_name, secret, timeout, context)
        except AuthFailed as exc:
            log.warning("auth against %s failed: %s", address, exc)
            error = exc
    raise error


def call_authorizer(
    authorizer: Authorizer, remote_ip: str, tls: bool, common_name: str, secret: str
) -> AuthState:
    try:
        doc = authorizer(secret, remote_ip, tls, common_name)
    except AuthFailed:
        raise
    except Exception as exc:
        # Only the type: the message might quote the secret, which is never logged.
        raise AuthFailed(f"authorizer refused ({type(exc).__name__})") from None
    return parse_auth_response(doc)
