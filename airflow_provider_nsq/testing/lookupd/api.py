"""nsqlookupd 1.3.0's HTTP API as plain functions: (method, target) -> :class:`Answer`.

What the recordings pin (FACTS.md sections 1-3):

- Every answer is the bare JSON document (no ``status_code``/``data`` envelope), and the
  ``Accept: application/vnd.nsq; version=1.0`` header changes nothing.
- Headers: JSON answers and errors carry ``Content-Type: application/json;
  charset=utf-8`` and ``X-Nsq-Content-Type: nsq; version=1.0``; a successful POST has an
  empty body and only the ``X-Nsq-Content-Type``; ``/ping`` is ``text/plain`` without it.
- Errors are ``{"message": "<CODE>"}``; parameters come only from the query string
  (Go's ``url.ParseQuery``: a ``;`` or a bad ``%`` escape is ``400 INVALID_REQUEST``), a
  repeated parameter uses its first value, and a raw ``#`` stays part of the query.
- Routing is httprouter's: a wrong method is ``405`` with ``Allow`` (which lists
  OPTIONS), ``OPTIONS`` is ``200`` with ``Allow``, ``HEAD`` is not a GET, a trailing slash
  or wrong letter case is redirected (``301`` for GET, ``307`` otherwise), anything
  else is ``404 NOT_FOUND``.

The HTTP server adds ``Date``, ``Content-Length`` and ``Connection``; for HEAD it sends
the headers without the body.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_nsq.protocol.go_json import go_json
from airflow_provider_nsq.protocol.names import is_valid_name

from .options import NSQLOOKUPD_VERSION
from .registry import GO_ZERO_TIME_UNIX_NANO, Registration, filter_active

if TYPE_CHECKING:
    from .server import Lookupd

log = logging.getLogger("airflow_provider_nsq.testing.lookupd")

JSON_TYPE = ("Content-Type", "application/json; charset=utf-8")
NSQ_TYPE = ("X-Nsq-Content-Type", "nsq; version=1.0")
TEXT_TYPE = ("Content-Type", "text/plain; charset=utf-8")
HTML_TYPE = ("Content-Type", "text/html; charset=utf-8")


@dataclass(frozen=True)
class Answer:
    """A response before the server frames it: status, headers in Go's order, body."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


class APIError(Exception):
    """``http_api.Err``: answered as ``{"message": code}`` with ``status``."""

    def __init__(self, status: int, code: str) -> None:
        super().__init__(code)
        self.status = status
        self.code = code


def _v1(status: int, data: Any = None) -> Answer:
    """``http_api.RespondV1``: JSON (or nothing) plus the X-Nsq-Content-Type header."""
    if status != 200:
        return Answer(status, [JSON_TYPE, NSQ_TYPE], go_json({"message": data}))
    if data is None:
        return Answer(200, [NSQ_TYPE])
    return Answer(200, [JSON_TYPE, NSQ_TYPE], go_json(data))


# -- query parameters, as Go's url.ParseQuery reads them ---------------------------------

_HEX = "0123456789abcdefABCDEF"


def _unescape(text: str, plus_is_space: bool) -> str:
    """Go's ``url.QueryUnescape`` / ``PathUnescape``; ``ValueError`` on a bad escape."""
    if "%" not in text and not (plus_is_space and "+" in text):
        return text
    out = bytearray()
    raw = text.encode("utf-8", "surrogateescape")
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == 0x25:  # %
            pair = raw[i + 1 : i + 3].decode("latin-1")
            if len(pair) != 2 or pair[0] not in _HEX or pair[1] not in _HEX:
                raise ValueError(f"invalid URL escape {raw[i : i + 3]!r}")
            out.append(int(pair, 16))
            i += 3
            continue
        out.append(0x20 if c == 0x2B and plus_is_space else c)
        i += 1
    return out.decode("utf-8", "surrogateescape")


def parse_query(raw_query: str) -> dict[str, list[str]]:
    """``url.ParseQuery`` (Go 1.19): ``&``-separated; ``;`` and bad escapes are errors
    (the parse goes on, but nsqlookupd then answers ``INVALID_REQUEST``)."""
    values: dict[str, list[str]] = {}
    error = False
    for part in raw_query.split("&") if raw_query else []:
        if ";" in part:
            error = True
            continue
        if not part:
            continue
        key, _, value = part.partition("=")
        try:
            key, value = _unescape(key, True), _unescape(value, True)
        except ValueError:
            error = True
            continue
        values.setdefault(key, []).append(value)
    if error:
        raise APIError(400, "INVALID_REQUEST")
    return values


def _get(params: dict[str, list[str]], name: str, missing: str) -> str:
    values = params.get(name)
    if values is None:
        raise APIError(400, missing)
    return values[0]


def _topic_channel(params: dict[str, list[str]]) -> tuple[str, str]:
    """``http_api.GetTopicChannelArgs``: the four errors, in this order."""
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise APIError(400, "INVALID_ARG_TOPIC")
    channel = _get(params, "channel", "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise APIError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


# -- handlers ------------------------------------------------------------------------------

Handler = Callable[["Lookupd", dict[str, list[str]]], Answer]


def ping(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    return Answer(200, [TEXT_TYPE], b"OK")


def info(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    return _v1(200, {"version": NSQLOOKUPD_VERSION})


def topics(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    keys = lookupd.db.find_registrations("topic", "*", "")
    return _v1(200, {"topics": [k.key for k in keys]})


def channels(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    keys = lookupd.db.find_registrations("channel", topic, "*")
    return _v1(200, {"channels": [k.subkey for k in keys]})


def lookup(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    db = lookupd.db
    if not db.find_registrations("topic", topic, ""):
        raise APIError(404, "TOPIC_NOT_FOUND")
    channel_keys = db.find_registrations("channel", topic, "*")
    producers = filter_active(
        db.find_producers("topic", topic, ""),
        lookupd.inactive_producer_timeout_s,
        lookupd.tombstone_lifetime_s,
    )
    return _v1(
        200,
        {
            "channels": [k.subkey for k in channel_keys],
            "producers": [p.peer.lookup_entry() for p in producers],
        },
    )


def nodes(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    db = lookupd.db
    # Tombstoned nodes stay listed (lifetime 0 here); inactive ones do not.
    clients = filter_active(
        db.find_producers("client", "", ""), lookupd.inactive_producer_timeout_s, 0
    )
    entries = []
    for client in clients:
        peer = client.peer
        topic_names = [
            k.key for k in db.lookup_registrations(peer.id) if k.matches("topic", "*", "")
        ]
        tombstones = []
        for name in topic_names:
            entry = next((p for p in db.find_producers("topic", name, "") if p.peer is peer), None)
            tombstones.append(
                entry is not None and entry.is_tombstoned(lookupd.tombstone_lifetime_s)
            )
        entries.append({**peer.lookup_entry(), "tombstones": tombstones, "topics": topic_names})
    return _v1(200, {"producers": entries})


def topic_create(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise APIError(400, "INVALID_ARG_TOPIC")
    log.info("DB: adding topic(%s)", topic)
    lookupd.db.add_registration(Registration("topic", topic, ""))
    return _v1(200)


def topic_delete(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    # Only this lookupd's registry changes: no nsqd is told (FACTS.md section 8).
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    db = lookupd.db
    for key in db.find_registrations("channel", topic, "*"):
        log.info("DB: removing channel(%s) from topic(%s)", key.subkey, topic)
        db.remove_registration(key)
    for key in db.find_registrations("topic", topic, ""):
        log.info("DB: removing topic(%s)", topic)
        db.remove_registration(key)
    return _v1(200)


def topic_tombstone(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    node = _get(params, "node", "MISSING_ARG_NODE")
    log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
    for producer in lookupd.db.find_producers("topic", topic, ""):
        peer = producer.peer
        # An exact string compare with broadcast_address:http_port (FACTS.md section 2).
        if f"{peer.broadcast_address}:{peer.http_port}" == node:
            producer.tombstone()
    return _v1(200)


def channel_create(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    topic, channel = _topic_channel(params)
    log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
    lookupd.db.add_registration(Registration("channel", topic, channel))
    lookupd.db.add_registration(Registration("topic", topic, ""))
    return _v1(200)


def channel_delete(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    topic, channel = _topic_channel(params)
    keys = lookupd.db.find_registrations("channel", topic, channel)
    if not keys:
        raise APIError(404, "CHANNEL_NOT_FOUND")
    log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
    for key in keys:
        lookupd.db.remove_registration(key)
    return _v1(200)


def debug(lookupd: Lookupd, params: dict[str, list[str]]) -> Answer:
    data: dict[str, list[dict[str, Any]]] = {}
    for key, producers in lookupd.db.items():
        for producer in producers.values():
            peer = producer.peer
            # A Go map marshalled: keys sorted.
            data.setdefault(key.debug_name, []).append(
                {
                    "broadcast_address": peer.broadcast_address,
                    "hostname": peer.hostname,
                    "http_port": peer.http_port,
                    "id": peer.id,
                    "last_update": peer.last_update_ns,
                    "tcp_port": peer.tcp_port,
                    "tombstoned": producer.tombstoned,
                    "tombstoned_at": producer.tombstoned_at_ns
                    if producer.tombstoned
                    else GO_ZERO_TIME_UNIX_NANO,
                    "version": peer.version,
                }
            )
    return _v1(200, dict(sorted(data.items())))


#: path -> {method: handler}, as registered in ``nsqlookupd/http.go`` (pprof aside).
ROUTES: dict[str, dict[str, Handler]] = {
    "/ping": {"GET": ping},
    "/info": {"GET": info},
    "/debug": {"GET": debug},
    "/lookup": {"GET": lookup},
    "/topics": {"GET": topics},
    "/channels": {"GET": channels},
    "/nodes": {"GET": nodes},
    "/topic/create": {"POST": topic_create},
    "/topic/delete": {"POST": topic_delete},
    "/channel/create": {"POST": channel_create},
    "/channel/delete": {"POST": channel_delete},
    "/topic/tombstone": {"POST": topic_tombstone},
}
_METHODS = sorted({m for methods in ROUTES.values() for m in methods})


# -- routing (httprouter v1.3.0) -------------------------------------------------------


def _allowed(path: str, method: str) -> str:
    """httprouter's ``allowed``: the other methods of ``path``, plus OPTIONS, sorted."""
    methods = [m for m in ROUTES.get(path, {}) if m != method]
    return ", ".join(sorted([*methods, "OPTIONS"])) if methods else ""


def _clean_path(path: str) -> str:
    """httprouter's ``CleanPath``: rooted, ``.``/``..``/``//`` resolved, the trailing
    slash kept."""
    cleaned = posixpath.normpath("/" + path)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def _fixed_path(path: str, method: str) -> str | None:
    """A route of ``method`` that ``path`` names up to letter case and a trailing slash."""
    wanted = _clean_path(path).lower()
    for route, methods in ROUTES.items():
        if method in methods and wanted in (route.lower(), route.lower() + "/"):
            return route
    return None


def _redirect(method: str, path: str, raw_query: str) -> Answer:
    location = path + ("?" + raw_query if raw_query else "")
    if method == "GET":
        # Go's http.Redirect: a short HTML body for GET and HEAD only.
        body = f'<a href="{_html_escape(location)}">Moved Permanently</a>.\n\n'.encode()
        return Answer(301, [HTML_TYPE, ("Location", location)], body)
    return Answer(307, [("Location", location)])


def _html_escape(text: str) -> str:
    for raw, escaped in (
        ("&", "&amp;"),
        ("'", "&#39;"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ('"', "&#34;"),
    ):
        text = text.replace(raw, escaped)
    return text


def split_target(target: str) -> tuple[str, str]:
    """``(path, raw query)`` from a request target as Go's ``ParseRequestURI`` reads
    it: no fragment is split off, so a raw ``#`` stays in the query."""
    if target.startswith(("http://", "https://")):  # absolute form
        rest = target.split("://", 1)[1]
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
    raw_path, _, raw_query = target.partition("?")
    return raw_path, raw_query


def respond(lookupd: Lookupd, method: str, target: str) -> Answer:
    """Route one request and run its handler, with httprouter's 301/307, 404, 405 and
    OPTIONS answers and nsqlookupd's ``500 INTERNAL_ERROR`` if a handler fails."""
    raw_path, raw_query = split_target(target)
    try:
        path = _unescape(raw_path, plus_is_space=False)
    except ValueError:  # Go's server refuses the request line itself
        return Answer(400, [TEXT_TYPE], b"400 Bad Request")
    handler = ROUTES.get(path, {}).get(method)
    if handler is not None:
        try:
            return handler(lookupd, parse_query(raw_query))
        except APIError as exc:
            return _v1(exc.status, exc.code)
        except Exception:  # a bug must not take the lookupd down
            log.exception("HTTP handler failed for %s %s", method, target)
            return _v1(500, "INTERNAL_ERROR")
    if method in _METHODS and method != "CONNECT" and path != "/":
        if len(path) > 1 and path.endswith("/") and method in ROUTES.get(path[:-1], {}):
            return _redirect(method, path[:-1], raw_query)
        fixed = _fixed_path(path, method)
        if fixed is not None:
            return _redirect(method, fixed, raw_query)
    allow = _allowed(path, method)
    if method == "OPTIONS":
        if allow:
            return Answer(200, [("Allow", allow)])
    elif allow:
        answer = _v1(405, "METHOD_NOT_ALLOWED")
        return Answer(405, [("Allow", allow), *answer.headers], answer.body)
    return _v1(404, "NOT_FOUND")
