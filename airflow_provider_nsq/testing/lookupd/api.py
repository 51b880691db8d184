"""nsqlookupd 1.3.0's HTTP API: handlers, on the shared Go-like HTTP server.

What the recordings pin (docs/nsqlookupd-facts.md sections 1-3):

- Every answer is the bare JSON document (no ``status_code``/``data`` envelope), and the
  ``Accept: application/vnd.nsq; version=1.0`` header changes nothing.
- Headers: JSON answers and errors carry ``Content-Type: application/json;
  charset=utf-8`` and ``X-Nsq-Content-Type: nsq; version=1.0``; a successful POST has an
  empty body and only the ``X-Nsq-Content-Type``; ``/ping`` is ``text/plain`` without it
  (:mod:`..servers.http_api` shapes answers as nsqlookupd's ``internal/http_api`` does).
- Errors are ``{"message": "<CODE>"}``; parameters come only from the query string
  (Go's ``url.ParseQuery``: a ``;`` or a bad ``%`` escape is ``400 INVALID_REQUEST``), a
  repeated parameter uses its first value, and a raw ``#`` stays part of the query.
- Routing is httprouter's (:class:`..servers.http_server.Router`): 405 with ``Allow``, OPTIONS,
  no implicit HEAD, 301/307 redirects for a trailing slash or letter case, 404.

Each handler takes the lookupd and the parsed query and returns the data to answer
(``None``: an empty 200) or raises :class:`~..servers.http_api.APIError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow_provider_nsq.protocol.names import is_valid_name

from ..servers.http_api import APIError, nsq_router, plain_text, v1
from ..servers.http_server import Request, Router
from .options import NSQLOOKUPD_VERSION
from .registry import GO_ZERO_TIME_UNIX_NANO, Registration, filter_active
from .state import LookupdState

log = logging.getLogger("airflow_provider_nsq.testing.lookupd")

Query = dict[str, list[str]]


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


def parse_query(raw_query: str) -> Query:
    """``url.ParseQuery`` (Go 1.19): ``&``-separated; ``;`` and bad escapes are errors
    (the parse goes on, but nsqlookupd then answers ``INVALID_REQUEST``)."""
    values: Query = {}
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


def _get(params: Query, name: str, missing: str) -> str:
    values = params.get(name)
    if values is None:
        raise APIError(400, missing)
    return values[0]


def _topic_channel(params: Query) -> tuple[str, str]:
    """``http_api.GetTopicChannelArgs``: the four errors, in this order."""
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise APIError(400, "INVALID_ARG_TOPIC")
    channel = _get(params, "channel", "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise APIError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


# -- handlers ------------------------------------------------------------------------------


def ping(lookupd: LookupdState, params: Query) -> str:
    return "OK"


def info(lookupd: LookupdState, params: Query) -> Any:
    return {"version": NSQLOOKUPD_VERSION}


def topics(lookupd: LookupdState, params: Query) -> Any:
    keys = lookupd.db.find_registrations("topic", "*", "")
    return {"topics": [k.key for k in keys]}


def channels(lookupd: LookupdState, params: Query) -> Any:
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    keys = lookupd.db.find_registrations("channel", topic, "*")
    return {"channels": [k.subkey for k in keys]}


def lookup(lookupd: LookupdState, params: Query) -> Any:
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
    # A Go map marshalled: keys sorted.
    return {
        "channels": [k.subkey for k in channel_keys],
        "producers": [p.peer.lookup_entry() for p in producers],
    }


def nodes(lookupd: LookupdState, params: Query) -> Any:
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
    return {"producers": entries}


def topic_create(lookupd: LookupdState, params: Query) -> None:
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise APIError(400, "INVALID_ARG_TOPIC")
    log.info("DB: adding topic(%s)", topic)
    lookupd.db.add_registration(Registration("topic", topic, ""))


def topic_delete(lookupd: LookupdState, params: Query) -> None:
    # Only this lookupd's registry changes: no nsqd is told
    # (docs/nsqlookupd-facts.md section 8).
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    db = lookupd.db
    for key in db.find_registrations("channel", topic, "*"):
        log.info("DB: removing channel(%s) from topic(%s)", key.subkey, topic)
        db.remove_registration(key)
    for key in db.find_registrations("topic", topic, ""):
        log.info("DB: removing topic(%s)", topic)
        db.remove_registration(key)


def topic_tombstone(lookupd: LookupdState, params: Query) -> None:
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    node = _get(params, "node", "MISSING_ARG_NODE")
    log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
    for producer in lookupd.db.find_producers("topic", topic, ""):
        peer = producer.peer
        # An exact string compare with broadcast_address:http_port
        # (docs/nsqlookupd-facts.md section 2).
        if f"{peer.broadcast_address}:{peer.http_port}" == node:
            producer.tombstone()


def channel_create(lookupd: LookupdState, params: Query) -> None:
    topic, channel = _topic_channel(params)
    log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
    lookupd.db.add_registration(Registration("channel", topic, channel))
    lookupd.db.add_registration(Registration("topic", topic, ""))


def channel_delete(lookupd: LookupdState, params: Query) -> None:
    topic, channel = _topic_channel(params)
    keys = lookupd.db.find_registrations("channel", topic, channel)
    if not keys:
        raise APIError(404, "CHANNEL_NOT_FOUND")
    log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
    for key in keys:
        lookupd.db.remove_registration(key)


def debug(lookupd: LookupdState, params: Query) -> Any:
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
    return dict(sorted(data.items()))


Handler = Callable[[LookupdState, Query], Any]

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


def raw_query(target: str) -> str:
    """The query of a request target as Go's ``ParseRequestURI`` keeps it: no fragment
    is split off, so a raw ``#`` stays part of it."""
    return target.partition("?")[2]


def router(lookupd: LookupdState) -> Router:
    """The lookupd's HTTP application: ``Request -> Response``."""

    def bind(handler: Handler) -> Callable[[Request], Any]:
        def serve(request: Request) -> Any:
            return handler(lookupd, parse_query(raw_query(request.target)))

        return serve

    routes = {
        path: {
            method: (plain_text(bind(h)) if h is ping else v1(bind(h)))
            for method, h in methods.items()
        }
        for path, methods in ROUTES.items()
    }
    return nsq_router(routes)
