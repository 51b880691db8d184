"""One HTTP/1.1 request, blocking or asyncio, over the sans-I/O h11 core.

nsqd's HTTP API (stats) and nsqlookupd's (lookup) are small JSON endpoints; this is all
the HTTP the client needs, with the properties the rest of the client has: every wait is
bounded by one deadline, TLS verifies by default, errors are the NSQError family and name
the address. A request is a value (:class:`HTTPRequest`, a step the runners of
:mod:`..runners.steps` perform); what is sent and how the answer is read is written once
(:class:`_Exchange`, over h11); :func:`send_request` and :func:`asend_request` only move
its bytes, on a socket or an asyncio stream.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import h11

from ...protocol.errors import (
    NSQConnectionError,
    NSQProtocolError,
)
from ...version import __version__
from ..settings.address import format_address
from .io_errors import map_exceptions

#: What nsqd and nsqlookupd answer with their versioned JSON shape (no ``data`` wrapper).
NSQ_V1_ACCEPT = "application/vnd.nsq; version=1.0"
#: Largest response body read (nsqd's /stats with many clients stays far below).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_USER_AGENT = f"airflow-provider-nsq/{__version__}"
_READ_SIZE = 65536


@dataclass(frozen=True, slots=True)
class HTTPResponse:
    """A complete response. ``url`` is what was asked, for error messages."""

    url: str
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def json(self) -> Any:
        """The body as JSON; :class:`NSQProtocolError` naming the URL when it is not."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):
            raise NSQProtocolError(
                f"{self.url} answered {self.status} with a body that is not JSON: "
                f"{self.body[:80]!r}"
            ) from None

    def error_text(self) -> str:
        """nsqd's ``{"message": "..."}`` error body (or the raw start of the body)."""
        try:
            value = json.loads(self.body)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict) and isinstance(value.get("message"), str):
            return value["message"]
        return self.body[:200].decode("utf-8", "replace").strip()


@dataclass(frozen=True, slots=True)
class HTTPRequest:
    """One request, as a step the runners perform (:mod:`..runners.steps`): sent, and its whole
    response read, within ``timeout`` seconds; HTTPS when ``ssl_context`` is given.
    Outcome: the :class:`HTTPResponse` (any status); :class:`NSQConnectionError` (refused,
    reset; :class:`NSQTLSError` for TLS), :class:`NSQTimeoutError` or
    :class:`NSQProtocolError` otherwise."""

    host: str
    port: int
    target: str
    timeout: float
    method: str = "GET"
    headers: Sequence[tuple[str, str]] = ()
    body: bytes = b""
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{format_address(self.host, self.port)}{self.target}"


class _Exchange:
    """The request and the response, as bytes in and out (h11 does the parsing)."""

    def __init__(self, request: HTTPRequest) -> None:
        self.url = request.url
        self._conn = h11.Connection(h11.CLIENT)
        method, body = request.method, request.body
        all_headers = [
            ("Host", format_address(request.host, request.port)),
            ("User-Agent", _USER_AGENT),
            *request.headers,
            ("Connection", "close"),
        ]
        if body or method in ("POST", "PUT"):
            all_headers.append(("Content-Length", str(len(body))))
        self._status = 0
        self._reason = ""
        self._headers: tuple[tuple[str, str], ...] = ()
        self._body = bytearray()
        try:
            head = self._conn.send(
                h11.Request(method=method, target=request.target, headers=all_headers)
            )
            data = self._conn.send(h11.Data(data=body)) if body else b""
            end = self._conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            raise NSQProtocolError(f"cannot send {method} {self.url}: {exc}") from None
        self.request_bytes = (head or b"") + (data or b"") + (end or b"")

    def receive(self, data: bytes) -> HTTPResponse | None:
        """Feed what was read (``b""`` at EOF); the response once it is complete."""
        conn = self._conn
        conn.receive_data(data)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise NSQProtocolError(
                    f"{self.url} did not answer with valid HTTP: {exc}"
                ) from None
            if event is h11.NEED_DATA:
                if not data:
                    raise NSQConnectionError(f"{self.url} closed the connection mid-response")
                return None
            if isinstance(event, h11.Response):
                self._status = event.status_code
                self._reason = event.reason.decode("latin-1")
                self._headers = tuple(
                    (name.decode("latin-1"), value.decode("latin-1"))
                    for name, value in event.headers
                )
            elif isinstance(event, h11.Data):
                self._body += event.data
                if len(self._body) > MAX_RESPONSE_BYTES:
                    raise NSQProtocolError(
                        f"{self.url} sent more than {MAX_RESPONSE_BYTES} bytes; refusing the rest"
                    )
            elif isinstance(event, h11.EndOfMessage):
                return HTTPResponse(
                    self.url, self._status, self._reason, self._headers, bytes(self._body)
                )
            elif isinstance(event, h11.ConnectionClosed):
                raise NSQConnectionError(f"{self.url} closed the connection mid-response")


def send_request(request: HTTPRequest) -> HTTPResponse:
    """Perform ``request`` on a blocking socket (the blocking runner's way)."""
    exchange = _Exchange(request)
    timeout = request.timeout
    deadline = time.monotonic() + timeout
    sock: socket.socket | None = None
    try:
        with map_exceptions(exchange.url, "reach", timeout):
            sock = socket.create_connection((request.host, request.port), timeout=timeout)
            if request.ssl_context is not None:
                sock = request.ssl_context.wrap_socket(
                    sock, server_hostname=request.server_hostname or request.host
                )
        with map_exceptions(exchange.url, "get an answer from", timeout):
            sock.sendall(exchange.request_bytes)
            response = None
            while response is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError  # worded by map_exceptions, as a recv timeout is
                sock.settimeout(remaining)
                response = exchange.receive(_recv(sock))
            return response
    finally:
        if sock is not None:
            sock.close()


async def asend_request(request: HTTPRequest) -> HTTPResponse:
    """Perform ``request`` on an asyncio stream (the asyncio runner's way): no thread,
    cancellable, the same errors."""
    exchange = _Exchange(request)
    timeout = request.timeout
    writer: asyncio.StreamWriter | None = None
    deadline = time.monotonic() + timeout
    ssl_context = request.ssl_context
    try:
        with map_exceptions(exchange.url, "reach", timeout):
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    request.host,
                    request.port,
                    ssl=ssl_context,
                    server_hostname=(request.server_hostname or request.host)
                    if ssl_context
                    else None,
                )
        with map_exceptions(exchange.url, "get an answer from", timeout):
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                writer.write(exchange.request_bytes)
                await writer.drain()
                response = None
                while response is None:
                    response = exchange.receive(await _aread(reader))
                return response
    finally:
        if writer is not None:
            writer.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(_READ_SIZE)
    except ConnectionResetError:
        return b""  # as EOF: the response is cut short, and says so


async def _aread(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read(_READ_SIZE)
    except ConnectionResetError:
        return b""


def http_request(host: str, port: int, target: str, **options: Any) -> HTTPResponse:
    """Send one request and read the whole response, all within ``timeout`` seconds
    (``options``: the other fields of :class:`HTTPRequest`; any status is returned)."""
    return send_request(HTTPRequest(host, port, target, **options))


async def ahttp_request(host: str, port: int, target: str, **options: Any) -> HTTPResponse:
    """:func:`http_request` for asyncio: no thread, cancellable, same errors."""
    return await asend_request(HTTPRequest(host, port, target, **options))
