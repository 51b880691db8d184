"""AUTH helpers for tests: a static authorizer and an nsqd-compatible auth HTTP server.

Both answer the way nsqd's auth protocol expects (tests/conformance/transcripts/FACTS.md
section 9)::

    secrets = {"good": {"ttl": 3600, "identity": "alice", "identity_url": "",
                        "authorizations": [{"topic": ".*", "channels": [".*"],
                                            "permissions": ["publish", "subscribe"]}]}}
    EmbeddedNSQD(authorizer=StaticAuthorizer(secrets))            # in-process
    with AuthServer(secrets) as auth:                             # over HTTP, also for a
        EmbeddedNSQD(auth_http_address=[auth.address])            # real nsqd's
                                                                  # --auth-http-address
Unknown secrets are refused (the server answers 403 ``forbidden``).
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .servers.lifecycle import StartStop

__all__ = ["AuthRequest", "AuthServer", "StaticAuthorizer", "allow_all"]


def allow_all(identity: str = "test-user", ttl: int = 3600) -> dict[str, Any]:
    """An answer granting publish and subscribe on everything."""
    return {
        "ttl": ttl,
        "identity": identity,
        "identity_url": "",
        "authorizations": [
            {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}
        ],
    }


@dataclass(frozen=True)
class AuthRequest:
    """One question the broker asked: what the auth server saw."""

    secret: str
    remote_ip: str
    tls: bool
    common_name: str
    accept: str = ""
    path: str = "/auth"
    query: dict[str, str] = field(default_factory=dict)


class StaticAuthorizer:
    """A callable authorizer for ``EmbeddedNSQD(authorizer=...)``: secret -> answer.

    Records every call in :attr:`requests` (thread-safe), so tests can count re-queries
    after the TTL.
    """

    def __init__(self, secrets: Mapping[str, Mapping[str, Any]]) -> None:
        self.secrets = {k: copy.deepcopy(dict(v)) for k, v in secrets.items()}
        self.requests: list[AuthRequest] = []
        self._lock = threading.Lock()

    def __call__(
        self, secret: str, remote_ip: str, tls: bool, common_name: str
    ) -> Mapping[str, Any]:
        with self._lock:
            self.requests.append(AuthRequest(secret, remote_ip, tls, common_name))
            answer = self.secrets.get(secret)
        if answer is None:
            raise PermissionError("unknown secret")  # never echo the secret
        return copy.deepcopy(answer)


class AuthServer(StartStop):
    """An nsqd-compatible auth HTTP server on 127.0.0.1 (``GET /auth``), in a thread.

    ``address`` is ``"127.0.0.1:PORT"`` for ``auth_http_address`` / nsqd's
    ``--auth-http-address``. Answers 200 + JSON for known secrets, 403 ``forbidden``
    otherwise. :attr:`requests` records what was asked.
    """

    def __init__(self, secrets: Mapping[str, Mapping[str, Any]], host: str = "127.0.0.1") -> None:
        self.secrets = {k: dict(v) for k, v in secrets.items()}
        self.requests: list[AuthRequest] = []
        self._lock = threading.Lock()
        self._host = host
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the auth server is not running")
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return f"{self._host}:{self.port}"

    def start(self) -> AuthServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                request = AuthRequest(
                    secret=query.get("secret", ""),
                    remote_ip=query.get("remote_ip", ""),
                    tls=query.get("tls") == "true",
                    common_name=query.get("common_name", ""),
                    accept=self.headers.get("Accept", ""),
                    path=parts.path,
                    query=query,
                )
                with owner._lock:
                    owner.requests.append(request)
                    answer = owner.secrets.get(request.secret)
                if parts.path != "/auth":
                    status, body = 404, b"not found"
                elif answer is None:
                    status, body = 403, b"forbidden"
                else:
                    status, body = 200, json.dumps(answer).encode()
                self.send_response(status)
                self.send_header(
                    "Content-Type", "application/json" if status == 200 else "text/plain"
                )
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet, and the query holds secrets

        self._server = ThreadingHTTPServer((self._host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = None
        self._thread = None
