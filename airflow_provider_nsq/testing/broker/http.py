"""A small HTTP/1.1 server on asyncio Protocols, enough for nsqd's HTTP API.

Handles keep-alive, ``Content-Length`` and chunked request bodies, and
``Expect: 100-continue`` (curl sends it for bodies over 1 KiB). Routing and the API
itself live in :mod:`.api`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from .server import Broker

log = logging.getLogger("airflow_provider_nsq.testing.broker")

MAX_HEADER_SIZE = 64 * 1024

_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Request Entity Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


_REQUEST_LINE = re.compile(rb"[A-Z]+ \S+ HTTP/\d\.\d\Z")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""
    secure: bool = False
    content_length: int | None = None


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


class _BadRequest(Exception):
    pass


class HTTPConnection(asyncio.Protocol):
    def __init__(
        self, broker: Broker, secure: bool, handler: Callable[[Broker, Request], Response]
    ) -> None:
        self.broker = broker
        self.secure = secure
        self.handler = handler
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self._head: tuple[Request, bool, bool] | None = None  # request, chunked, keep-alive
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        try:
            while not self._closed and self._next_request():
                pass
        except _BadRequest as exc:
            self._send(Response(400, str(exc).encode()), keep_alive=False)

    def _next_request(self) -> bool:
        buf = self.buf
        if self._head is None:
            # Like Go's net/http, judge the request line as soon as it is complete: an NSQ
            # client pointed at this port ("  V2IDENTIFY...") gets its 400 at once.
            first = buf.find(b"\n")
            if first >= 0 and not _REQUEST_LINE.match(bytes(buf[:first]).rstrip(b"\r")):
                raise _BadRequest("malformed HTTP request")
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEADER_SIZE:
                    self._send(Response(431), keep_alive=False)
                return False
            self._head = self._parse_head(bytes(buf[:end]).decode("latin-1"))
            del buf[: end + 4]
        request, chunked, keep_alive = self._head
        if chunked:
            body = self._take_chunked()
            if body is None:
                return False
            request.body = body
        else:
            n = request.content_length or 0
            if len(buf) < n:
                return False
            request.body = bytes(buf[:n])
            del buf[:n]
        self._head = None
        try:
            response = self.handler(self.broker, request)
        except Exception:  # a bug must not kill the broker: answer 500
            log.exception("HTTP handler failed for %s %s", request.method, request.path)
            response = Response(500, b'{"message":"INTERNAL_ERROR"}')
        self._send(response, keep_alive)
        return not self._closed

    def _parse_head(self, head: str) -> tuple[Request, bool, bool]:
        lines = head.split("\r\n")
        try:
            method, target, version = lines[0].split(" ")
        except ValueError:
            raise _BadRequest("malformed request line") from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise _BadRequest("malformed header")
            headers[name.strip().lower()] = value.strip()
        parts = urlsplit(target)
        request = Request(
            method=method,
            path=parts.path,
            query=parse_qs(parts.query, keep_blank_values=True),
            headers=headers,
            secure=self.secure,
        )
        connection = headers.get("connection", "").lower()
        keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not chunked:
            try:
                request.content_length = int(headers.get("content-length", "0"))
            except ValueError:
                raise _BadRequest("bad Content-Length") from None
            opts = self.broker.options
            if request.content_length > opts.max_body_size + opts.max_msg_size:
                # Refuse before reading: nsqd checks Content-Length first, too.
                self._send(Response(413, b'{"message":"BODY_TOO_BIG"}'), keep_alive=False)
                raise _Closed
        if headers.get("expect", "").lower() == "100-continue" and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return request, chunked, keep_alive

    def _take_chunked(self) -> bytes | None:
        buf = self.buf
        pos = 0
        body = bytearray()
        while True:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                return None
            try:
                size = int(bytes(buf[pos:end]).split(b";")[0], 16)
            except ValueError:
                raise _BadRequest("bad chunk size") from None
            pos = end + 2
            if size == 0:
                # trailers end with an empty line
                end = buf.find(b"\r\n\r\n", pos - 2)
                if end < 0:
                    return None
                del buf[: end + 4]
                return bytes(body)
            if len(buf) < pos + size + 2:
                return None
            body += buf[pos : pos + size]
            pos += size + 2

    def _send(self, response: Response, keep_alive: bool) -> None:
        if self.transport is None or self._closed:
            return
        reason = _REASONS.get(response.status, "Unknown")
        lines = [f"HTTP/1.1 {response.status} {reason}"]
        headers = {"X-NSQ-Content-Type": "nsq; version=1.0", **response.headers}
        headers["Content-Length"] = str(len(response.body))
        if not keep_alive:
            headers["Connection"] = "close"
        lines.extend(f"{k}: {v}" for k, v in headers.items())
        self.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body)
        if not keep_alive:
            self._closed = True
            self.transport.close()


class _Closed(_BadRequest):
    """The response was already sent and the connection is closing."""
