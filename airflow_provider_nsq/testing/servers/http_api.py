"""How nsqd and nsqlookupd 1.3.0 shape HTTP answers (their shared ``internal/http_api``).

- :func:`v1` (``http_api.V1``): a handler returns data or raises :class:`APIError`;
  200 answers carry a string as is, ``None`` as an empty body, anything else as JSON;
  errors are ``{"message":"<CODE>"}`` with the status. Every answer has
  ``X-Nsq-Content-Type: nsq; version=1.0``; JSON ones ``Content-Type: application/json``.
- :func:`plain_text` (``http_api.PlainText``): the text alone (``/ping``), no NSQ header.
- :func:`nsq_router`: httprouter with nsqd's and nsqlookupd's 404, 405 and panic answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..wire.go_json import go_json
from .http_server import Handler, Request, Response, Router

NSQ_CONTENT_TYPE = {"X-NSQ-Content-Type": "nsq; version=1.0"}
JSON_CONTENT_TYPE = {"Content-Type": "application/json; charset=utf-8"}


class APIError(Exception):
    """An error answer: ``status`` and nsqd's message code (``MISSING_ARG_TOPIC``...)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


encode_json = go_json  # compact UTF-8 JSON, as Go's json.Marshal writes it


def respond_v1(status: int, data: Any = None) -> Response:
    """``http_api.RespondV1``: the answer for ``data`` (200) or an error message."""
    headers = dict(NSQ_CONTENT_TYPE)
    if status != 200:
        headers.update(JSON_CONTENT_TYPE)
        return Response(status, encode_json({"message": str(data)}), headers)
    if data is None:
        return Response(200, b"", headers)
    if isinstance(data, str):
        return Response(200, data.encode(), headers)
    if isinstance(data, bytes):
        return Response(200, data, headers)
    headers.update(JSON_CONTENT_TYPE)
    return Response(200, encode_json(data), headers)


def v1(handler: Callable[[Request], Any]) -> Handler:
    """Wrap a data-returning handler as ``http_api.V1`` does."""

    def serve(request: Request) -> Response:
        try:
            return respond_v1(200, handler(request))
        except APIError as exc:
            return respond_v1(exc.status, exc.message)

    return serve


def plain_text(handler: Callable[[Request], str]) -> Handler:
    """Wrap a text-returning handler as ``http_api.PlainText`` does (type sniffed)."""

    def serve(request: Request) -> Response:
        try:
            return Response(200, handler(request).encode())
        except APIError as exc:
            return Response(exc.status, exc.message.encode())

    return serve


def nsq_router(routes: Mapping[str, Mapping[str, Handler]]) -> Router:
    """A :class:`Router` answering 404 NOT_FOUND, 405 METHOD_NOT_ALLOWED and, when a
    handler fails, 500 INTERNAL_ERROR, in the V1 format (``http_api.Log*Handler``)."""
    return Router(
        routes,
        not_found=lambda request: respond_v1(404, "NOT_FOUND"),
        method_not_allowed=lambda request: respond_v1(405, "METHOD_NOT_ALLOWED"),
        panic=lambda request: respond_v1(500, "INTERNAL_ERROR"),
    )
