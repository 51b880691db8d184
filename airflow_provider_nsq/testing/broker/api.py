"""nsqd 1.3.0's HTTP API, the parts tests and demos use.

``GET /ping``, ``GET /info``, ``POST /pub?topic=T[&defer=ms]``, ``POST /mpub?topic=T
[&binary=true]``, ``GET /stats[?format=json&topic=T&channel=C&include_clients=..]``, and
``POST /topic/{create,delete,empty,pause,unpause}``,
``POST /channel/{create,delete,empty,pause,unpause}`` with nsqd's query parameters,
status codes and ``{"message": "..."}`` error bodies, so tests that use them also pass
against a real nsqd.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_nsq.protocol.names import is_valid_name

from ..servers.http_api import (
    JSON_CONTENT_TYPE,
    NSQ_CONTENT_TYPE,
    APIError,
    nsq_router,
    plain_text,
    respond_v1,
    v1,
)
from ..servers.http_server import Handler, Request, Response
from ..wire.command_reader import CommandReader
from .channel import QueueFull
from .commands import read_mpub
from .errors import ClientError
from .state import BrokerState


def _topic_arg(broker: BrokerState, request: Request) -> str:
    name = request.arg("topic")
    if name is None:
        raise APIError(400, "MISSING_ARG_TOPIC")
    if not is_valid_name(name):
        raise APIError(400, "INVALID_TOPIC")
    return name


def _topic_channel_args(broker: BrokerState, request: Request) -> tuple[str, str]:
    topic = request.arg("topic")
    if topic is None:
        raise APIError(400, "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise APIError(400, "INVALID_ARG_TOPIC")
    channel = request.arg("channel")
    if channel is None:
        raise APIError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise APIError(400, "INVALID_ARG_CHANNEL")
    if topic not in broker.topics:
        raise APIError(404, "TOPIC_NOT_FOUND")
    return topic, channel


def _existing_topic(broker: BrokerState, request: Request) -> str:
    name = request.arg("topic")
    if name is None:
        raise APIError(400, "MISSING_ARG_TOPIC")
    if name not in broker.topics:
        raise APIError(404, "TOPIC_NOT_FOUND")
    return name


def _publish(broker: BrokerState, topic: str, bodies: list[bytes], defer_ms: int = 0) -> None:
    try:
        broker.get_topic(topic).publish(bodies, defer_ms)
    except QueueFull as exc:
        # nsqd answers 503 EXITING when the topic refuses a message; say why.
        raise APIError(503, f"EXITING ({exc})") from None


def ping(broker: BrokerState, request: Request) -> str:
    return "OK"


def info(broker: BrokerState, request: Request) -> dict[str, Any]:
    return {
        "version": broker.version,
        "broadcast_address": broker.options.broadcast_address,
        "hostname": broker.options.broadcast_address,
        "http_port": broker.http_port,
        "tcp_port": broker.tcp_port,
        "start_time": broker.start_time,
    }


def pub(broker: BrokerState, request: Request) -> str:
    opts = broker.options
    if (request.content_length or 0) > opts.max_msg_size or len(request.body) > opts.max_msg_size:
        raise APIError(413, "MSG_TOO_BIG")
    if not request.body:
        raise APIError(400, "MSG_EMPTY")
    topic = _topic_arg(broker, request)
    defer_ms = 0
    defer = request.arg("defer")
    if defer is not None:
        try:
            defer_ms = int(defer)
        except ValueError:
            raise APIError(400, "INVALID_DEFER") from None
        if not 0 <= defer_ms <= opts.max_req_timeout:
            raise APIError(400, "INVALID_DEFER")
    _publish(broker, topic, [request.body], defer_ms)
    return "OK"


def mpub(broker: BrokerState, request: Request) -> str:
    opts = broker.options
    if (request.content_length or 0) > opts.max_body_size:
        raise APIError(413, "BODY_TOO_BIG")
    topic = _topic_arg(broker, request)
    body = request.body
    bodies: list[bytes] = []
    if "binary" in request.query:
        bodies = _binary_mpub(body, opts.max_msg_size, opts.max_body_size)
    else:
        if len(body) > opts.max_body_size:
            raise APIError(413, "BODY_TOO_BIG")
        for line in body.split(b"\n"):
            if not line:
                continue  # nsqd silently skips empty lines
            if len(line) > opts.max_msg_size:
                raise APIError(413, "MSG_TOO_BIG")
            bodies.append(line)
    if bodies:
        _publish(broker, topic, bodies)
    return "OK"


def _binary_mpub(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    # nsqd reuses readMPUB and answers 413 with the TCP error code minus "E_".
    reader = CommandReader()
    reader.feed(body)
    reading = read_mpub(reader, max_msg_size, max_body_size)
    try:
        _, code, _ = next(reading)  # it needs more bytes than the body has
    except StopIteration as done:
        bodies: list[bytes] = done.value
        return bodies
    except ClientError as err:
        code = err.code
    raise APIError(413, code.removeprefix("E_"))


def stats(broker: BrokerState, request: Request) -> dict[str, Any] | str:
    include_clients = request.arg("include_clients") not in ("false", "0")
    data = broker.stats(
        topic=request.arg("topic") or None,
        channel=request.arg("channel") or None,
        include_clients=include_clients,
    )
    if request.arg("format") == "json":
        return data
    return _stats_text(data, broker.start_time)


def _stats_text(data: dict[str, Any], start_time: int) -> str:
    lines = [
        f"nsqd v{data['version']} (embedded, airflow-provider-nsq)",
        f"start_time {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(start_time))}",
        f"uptime {int(time.time()) - start_time}s",
        "",
        f"Health: {data['health']}",
        "",
    ]
    if not data["topics"]:
        lines.append("Topics: None")
    else:
        lines.append("Topics:")
        for t in data["topics"]:
            lines.append(
                f"   [{t['topic_name']:<25}] depth: {t['depth']:<5} be-depth: 0     "
                f"msgs: {t['message_count']:<8}"
            )
            for c in t["channels"]:
                lines.append(
                    f"      [{c['channel_name']:<25}] depth: {c['depth']:<5} be-depth: 0     "
                    f"inflt: {c['in_flight_count']:<4} def: {c['deferred_count']:<4} "
                    f"re-q: {c['requeue_count']:<5} timeout: {c['timeout_count']:<5} "
                    f"msgs: {c['message_count']:<8}"
                )
                for client in c["clients"] or ():
                    lines.append(
                        f"        [V2 {client['client_id']:<21}] state: {client['state']} "
                        f"inflt: {client['in_flight_count']:<4} rdy: {client['ready_count']:<4} "
                        f"fin: {client['finish_count']:<8} re-q: {client['requeue_count']:<8} "
                        f"msgs: {client['message_count']:<8}"
                    )
    return "\n".join(lines) + "\n"


def topic_create(broker: BrokerState, request: Request) -> None:
    broker.get_topic(_topic_arg(broker, request))


def topic_delete(broker: BrokerState, request: Request) -> None:
    broker.delete_topic(_existing_topic(broker, request))


def topic_empty(broker: BrokerState, request: Request) -> None:
    # nsqd's doEmptyTopic alone checks the name before looking the topic up.
    name = request.arg("topic")
    if name is not None and not is_valid_name(name):
        raise APIError(400, "INVALID_TOPIC")
    broker.topics[_existing_topic(broker, request)].empty()


def topic_pause(broker: BrokerState, request: Request) -> None:
    broker.topics[_existing_topic(broker, request)].set_paused(True)


def topic_unpause(broker: BrokerState, request: Request) -> None:
    broker.topics[_existing_topic(broker, request)].set_paused(False)


def channel_create(broker: BrokerState, request: Request) -> None:
    topic, channel = _topic_channel_args(broker, request)
    broker.topics[topic].get_channel(channel)


def _existing_channel(broker: BrokerState, request: Request) -> tuple[str, str]:
    topic, channel = _topic_channel_args(broker, request)
    if channel not in broker.topics[topic].channels:
        raise APIError(404, "CHANNEL_NOT_FOUND")
    return topic, channel


def channel_delete(broker: BrokerState, request: Request) -> None:
    topic, channel = _existing_channel(broker, request)
    broker.topics[topic].delete_channel(channel)


def channel_empty(broker: BrokerState, request: Request) -> None:
    topic, channel = _existing_channel(broker, request)
    broker.topics[topic].channels[channel].empty()


def channel_pause(broker: BrokerState, request: Request) -> None:
    topic, channel = _existing_channel(broker, request)
    broker.topics[topic].channels[channel].set_paused(True)


def channel_unpause(broker: BrokerState, request: Request) -> None:
    topic, channel = _existing_channel(broker, request)
    broker.topics[topic].channels[channel].set_paused(False)


_ROUTES: dict[str, tuple[str, Callable[..., Any]]] = {
    "/info": ("GET", info),
    "/pub": ("POST", pub),
    "/mpub": ("POST", mpub),
    "/stats": ("GET", stats),
    "/topic/create": ("POST", topic_create),
    "/topic/delete": ("POST", topic_delete),
    "/topic/empty": ("POST", topic_empty),
    "/topic/pause": ("POST", topic_pause),
    "/topic/unpause": ("POST", topic_unpause),
    "/channel/create": ("POST", channel_create),
    "/channel/delete": ("POST", channel_delete),
    "/channel/empty": ("POST", channel_empty),
    "/channel/pause": ("POST", channel_pause),
    "/channel/unpause": ("POST", channel_unpause),
}


def build_app(broker: BrokerState) -> Handler:
    """The broker's HTTP API: nsqd's routes, with its TLS-required answer in front."""
    routes: dict[str, dict[str, Handler]] = {
        "/ping": {"GET": plain_text(functools.partial(ping, broker))}
    }
    for path, (method, handler) in _ROUTES.items():
        routes[path] = {method: v1(functools.partial(handler, broker))}
    router = nsq_router(routes)

    def app(request: Request) -> Response:
        if broker.options.http_tls_required and not request.secure:
            body = f'{{"message": "TLS_REQUIRED", "https_port": {broker.https_port or 0}}}'
            return Response(403, body.encode(), {**NSQ_CONTENT_TYPE, **JSON_CONTENT_TYPE})
        return router(request)

    return app


def body_too_large(request: Request) -> Response:
    """Over ``max_body_size + max_msg_size``: refused before the body is read."""
    return respond_v1(413, "BODY_TOO_BIG")
