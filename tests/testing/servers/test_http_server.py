"""The embedded daemons' HTTP server answers as Go's net/http and httprouter do.

Expected bytes come from the real nsqlookupd 1.3.0 recordings
(``tests/conformance/lookupd_transcripts/http_*.json``, named beside each case) and from Go's
``net/http`` source; the app here is a stand-in with nsqlookupd's routes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

import pytest

from airflow_provider_nsq.testing.servers.http_api import APIError, nsq_router, plain_text, v1
from airflow_provider_nsq.testing.servers.http_server import Request, Response, start_http_server

GO_DATE = r"[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT"


def _topic(request: Request) -> None:
    if request.arg("topic") is None:
        raise APIError(400, "MISSING_ARG_TOPIC")


def _lookup(request: Request) -> dict:
    _topic(request)
    return {"channels": [], "producers": []}


def _boom(request: Request) -> None:
    raise RuntimeError("handler bug")


APP = nsq_router(
    {
        "/ping": {"GET": plain_text(lambda request: "OK")},
        "/lookup": {"GET": v1(_lookup)},
        "/topics": {"GET": v1(lambda request: {"topics": ["t"] * 1000})},
        "/topic/create": {"POST": v1(_topic)},
        "/echo": {"POST": v1(lambda request: request.body.decode())},
        "/boom": {"GET": v1(_boom)},
    }
)


def serve(
    scenario: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    **options,
) -> None:
    """Run ``scenario`` against APP on a fresh server, over one raw connection."""

    async def main() -> None:
        server = await start_http_server(APP, "127.0.0.1", 0, **options)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await asyncio.wait_for(scenario(reader, writer), 10)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def exchange(request: bytes, **options) -> bytes:
    """Send ``request`` and read everything until the server closes."""
    out: list[bytes] = []

    async def scenario(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(request)
        out.append(await reader.read())

    serve(scenario, **options)
    return out[0]


def get(target: str, method: str = "GET", extra: str = "") -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
    return exchange(head.encode())


def masked(response: bytes) -> bytes:
    return re.sub(rb"Date: " + GO_DATE.encode(), b"Date: <date>", response)


def test_json_error_has_gos_header_order():  # http_topic_create
    assert masked(get("/topic/create", "POST", "Content-Length: 0\r\n")) == (
        b"HTTP/1.1 400 Bad Request\r\n"
        b"Content-Type: application/json; charset=utf-8\r\n"
        b"X-Nsq-Content-Type: nsq; version=1.0\r\n"
        b"Date: <date>\r\nContent-Length: 31\r\nConnection: close\r\n\r\n"
        b'{"message":"MISSING_ARG_TOPIC"}'
    )


def test_empty_success_has_no_content_type():  # http_topic_create
    assert masked(get("/topic/create?topic=t", "POST", "Content-Length: 0\r\n")) == (
        b"HTTP/1.1 200 OK\r\nX-Nsq-Content-Type: nsq; version=1.0\r\n"
        b"Date: <date>\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )


def test_plain_text_is_sniffed_after_the_length():  # http_ping
    assert masked(get("/ping")) == (
        b"HTTP/1.1 200 OK\r\nDate: <date>\r\nContent-Length: 2\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nOK"
    )


def test_wrong_method_is_405_with_allow_and_head_is_not_implied():  # http_ping
    expected = (
        b"HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, OPTIONS\r\n"
        b"Content-Type: application/json; charset=utf-8\r\n"
        b"X-Nsq-Content-Type: nsq; version=1.0\r\n"
        b"Date: <date>\r\nContent-Length: 32\r\nConnection: close\r\n\r\n"
    )
    assert masked(get("/ping", "POST", "Content-Length: 0\r\n")) == (
        expected + b'{"message":"METHOD_NOT_ALLOWED"}'
    )
    assert masked(get("/ping", "HEAD")) == expected  # the length, but no body


def test_options_lists_the_allowed_methods():  # http_bad_method
    assert masked(get("/topic/create", "OPTIONS")) == (
        b"HTTP/1.1 200 OK\r\nAllow: OPTIONS, POST\r\n"
        b"Date: <date>\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )


def test_unknown_path_and_root_are_404():  # http_unknown_path
    for target in ("/no_such_path", "/"):
        assert masked(get(target)).endswith(
            b'Content-Length: 23\r\nConnection: close\r\n\r\n{"message":"NOT_FOUND"}'
        )
        assert get(target).startswith(b"HTTP/1.1 404 Not Found\r\n")


def test_trailing_slash_and_case_are_redirected():  # http_unknown_path
    moved = (
        b"HTTP/1.1 301 Moved Permanently\r\nContent-Type: text/html; charset=utf-8\r\n"
        b"Location: /lookup?topic=t\r\nDate: <date>\r\nContent-Length: 50\r\n"
        b"Connection: close\r\n\r\n"
        b'<a href="/lookup?topic=t">Moved Permanently</a>.\n\n'
    )
    assert masked(get("/lookup/?topic=t")) == moved
    assert masked(get("/LOOKUP?topic=t")) == moved
    assert masked(get("/topic/create/?topic=t", "POST", "Content-Length: 0\r\n")) == (
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /topic/create?topic=t\r\n"
        b"Date: <date>\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )


def test_first_query_value_wins_and_raw_hash_stays_in_the_query():  # http_lookup_errors
    got: list[Request] = []
    APP.routes["/seen"] = {"GET": v1(lambda request: got.append(request))}
    try:
        get("/seen?topic=e#ephemeral&topic=other")
    finally:
        del APP.routes["/seen"]
    assert got[0].arg("topic") == "e#ephemeral" and got[0].path == "/seen"


def test_a_non_http_request_line_gets_gos_400_at_once():
    # An NSQ client at the HTTP port: Go answers as soon as the first line is complete,
    # without waiting for a header block that never comes.
    assert exchange(b"  V2IDENTIFY\n\x00\x00\x00\x02{}") == (
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Connection: close\r\n\r\n400 Bad Request"
    )


def test_malformed_headers_get_gos_400():
    assert exchange(b"GET /ping HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n").startswith(
        b"HTTP/1.1 400 Bad Request\r\n"
    )


def test_large_body_is_chunked_like_go():
    response = get("/topics")
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and b"Content-Length" not in head
    size, _, _chunk = body.partition(b"\r\n")
    assert int(size, 16) == len(b'{"topics":[' + b",".join([b'"t"'] * 1000) + b"]}")


def test_keep_alive_pipelining_chunked_body_and_100_continue():
    async def scenario(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nchu\r\n5;ext=1\r\nnked!\r\n0\r\n\r\n"
            b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        first = await reader.readuntil(b"chunked!")
        assert first.startswith(b"HTTP/1.1 200 OK\r\n")
        second = await reader.readuntil(b"\r\n\r\nOK")
        assert second.startswith(b"HTTP/1.1 200 OK\r\n")
        writer.write(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
        )
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"body")
        assert (await reader.readuntil(b"body")).startswith(b"HTTP/1.1 200 OK\r\n")

    serve(scenario)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n",
    ],
    ids=["content-length", "chunked"],
)
def test_body_over_the_limit_is_refused_and_the_connection_closed(request_bytes):
    response = exchange(
        request_bytes,
        max_body_size=10,
        body_too_large=lambda request: Response(413, b"too big"),
    )
    assert response.startswith(b"HTTP/1.1 413 Request Entity Too Large\r\n")
    assert b"100 Continue" not in response and response.endswith(b"too big")


def test_a_failing_handler_is_answered_500_internal_error():
    response = get("/boom")
    assert response.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert response.endswith(b'{"message":"INTERNAL_ERROR"}')
