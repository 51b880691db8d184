"""AUTH helpers for tests: a static authorizer and an nsqd-compatible auth HTTP server.

Both answer the way nsqd's auth protocol expects (docs/nsqd-facts.md
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

import asyncio
import copy
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .servers.http_server import Request, Response, start_http_server
from .servers.loop_thread import ServiceOnLoop

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


class AuthServer(ServiceOnLoop[asyncio.Server]):
    """An nsqd-compatible auth HTTP server on 127.0.0.1 (``GET /auth``), in a thread.

    ``address`` is ``"127.0.0.1:PORT"`` for ``auth_http_address`` / nsqd's
    ``--auth-http-address``. Answers 200 + JSON for known secrets, 403 ``forbidden``
    otherwise, 404 on another path, 405 to another method. :attr:`requests` records what
    was asked. It is served by the embedded daemons' HTTP server, on its own loop thread.
    """

    thread_name = "auth-server"

    def __init__(self, secrets: Mapping[str, Mapping[str, Any]], host: str = "127.0.0.1") -> None:
        self.secrets = {k: dict(v) for k, v in secrets.items()}
        self.requests: list[AuthRequest] = []
        self._lock = threading.Lock()
        self._host = host
        self._connections: set[asyncio.Transport] = set()
        super().__init__()

    @property
    def port(self) -> int:
        return int(self._started().sockets[0].getsockname()[1])

    @property
    def address(self) -> str:
        return f"{self._host}:{self.port}"

    def _answer(self, request: Request) -> Response:
        if request.method != "GET":
            return Response(405, b"method not allowed", {"Allow": "GET"})
        query = {k: v[0] for k, v in request.query.items()}
        asked = AuthRequest(
            secret=query.get("secret", ""),
            remote_ip=query.get("remote_ip", ""),
            tls=query.get("tls") == "true",
            common_name=query.get("common_name", ""),
            accept=request.headers.get("accept", ""),
            path=request.path,
            query=query,
        )
        with self._lock:
            self.requests.append(asked)
            answer = self.secrets.get(asked.secret)
        if request.path != "/auth":
            return Response(404, b"not found", {"Content-Type": "text/plain"})
        if answer is None:
            return Response(403, b"forbidden", {"Content-Type": "text/plain"})
        return Response(200, json.dumps(answer).encode(), {"Content-Type": "application/json"})

    async def _open(self) -> asyncio.Server:
        return await start_http_server(self._answer, self._host, 0, connections=self._connections)

    async def _close(self, server: asyncio.Server) -> None:
        server.close()
        # A keep-alive client's connection: wait_closed() waits for it (Python 3.12.1+).
        for transport in list(self._connections):
            transport.abort()
        await server.wait_closed()
