"""An HTTP/1.1 server on asyncio and h11 that answers the way Go's net/http does.

nsqd and nsqlookupd serve their HTTP APIs with Go's ``net/http`` and httprouter 1.3.0;
the embedded daemons use this module so clients and tests meet the same bytes:

- keep-alive, ``Content-Length`` and chunked request bodies, ``Expect: 100-continue``
  (curl sends it for bodies over 1 KiB), pipelined requests answered in order;
- a request line that is not HTTP (an NSQ client pointed at the HTTP port sends
  ``"  V2IDENTIFY\\n"``) is answered ``400 Bad Request`` as soon as the line is complete,
  with Go's exact error response, and the connection closed;
- response headers in Go's order: the handler's (names canonicalised, sorted), then
  ``Date``, ``Content-Length``, a sniffed ``Content-Type`` when the handler set none and
  the body is not empty, ``Connection``; a body over 2048 bytes goes out chunked, as
  Go does when a handler's output outgrows its buffer;
- :class:`Router`: httprouter's exact-path routing with its 405 + ``Allow`` (OPTIONS
  listed), ``OPTIONS`` answers, trailing-slash and letter-case redirects (301 for GET,
  307 otherwise) and no implicit ``HEAD``.

Handlers are plain functions ``Request -> Response`` run on the event loop.
"""

from __future__ import annotations

import asyncio
import email.utils
import http
import logging
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import parse_qs, unquote

import h11

log = logging.getLogger(__name__)

# Go's http.DefaultMaxHeaderBytes (1 MiB) plus the 4096 bytes net/http allows on top.
MAX_HEADER_SIZE = (1 << 20) + 4096
# net/http's bufferBeforeChunkingSize: a larger body is sent chunked (HTTP/1.1).
CHUNKING_THRESHOLD = 2048

# Go 1.19's http.StatusText, for the codes these APIs use (Python's phrases differ, e.g.
# 413); any other code falls back to Python's phrase.
_GO_REASONS = {
    100: "Continue",
    200: "OK",
    204: "No Content",
    301: "Moved Permanently",
    307: "Temporary Redirect",
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

# What Go's server writes, bypassing the handler, when it cannot parse a request.
_GO_ERROR_HEADERS = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

# Go's parseRequestLine + ParseHTTPVersion: METHOD SP target SP HTTP/x.y, nothing else.
_REQUEST_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^ ]+ HTTP/\d\.\d\r?")

# Bytes that make Go's DetectContentType call a body binary (the WHATWG sniffing rule).
_BINARY_BYTES = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")


def reason_phrase(status: int) -> str:
    """The reason phrase Go writes after ``status``."""
    if status in _GO_REASONS:
        return _GO_REASONS[status]
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"status code {status}"


def canonical_header(name: str) -> str:
    """Go's ``CanonicalHeaderKey``: ``x-nsq-content-type`` -> ``X-Nsq-Content-Type``."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def sniff_content_type(body: bytes) -> str:
    """The type Go's ``DetectContentType`` gives the bodies these APIs send."""
    if _BINARY_BYTES.search(body[:512]):
        return "application/octet-stream"
    return "text/plain; charset=utf-8"


@dataclass
class Request:
    """One request, its body read in full.

    ``path`` is percent-decoded; ``query`` is the raw query string parsed (a ``#`` on the
    wire stays part of it, as in Go); ``headers`` has lower-case names and each name's
    first value; ``content_length`` is None for a chunked body.
    """

    method: str
    target: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    http_version: str = "1.1"
    content_length: int | None = 0
    body: bytes = b""
    secure: bool = False

    def arg(self, name: str) -> str | None:
        """The first value of query parameter ``name`` (None if absent), as Go reads it."""
        values = self.query.get(name)
        return values[0] if values else None


@dataclass
class Response:
    """What a handler returns: a status, a body, and headers (any letter case)."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Response]


def _parse_target(target: str) -> tuple[str, dict[str, list[str]]]:
    raw_path, _, raw_query = target.partition("?")
    return unquote(raw_path), parse_qs(raw_query, keep_blank_values=True)


class HTTPServerProtocol(asyncio.Protocol):
    """One HTTP connection: h11 parses, ``app`` answers, requests are served in order.

    ``max_body_size`` bounds a request body: a larger ``Content-Length`` is answered by
    ``body_too_large(request)`` before the body is read (no ``100 Continue``), and a
    chunked body that grows past it the same way; the connection then closes.
    """

    def __init__(
        self,
        app: Handler,
        *,
        max_body_size: int | None = None,
        body_too_large: Handler | None = None,
        connections: set[asyncio.Transport] | None = None,
    ) -> None:
        self._app = app
        self._max_body_size = max_body_size
        self._body_too_large = body_too_large or (lambda request: Response(413))
        self._connections = connections
        self._tracked: asyncio.Transport | None = None
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_SIZE)
        self._transport: asyncio.Transport | None = None
        self._secure = False
        self._request: Request | None = None
        self._body = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stream = cast(asyncio.Transport, transport)  # a stream server's
        self._transport = stream
        self._secure = stream.get_extra_info("ssl_object") is not None
        if self._connections is not None:
            self._tracked = stream
            self._connections.add(stream)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connections is not None and self._tracked is not None:
            self._connections.discard(self._tracked)  # _transport is None once _close ran
        self._transport = None

    def eof_received(self) -> bool:
        self._conn.receive_data(b"")
        self._serve()
        return False

    def data_received(self, data: bytes) -> None:
        self._conn.receive_data(data)
        self._serve()

    # -- the request cycle -----------------------------------------------------------

    def _serve(self) -> None:
        conn = self._conn
        while self._transport is not None:
            if conn.their_state is h11.IDLE and not self._request_line_ok():
                self._reject(400)
                return
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._reject(exc.error_status_hint)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._start_request(event)
            elif isinstance(event, h11.Data):
                self._body += event.data
                if self._max_body_size is not None and len(self._body) > self._max_body_size:
                    self._refuse_body()
            elif isinstance(event, h11.EndOfMessage):
                self._finish_request()
            elif isinstance(event, h11.ConnectionClosed):
                self._close()

    def _request_line_ok(self) -> bool:
        # Like Go, judge the request line as soon as it is complete: h11 would wait for
        # a whole header block that an NSQ client never sends.
        data, _ = self._conn.trailing_data
        end = data.find(b"\n")
        return end < 0 or _REQUEST_LINE.fullmatch(data, 0, end) is not None

    def _start_request(self, event: h11.Request) -> None:
        target = event.target.decode("latin-1")
        path, query = _parse_target(target)
        headers: dict[str, str] = {}
        for name, value in event.headers:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = None if chunked else int(headers.get("content-length", "0"))
        self._body.clear()
        self._request = Request(
            method=event.method.decode("latin-1"),
            target=target,
            path=path,
            query=query,
            headers=headers,
            http_version=event.http_version.decode("latin-1"),
            content_length=length,
            secure=self._secure,
        )
        if length is not None and self._max_body_size is not None and length > self._max_body_size:
            self._refuse_body()
        elif self._conn.they_are_waiting_for_100_continue:
            self._write(
                self._conn.send(
                    h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
                )
            )

    def _refuse_body(self) -> None:
        request = self._request
        assert request is not None
        response = self._body_too_large(request)
        response.headers.setdefault("Connection", "close")
        self._respond(request, response)
        self._close()

    def _finish_request(self) -> None:
        request = self._request
        assert request is not None
        request.body = bytes(self._body)
        self._body.clear()
        self._request = None
        try:
            response = self._app(request)
        except Exception:  # Go's net/http logs a handler's panic and drops the connection
            log.exception("HTTP handler failed for %s %s", request.method, request.target)
            self._close(abort=True)
            return
        self._respond(request, response)
        if self._conn.our_state is h11.MUST_CLOSE:
            self._close()
        else:
            self._conn.start_next_cycle()

    # -- output ----------------------------------------------------------------------

    def _respond(self, request: Request, response: Response) -> None:
        body = response.body
        given = {canonical_header(k): v for k, v in response.headers.items()}
        connection = given.pop("Connection", None)
        headers = sorted(given.items())
        headers.append(("Date", email.utils.formatdate(usegmt=True)))
        bodyless = response.status in (204, 304)
        if not bodyless and (len(body) <= CHUNKING_THRESHOLD or request.method == "HEAD"):
            headers.append(("Content-Length", str(len(body))))
        if body and "Content-Type" not in given:
            headers.append(("Content-Type", sniff_content_type(body)))
        if connection is not None:  # Go writes it after the framing headers
            headers.append(("Connection", connection))
        conn = self._conn
        data = conn.send(
            h11.Response(
                status_code=response.status,
                headers=headers,
                reason=reason_phrase(response.status),
            )
        )
        if body and not bodyless and request.method != "HEAD":
            data += conn.send(h11.Data(data=body))
        data += conn.send(h11.EndOfMessage())
        self._write(data)

    def _reject(self, status: int) -> None:
        # Go's server answers an unparseable request itself, in these exact bytes.
        text = f"{status} {reason_phrase(status)}"
        self._write(f"HTTP/1.1 {text}{_GO_ERROR_HEADERS}{text}".encode())
        self._close()

    def _write(self, data: bytes | None) -> None:
        if data and self._transport is not None:
            self._transport.write(data)

    def _close(self, abort: bool = False) -> None:
        transport = self._transport
        self._transport = None
        if transport is None:
            return
        if abort:
            transport.abort()
        else:
            transport.close()


async def start_http_server(
    app: Handler,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    max_body_size: int | None = None,
    body_too_large: Handler | None = None,
    connections: set[asyncio.Transport] | None = None,
) -> asyncio.Server:
    """Serve ``app`` on ``host:port`` (port 0: any free port) on the running loop.

    :param connections: where each open connection's transport is kept until it is lost,
        for the server's owner to drop when it stops (a keep-alive client may never
        close, and from Python 3.12.1 ``Server.wait_closed()`` waits for every
        connection).
    """
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HTTPServerProtocol(
            app,
            max_body_size=max_body_size,
            body_too_large=body_too_large,
            connections=connections,
        ),
        host,
        port,
        ssl=ssl_context,
    )


class Router:
    """httprouter 1.3.0's routing, as nsqd and nsqlookupd configure it.

    ``routes`` maps an exact path to ``{method: handler}``. A known path with another
    method gets ``method_not_allowed`` plus an ``Allow`` header (which lists OPTIONS);
    ``OPTIONS`` on a known path gets 200 with ``Allow``; ``HEAD`` is only served where
    it is routed. A path that matches a route once its trailing slash or letter case is
    fixed is redirected (301 for GET, 307 otherwise). Anything else gets ``not_found``.
    An exception in a handler is answered by ``panic``.
    """

    def __init__(
        self,
        routes: Mapping[str, Mapping[str, Handler]],
        *,
        not_found: Handler,
        method_not_allowed: Handler,
        panic: Handler,
    ) -> None:
        self.routes = {path: dict(methods) for path, methods in routes.items()}
        self.not_found = not_found
        self.method_not_allowed = method_not_allowed
        self.panic = panic

    def __call__(self, request: Request) -> Response:
        method, path = request.method, request.path
        handler = self.routes.get(path, {}).get(method)
        if handler is not None:
            try:
                return handler(request)
            except Exception:
                log.exception("HTTP handler failed for %s %s", method, request.target)
                return self.panic(request)
        if method != "CONNECT" and path != "/":
            fixed = self._fixed_path(path, method)
            if fixed is not None:
                return _redirect(request, fixed, 301 if method == "GET" else 307)
        allow = self.allowed(path, method)
        if allow and method == "OPTIONS":
            return Response(200, headers={"Allow": allow})
        if allow:
            response = self.method_not_allowed(request)
            response.headers["Allow"] = allow
            return response
        return self.not_found(request)

    def allowed(self, path: str, method: str) -> str:
        """httprouter's ``Allow`` value for ``path``: "" when no other method routes it."""
        methods = [m for m in self.routes.get(path, {}) if m not in (method, "OPTIONS")]
        return ", ".join(sorted([*methods, "OPTIONS"])) if methods else ""

    def _fixed_path(self, path: str, method: str) -> str | None:
        candidates = [p for p, methods in self.routes.items() if method in methods]
        other = path[:-1] if path.endswith("/") else path + "/"
        if other in candidates:
            return other
        cleaned = _clean_path(path).lower()
        for candidate in candidates:
            if candidate.lower() in (cleaned, cleaned.rstrip("/"), cleaned + "/"):
                return candidate
        return None


def _clean_path(path: str) -> str:
    """httprouter's CleanPath: one slash at a time, no ``.`` or ``..`` segments."""
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part and part != ".":
            parts.append(part)
    cleaned = "/" + "/".join(parts)
    return cleaned + "/" if path.endswith("/") and cleaned != "/" else cleaned


def _redirect(request: Request, path: str, status: int) -> Response:
    # Go's http.Redirect: an HTML note for GET, a Content-Type for GET and HEAD only.
    _, sep, query = request.target.partition("?")
    location = path + sep + query
    headers = {"Location": location}
    body = b""
    if request.method in ("GET", "HEAD"):
        headers["Content-Type"] = "text/html; charset=utf-8"
    if request.method == "GET":
        escaped = location.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        escaped = escaped.replace('"', "&#34;").replace("'", "&#39;")
        body = f'<a href="{escaped}">{reason_phrase(status)}</a>.\n\n'.encode()
    return Response(status, body, headers)
