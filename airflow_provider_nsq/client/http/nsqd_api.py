"""nsqd's HTTP API, the part a consumer needs before it takes anything.

A subscribe window or a TCP peek makes nsqd deliver, and every delivery that is handed
back counts (``attempts + 1``). ``/stats`` tells how many messages a channel holds
without touching them, so a sensor can wait for ``min_messages`` for free. Shapes as
real nsqd 1.3.0 answers them (no recording covers nsqd's HTTP API; the cases below
were checked against the real daemon):

- ``"topics": null`` when the topic does not exist;
- the topic without the channel when the channel does not exist (a topic that has no
  channel at all keeps its messages for the first channel that appears);
- ``depth`` counts memory and disk (``backend_depth`` is part of it), ready to deliver;
  ``in_flight_count`` and ``deferred_count`` are not ready.

Each call is written once, as steps (:meth:`NSQDHTTPClient.channel_depth_steps`: HTTP
requests, :mod:`..runners.steps`); the blocking and asyncio methods only run it.

The administration endpoints (``POST /topic/{create,delete,empty,pause,unpause}`` and
``/channel/...``, :meth:`NSQDHTTPClient.admin_steps`) answer as nsqd 1.3.0's
``nsqd/http.go`` does: 200 with an empty body; 404 ``TOPIC_NOT_FOUND`` for a topic it
does not have (``/channel/create`` included: the topic comes first), 404
``CHANNEL_NOT_FOUND`` for a channel; create is idempotent (200 for what exists), so
whether it existed is read from ``/stats`` first.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

from ...protocol.errors import NSQConnectionError, NSQHTTPError, NSQProtocolError, NSQTimeoutError
from ...protocol.names import is_ephemeral, validate_channel_name, validate_topic_name
from ...protocol.value_checks import is_int
from ..runners.asyncio_runner import arun
from ..runners.blocking_runner import run
from ..runners.steps import HTTPSteps
from ..settings.address import format_address
from ..settings.client_config import ClientConfig
from ..settings.connection_settings import ConnectionSettings
from ..transport.http_request import NSQ_V1_ACCEPT, HTTPRequest, HTTPResponse
from ..transport.tls import build_ssl_context

_HEADERS = (("Accept", NSQ_V1_ACCEPT),)

#: What it raises when the API cannot be read (down, slow, an error status, not nsqd's
#: answer): a sensor or trigger then falls back to a TCP window or peek.
HTTP_UNREADABLE = (NSQConnectionError, NSQTimeoutError, NSQHTTPError, NSQProtocolError)


@dataclass(frozen=True, slots=True)
class ChannelDepth:
    """What one nsqd holds for ``topic``/``channel``, from its ``/stats``.

    ``exists`` is False when the channel did not exist when asked: ``depth`` is then the
    topic's own queue if the topic has no channel yet (the first channel to appear gets
    all of it), else 0.
    """

    nsqd: str  # the HTTP address asked, host:port
    topic: str
    channel: str
    depth: int
    in_flight: int
    deferred: int
    paused: bool
    exists: bool

    @property
    def ready(self) -> int:
        """Messages a subscriber could be given now (none while the channel is paused)."""
        return 0 if self.paused else self.depth


def _int(doc: Mapping[str, Any], key: str, url: str) -> int:
    value = doc.get(key, 0)
    if not is_int(value):
        raise NSQProtocolError(f"{url}: {key!r} is not a number in the stats: {value!r}")
    return value


def _unwrap(doc: Any, url: str) -> Mapping[str, Any]:
    """nsqd's stats document; also accepts the pre-1.0 ``{"data": {...}}`` envelope."""
    if isinstance(doc, dict) and "topics" not in doc and isinstance(doc.get("data"), dict):
        doc = doc["data"]
    if not isinstance(doc, dict) or "topics" not in doc:
        raise NSQProtocolError(f"{url} did not answer with nsqd's stats: {str(doc)[:80]!r}")
    return doc


def parse_channel_depth(
    nsqd: str, topic: str, channel: str, doc: Any, url: str = "/stats"
) -> ChannelDepth:
    """A :class:`ChannelDepth` from a ``/stats?format=json&topic=...`` document."""
    stats = _unwrap(doc, url)
    topics = stats["topics"] or []
    if not isinstance(topics, list):
        raise NSQProtocolError(f"{url}: 'topics' is not a list: {topics!r}")
    found = next((t for t in topics if isinstance(t, dict) and t.get("topic_name") == topic), None)
    if found is None:
        return ChannelDepth(nsqd, topic, channel, 0, 0, 0, False, False)
    channels = found.get("channels") or []
    mine = next((c for c in channels if c.get("channel_name") == channel), None)
    if mine is None:
        # A paused topic keeps its queue from the channel that will appear.
        held = 0 if channels else _int(found, "depth", url)
        return ChannelDepth(nsqd, topic, channel, held, 0, 0, bool(found.get("paused")), False)
    return ChannelDepth(
        nsqd,
        topic,
        channel,
        _int(mine, "depth", url),
        _int(mine, "in_flight_count", url),
        _int(mine, "deferred_count", url),
        bool(mine.get("paused")),  # a paused topic still lets the channel deliver
        True,
    )


def combine_depths(topic: str, channel: str, depths: Sequence[ChannelDepth]) -> ChannelDepth:
    """One :class:`ChannelDepth` for a channel spread over several nsqds (every producer
    nsqlookupd lists): ``depth`` is what is ready on all of them (a paused channel's
    messages are not), ``nsqd`` lists the HTTP addresses asked."""
    return ChannelDepth(
        nsqd=", ".join(d.nsqd for d in depths) or "no nsqd has the topic",
        topic=topic,
        channel=channel,
        depth=sum(d.ready for d in depths),
        in_flight=sum(d.in_flight for d in depths),
        deferred=sum(d.deferred for d in depths),
        paused=False,
        exists=any(d.exists for d in depths),
    )


#: What administration does to a topic or a channel.
AdminAction = Literal["create", "delete", "empty", "pause", "unpause"]
#: What it did on one nsqd (or one nsqlookupd): the action's past tense, ``exists``
#: (create: it was there already) or ``not_found`` (not there: nothing done).
AdminOutcome = Literal["created", "exists", "deleted", "emptied", "paused", "unpaused", "not_found"]
#: The past tense of each action, as an outcome.
DONE: dict[AdminAction, AdminOutcome] = {
    "create": "created",
    "delete": "deleted",
    "empty": "emptied",
    "pause": "paused",
    "unpause": "unpaused",
}


def find_in_stats(doc: Any, topic: str, channel: str | None, url: str) -> bool:
    """Whether a ``/stats`` document lists ``topic`` (and ``channel`` of it)."""
    topics = _unwrap(doc, url)["topics"] or []
    found = next((t for t in topics if isinstance(t, dict) and t.get("topic_name") == topic), None)
    if found is None or channel is None:
        return found is not None
    return any(c.get("channel_name") == channel for c in found.get("channels") or ())


def _check(response: HTTPResponse) -> HTTPResponse:
    if response.status != 200:
        raise NSQHTTPError(response.url, response.status, response.error_text())
    return response


class NSQDHTTPClient:
    """One nsqd's HTTP API (``--http-address``, or ``--https-address`` with TLS).

    Every call is one or a few requests, each bounded by ``timeout`` seconds. Errors are
    :class:`NSQConnectionError` (unreachable; :class:`NSQTLSError` for TLS),
    :class:`NSQTimeoutError`, :class:`NSQHTTPError` (an error status, with nsqd's text)
    and :class:`NSQProtocolError` (not nsqd's answer), each naming the URL.

    :param host: nsqd's host.
    :param port: its HTTP (or HTTPS) port.
    :param timeout: seconds per request, connecting included.
    :param ssl_context: HTTPS when given (see :meth:`from_config`).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname

    @classmethod
    def from_config(
        cls,
        config: ClientConfig,
        *,
        http_port: int | None = None,
        https_port: int | None = None,
        host: str | None = None,
    ) -> NSQDHTTPClient | None:
        """The HTTP API of the nsqd ``config`` points at (or of ``host``): HTTPS on
        ``https_port`` with the connection's TLS settings when ``config.tls`` is on and
        that port is known, else plain HTTP on ``http_port``; None when neither is known.
        Bounded by ``config.connect_timeout`` per request."""
        host = host or config.host
        if config.tls and https_port:
            return cls(
                host,
                https_port,
                timeout=config.connect_timeout,
                ssl_context=build_ssl_context(config),
                server_hostname=config.tls_server_name or host,
            )
        if http_port:
            return cls(host, http_port, timeout=config.connect_timeout)
        return None

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> NSQDHTTPClient | None:
        """The HTTP API of a connection's nsqd (``https_port`` when TLS is on and it is
        given, else ``http_port``); None when neither is given."""
        return cls.from_config(
            settings.client, http_port=settings.http_port, https_port=settings.https_port
        )

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    def __repr__(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"<{type(self).__name__} {scheme}://{self.address}>"

    # -- calls ---------------------------------------------------------------------------

    def channel_depth(self, topic: str, channel: str, *, create: bool = False) -> ChannelDepth:
        """How many messages ``channel`` holds, without taking any.

        :param create: when the channel does not exist yet, create it (and its topic),
            as a SUB would, so that messages published from now on wait for it. Never
            done for ``#ephemeral`` channels (nsqd would keep them with no subscriber).
        """
        return run(self.channel_depth_steps(topic, channel, create=create))

    async def achannel_depth(
        self, topic: str, channel: str, *, create: bool = False
    ) -> ChannelDepth:
        """:meth:`channel_depth` for asyncio (no thread, cancellable)."""
        return await arun(self.channel_depth_steps(topic, channel, create=create))

    def stats(self, topic: str | None = None, channel: str | None = None) -> dict[str, Any]:
        """``/stats?format=json`` (clients left out), unwrapped."""
        return run(self.stats_steps(topic, channel))

    async def astats(self, topic: str | None = None, channel: str | None = None) -> dict[str, Any]:
        return await arun(self.stats_steps(topic, channel))

    # -- the requests, as steps (:mod:`..runners.steps`) ----------------------------------------

    def channel_depth_steps(
        self, topic: str, channel: str, *, create: bool = False
    ) -> HTTPSteps[ChannelDepth]:
        """:meth:`channel_depth` as steps."""
        validate_topic_name(topic)
        validate_channel_name(channel)
        # Without a channel filter: one answer has the topic's own depth and its channels.
        response = _check((yield self._request("GET", _stats_target(topic))))
        depth = parse_channel_depth(self.address, topic, channel, response.json(), response.url)
        if create and not depth.exists and not is_ephemeral(channel):
            # /channel/create answers 404 TOPIC_NOT_FOUND for a missing topic: create it first.
            _check((yield self._request("POST", "/topic/create?" + urlencode({"topic": topic}))))
            query = urlencode({"topic": topic, "channel": channel})
            _check((yield self._request("POST", "/channel/create?" + query)))
        return depth

    def admin(self, action: AdminAction, topic: str, channel: str | None = None) -> AdminOutcome:
        """Create, delete, empty, pause or unpause ``topic`` (or its ``channel``) on this
        nsqd: what it did (``not_found`` when there was nothing to act on)."""
        return run(self.admin_steps(action, topic, channel))

    async def aadmin(
        self, action: AdminAction, topic: str, channel: str | None = None
    ) -> AdminOutcome:
        """:meth:`admin` for asyncio (no thread, cancellable)."""
        return await arun(self.admin_steps(action, topic, channel))

    def admin_steps(
        self, action: AdminAction, topic: str, channel: str | None = None
    ) -> HTTPSteps[AdminOutcome]:
        """:meth:`admin` as steps: a ``/stats`` read first for create (nsqd's create is
        idempotent), the topic created before a channel (``/channel/create`` needs it)."""
        validate_topic_name(topic)
        if channel is not None:
            validate_channel_name(channel)
        kind = "topic" if channel is None else "channel"
        query = {"topic": topic} if channel is None else {"topic": topic, "channel": channel}
        if action == "create":
            response = _check((yield self._request("GET", _stats_target(topic))))
            doc = response.json()
            if find_in_stats(doc, topic, channel, response.url):
                return "exists"
            if channel is not None and not find_in_stats(doc, topic, None, response.url):
                _check((yield self._post("topic", "create", {"topic": topic})))
        response = yield self._post(kind, action, query)
        if response.status == 404 and response.error_text() in (
            "TOPIC_NOT_FOUND",
            "CHANNEL_NOT_FOUND",
        ):
            return "not_found"
        _check(response)
        return DONE[action]

    def _post(self, kind: str, action: str, query: dict[str, str]) -> HTTPRequest:
        return self._request("POST", f"/{kind}/{action}?" + urlencode(query))

    def stats_steps(self, topic: str | None, channel: str | None) -> HTTPSteps[dict[str, Any]]:
        """:meth:`stats` as steps."""
        response = _check((yield self._request("GET", _stats_target(topic, channel))))
        return dict(_unwrap(response.json(), response.url))

    def _request(self, method: str, target: str) -> HTTPRequest:
        return HTTPRequest(
            self.host,
            self.port,
            target,
            self.timeout,
            method=method,
            headers=_HEADERS,
            ssl_context=self.ssl_context,
            server_hostname=self.server_hostname,
        )


def _stats_target(topic: str | None, channel: str | None = None) -> str:
    query: dict[str, str] = {"format": "json", "include_clients": "false", "include_mem": "false"}
    if topic:
        query["topic"] = topic
    if channel:
        query["channel"] = channel
    return "/stats?" + urlencode(query)
