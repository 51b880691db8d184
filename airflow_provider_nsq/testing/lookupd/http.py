"""TEMPORARY: serve :func:`.api.respond` over h11 until testing/http_server.py lands.

Go's net/http framing: ``Date`` and ``Content-Length`` after the handler's headers,
``Connection: close`` echoed, HEAD answered without the body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from email.utils import formatdate

import h11

from .api import Answer

Responder = Callable[[str, str], Answer]


class LookupdHTTPConnection(asyncio.Protocol):
    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.conn = h11.Connection(h11.SERVER)
        self.transport: asyncio.Transport | None = None
        self._request: h11.Request | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.conn.receive_data(data)
        self._pump()

    def eof_received(self) -> bool:
        self.conn.receive_data(b"")
        self._pump()
        return False

    def _pump(self) -> None:
        transport = self.transport
        while transport is not None and not transport.is_closing():
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError:
                self._send_raw(
                    400,
                    [("Content-Type", "text/plain; charset=utf-8")],
                    b"400 Bad Request",
                    close=True,
                )
                return
            if event is h11.NEED_DATA:
                return
            if isinstance(event, h11.Request):
                self._request = event
            elif isinstance(event, h11.EndOfMessage) and self._request is not None:
                request, self._request = self._request, None
                self._answer(request)
            elif isinstance(event, h11.ConnectionClosed):
                transport.close()
                return
            elif event is h11.PAUSED:
                if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
                    self.conn.start_next_cycle()
                    continue
                return

    def _answer(self, request: h11.Request) -> None:
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("utf-8", "surrogateescape")
        answer = self.respond(method, target)
        close = any(
            name == b"connection" and value.lower() == b"close" for name, value in request.headers
        )
        headers = [*answer.headers, ("Date", formatdate(usegmt=True))]
        headers.append(("Content-Length", str(len(answer.body))))
        if close:
            headers.append(("Connection", "close"))
        body = b"" if method == "HEAD" else answer.body
        self._send(answer.status, headers, body, close)

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes, close: bool) -> None:
        assert self.transport is not None
        data = self.conn.send(h11.Response(status_code=status, headers=headers))
        if body:
            data += self.conn.send(h11.Data(data=body))
        data += self.conn.send(h11.EndOfMessage())
        self.transport.write(data)
        if close or self.conn.our_state is h11.MUST_CLOSE:
            self.transport.close()
        else:
            self.conn.start_next_cycle()

    def _send_raw(
        self, status: int, headers: list[tuple[str, str]], body: bytes, close: bool
    ) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
        )
        self.transport.close()
