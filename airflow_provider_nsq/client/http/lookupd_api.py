"""nsqlookupd discovery: which nsqds have a topic, asked of every lookupd at once.

go-nsq and pynsq ask ONE nsqlookupd per poll (round-robin), so a dead one means a missed
poll. :class:`LookupdClient` asks all of them concurrently and unions their answers by
``broadcast_address:tcp_port`` (the address consumers connect to; the same nsqd can be
listed twice, docs/nsqlookupd-facts.md section 3). A lookupd that
cannot be read is logged and skipped; only when none answers is it an error, naming each one
and why.

Shapes as real nsqlookupd answers ``GET /lookup?topic=T``
(docs/nsqlookupd-facts.md sections 1 and 3): ``{"channels": [...],
"producers": [...]}`` with HTTP 200, also for a topic whose nsqds are gone (empty
``producers``); 404 ``{"message": "TOPIC_NOT_FOUND"}`` for a topic it never heard of. Both
mean "no nsqd has it right now". nsqlookupd before 1.0 wrapped answers as
``{"status_code": 200, "status_txt": "OK", "data": {...}}``: accepted too.

A lookup is written once, as steps (:meth:`LookupdClient.lookup_steps`: one HTTP request
per lookupd, all at once, :mod:`..runners.steps`); the blocking :meth:`LookupdClient.lookup` (one
short-lived thread per lookupd, joined before it returns) and the asyncio
:meth:`LookupdClient.alookup` only run it.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, urlencode

from ...protocol.errors import (
    NSQConnectionError,
    NSQError,
    NSQHTTPError,
    NSQProtocolError,
    NSQValueError,
)
from ...protocol.names import validate_topic_name
from ...protocol.value_checks import check_seconds, is_int
from ..runners.asyncio_runner import arun
from ..runners.blocking_runner import run
from ..runners.steps import Gather, HTTPSteps
from ..settings.address import (
    LookupdAddress,
    format_address,
    parse_addresses,
    parse_lookupd_address,
)
from ..transport.http_request import NSQ_V1_ACCEPT, HTTPRequest, HTTPResponse

log = logging.getLogger(__name__)

_HEADERS = (("Accept", NSQ_V1_ACCEPT),)
#: Seconds one lookupd may take to answer (connecting included) by default.
DEFAULT_LOOKUPD_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Producer:
    """One nsqd that has the topic, as nsqlookupd lists it.

    ``broadcast_address`` and the ports are what the nsqd announced (its
    ``--broadcast-address`` and ``--broadcast-tcp-port`` / ``--broadcast-http-port``):
    connect there.
    """

    broadcast_address: str
    tcp_port: int
    http_port: int
    hostname: str = ""
    version: str = ""

    @property
    def tcp_address(self) -> str:
        """``host:port`` of its TCP protocol (what a consumer connects to)."""
        return format_address(self.broadcast_address, self.tcp_port)

    @property
    def http_address(self) -> str:
        """``host:port`` of its HTTP API (``/stats`` for a channel's depth)."""
        return format_address(self.broadcast_address, self.http_port)


# -- the answer -----------------------------------------------------------------------


def _int_field(entry: dict[str, Any], key: str, url: str) -> int:
    value = entry.get(key)
    if not is_int(value) or not 0 < value < 65536:
        raise NSQProtocolError(f"{url}: producer {key!r} is not a port: {value!r}")
    return value


def parse_producer(entry: object, url: str) -> Producer:
    """A :class:`Producer` from one ``producers`` entry of ``/lookup``."""
    if not isinstance(entry, dict):
        raise NSQProtocolError(f"{url}: a producer entry is not an object: {entry!r:.80}")
    address = entry.get("broadcast_address")
    if not isinstance(address, str) or not address:
        raise NSQProtocolError(f"{url}: producer without a broadcast_address: {entry!r:.120}")
    hostname = entry.get("hostname")
    version = entry.get("version")
    return Producer(
        broadcast_address=address,
        tcp_port=_int_field(entry, "tcp_port", url),
        http_port=_int_field(entry, "http_port", url),
        hostname=hostname if isinstance(hostname, str) else "",
        version=version if isinstance(version, str) else "",
    )


def _is_topic_not_found(status: int, doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    if status == 404 and doc.get("message") == "TOPIC_NOT_FOUND":
        return True
    # nsqlookupd < 1.0: {"status_code": 404, "status_txt": "TOPIC_NOT_FOUND", "data": null}
    return doc.get("status_code") == 404 and doc.get("status_txt") == "TOPIC_NOT_FOUND"


def parse_lookup(response: HTTPResponse) -> list[Producer]:
    """The producers of one ``/lookup`` answer (``[]`` for ``TOPIC_NOT_FOUND``).

    :class:`NSQHTTPError` for another error status, :class:`NSQProtocolError` when the
    body is not a lookup answer.
    """
    try:
        doc: Any = response.json()
    except NSQProtocolError:
        if response.status != 200:
            raise NSQHTTPError(response.url, response.status, response.error_text()) from None
        raise
    if _is_topic_not_found(response.status, doc):
        return []
    if response.status != 200:
        raise NSQHTTPError(response.url, response.status, response.error_text())
    if isinstance(doc, dict) and "producers" not in doc and "status_code" in doc:
        if doc.get("status_code") != 200:  # the legacy envelope carries its own status
            raise NSQHTTPError(
                response.url, int(doc.get("status_code") or 0), str(doc.get("status_txt"))
            )
        doc = doc.get("data")
    # "producers": null is what Go writes for a nil slice.
    producers = doc.get("producers", ()) if isinstance(doc, dict) else ()
    if not isinstance(producers, (list, type(None))):
        raise NSQProtocolError(
            f"{response.url} did not answer with nsqlookupd's lookup: {response.body[:80]!r}"
        )
    return [parse_producer(entry, response.url) for entry in producers or []]


def merge_answers(
    lookupds: Sequence[LookupdAddress],
    answers: Sequence[list[Producer] | BaseException],
    topic: str,
) -> list[Producer]:
    """Union the producers of every lookupd that answered, by ``tcp_address``, in the
    order they were first listed. A lookupd that failed is logged; when all failed,
    :class:`NSQConnectionError` names each one and why."""
    producers: dict[str, Producer] = {}
    failures: list[str] = []
    for lookupd, answer in zip(lookupds, answers, strict=True):
        if isinstance(answer, BaseException):
            if not isinstance(answer, NSQError):
                raise answer  # a bug or a cancellation: not the lookupd's fault
            log.warning("nsqlookupd at %s skipped: %s", lookupd.url, answer)
            failures.append(f"{lookupd.url} ({answer})")
            continue
        for producer in answer:
            producers.setdefault(producer.tcp_address, producer)
    if failures and len(failures) == len(lookupds):
        raise NSQConnectionError(
            f"no nsqlookupd answered the lookup of topic {topic!r}: " + "; ".join(failures)
        )
    return list(producers.values())


# -- the client -----------------------------------------------------------------------


class LookupdClient:
    """Find the nsqds that have a topic, from one or more nsqlookupds.

    :param addresses: the lookupds' HTTP addresses (``host:port``, ``host``, or
        ``http://host:port``); a comma-separated string is accepted too.
    :param timeout: seconds each lookupd may take (connecting included); all are asked
        at the same time, so a lookup takes at most this long.
    :param ssl_context: for ``https://`` addresses (default: the system's verified one).
    """

    def __init__(
        self,
        addresses: Sequence[str] | str,
        *,
        timeout: float = DEFAULT_LOOKUPD_TIMEOUT_S,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.lookupds = [
            parse_lookupd_address(a) for a in parse_addresses(addresses, "lookupd_http_addresses")
        ]
        if not self.lookupds:
            raise NSQValueError("LookupdClient needs at least one nsqlookupd HTTP address")
        self.timeout = check_seconds(timeout, "lookupd timeout")
        self._ssl_context = ssl_context

    def __repr__(self) -> str:
        return f"<LookupdClient {', '.join(lookupd.url for lookupd in self.lookupds)}>"

    def _context(self, lookupd: LookupdAddress) -> ssl.SSLContext | None:
        if not lookupd.https:
            return None
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    @staticmethod
    def _target(topic: str) -> str:
        validate_topic_name(topic)
        return "/lookup?topic=" + quote(topic, safe="")

    def lookup(self, topic: str) -> list[Producer]:
        """The nsqds that have ``topic`` now (``[]``: none yet), from every lookupd."""
        return run(self.lookup_steps(topic))

    async def alookup(self, topic: str) -> list[Producer]:
        """:meth:`lookup` for asyncio: every lookupd at once, no thread."""
        return await arun(self.lookup_steps(topic))

    def lookup_steps(
        self, topic: str
    ) -> Generator[Gather[list[Producer]], list[list[Producer] | NSQError], list[Producer]]:
        """:meth:`lookup` as steps (:mod:`..runners.steps`): every lookupd asked at once."""
        target = self._target(topic)
        answers = yield Gather(tuple(self._ask(lookupd, target) for lookupd in self.lookupds))
        return merge_answers(self.lookupds, answers, topic)

    def registry_steps(
        self, action: Literal["create", "delete"], topic: str, channel: str | None = None
    ) -> Generator[Gather[str], list[str | NSQError], dict[str, str | NSQError]]:
        """Create or delete ``topic`` (or its ``channel``) in every nsqlookupd's registry,
        all at once, as nsqadmin does (``POST /topic/create``, ``/channel/delete`` ...):
        per lookupd (``host:port``), ``created``, ``deleted``, ``not_found`` (a channel it
        did not list) or the error that stopped it. No nsqd is contacted: each nsqd
        creates the channels its lookupds list when it gets the topic
        (docs/nsqlookupd-facts.md sections 2 and 4)."""
        validate_topic_name(topic)
        kind = "topic" if channel is None else "channel"
        query = {"topic": topic} if channel is None else {"topic": topic, "channel": channel}
        target = f"/{kind}/{action}?" + urlencode(query)
        done = "created" if action == "create" else "deleted"
        answers = yield Gather(
            tuple(self._post(lookupd, target, done) for lookupd in self.lookupds)
        )
        return {
            lookupd.address: answer for lookupd, answer in zip(self.lookupds, answers, strict=True)
        }

    def _post(self, lookupd: LookupdAddress, target: str, done: str) -> HTTPSteps[str]:
        request = HTTPRequest(
            lookupd.host,
            lookupd.port,
            target,
            self.timeout,
            method="POST",
            headers=_HEADERS,
            ssl_context=self._context(lookupd),
        )
        response: HTTPResponse = yield request
        if response.status == 404 and response.error_text() == "CHANNEL_NOT_FOUND":
            return "not_found"
        if response.status != 200:
            raise NSQHTTPError(response.url, response.status, response.error_text())
        return done

    def _ask(self, lookupd: LookupdAddress, target: str) -> HTTPSteps[list[Producer]]:
        request = HTTPRequest(
            lookupd.host,
            lookupd.port,
            target,
            self.timeout,
            headers=_HEADERS,
            ssl_context=self._context(lookupd),
        )
        return parse_lookup((yield request))
