"""A daemon as a test sees it: its addresses and its HTTP API, embedded or real alike.

:class:`DaemonHandle` is what :class:`~.nsqd_server.NSQDServer` and
:class:`~.lookupd_server.NSQLookupdServer` share. Requests go through the client's own
HTTP/1.1 client (:func:`airflow_provider_nsq.client.transport.http_request.http_request`, on h11), with
the ``Accept`` header nsqd's and nsqlookupd's clients send.
"""

from __future__ import annotations

import json
import ssl
from typing import Any
from urllib.parse import urlencode

from ..client.transport.http_request import NSQ_V1_ACCEPT, http_request
from .polling import wait_for
from .servers.addresses import DaemonAddresses

#: The bound on one request of a test helper.
HTTP_TIMEOUT_S = 10.0


def _unverified_context() -> ssl.SSLContext:
    # The embedded broker serves HTTPS with a throw-away certificate.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class DaemonHandle(DaemonAddresses):
    """A daemon's addresses and one-request helpers over its HTTP API.

    ``embedded`` is True when the daemon is an embedded one run by the test session,
    False for a real daemon named by the environment. ``https`` asks the HTTP API over
    TLS (without verifying the certificate: tests use throw-away ones).
    """

    def __init__(
        self,
        host: str,
        tcp_port: int,
        http_port: int,
        *,
        embedded: bool,
        http_host: str | None = None,
        https: bool = False,
    ) -> None:
        self.host = host
        self.http_host = http_host or host
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.embedded = embedded
        self.https = https

    def __repr__(self) -> str:
        kind = "embedded" if self.embedded else "external"
        name = type(self).__name__
        return f"{name}({kind}, tcp={self.tcp_address}, http={self.http_address})"

    # -- HTTP --------------------------------------------------------------------------

    def http(
        self, method: str, path: str, query: dict[str, Any] | None = None, body: bytes = b""
    ) -> tuple[int, bytes]:
        """One request to the HTTP API; returns (status, body) whatever the status."""
        target = path + ("?" + urlencode(query) if query else "")
        response = http_request(
            self.http_host,
            self.http_port,
            target,
            timeout=HTTP_TIMEOUT_S,
            method=method,
            headers=[("Accept", NSQ_V1_ACCEPT)],
            body=body,
            ssl_context=_unverified_context() if self.https else None,
        )
        return response.status, response.body

    def _get_json(self, path: str, query: dict[str, Any] | None = None) -> Any:
        status, data = self.http("GET", path, query)
        if status != 200:
            raise AssertionError(f"GET {path} {query or ''} -> {status} {data[:200]!r}")
        return json.loads(data)

    def _post(
        self, path: str, query: dict[str, Any], body: bytes = b"", ok: tuple[int, ...] = (200,)
    ) -> None:
        status, data = self.http("POST", path, query, body)
        if status not in ok:
            raise AssertionError(f"POST {path} {query} -> {status} {data[:200]!r}")

    # -- waiting -------------------------------------------------------------------------

    wait_for = staticmethod(wait_for)
