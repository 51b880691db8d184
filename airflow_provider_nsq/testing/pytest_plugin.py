"""pytest plugin (entry point ``pytest11: nsq``): NSQ servers for tests.

Fixtures:

- ``nsqd`` (session): an embedded nsqd-compatible broker, or the real nsqd named by
  ``NSQD_ADDRESS=host:port`` (and ``NSQD_HTTP_ADDRESS=host:port``, default: the TCP
  port + 1) — see :class:`NSQDServer` for its attributes and helpers;
- ``nsqd_factory`` (function): ``nsqd_factory(**options)`` starts a dedicated embedded
  broker with custom nsqd flags (limits, TLS, AUTH ...), stopped after the test; skips
  when ``NSQD_ADDRESS`` is set;
- ``nsqlookupd`` (session): an embedded nsqlookupd-compatible server, or the real one
  named by ``NSQLOOKUPD_HTTP_ADDRESS`` (and ``NSQLOOKUPD_TCP_ADDRESS``, default: the
  HTTP port - 1) — see :class:`~.topology.NSQLookupdServer`;
- ``nsq_topology`` (function): ``nsq_topology(n=2, **broker_options)`` gives a lookupd
  and ``n`` nsqds registered with it — see :class:`~.topology.NSQTopology`;
- ``nsq_topic`` (function): a unique valid topic name for the test;
- ``tls_files`` (session): a throw-away CA, server certificate (127.0.0.1) and client
  certificate, see :func:`airflow_provider_nsq.testing.certificates.generate_tls_files`.

Importing this module is cheap: it imports neither Airflow nor the broker until a
fixture needs them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from .broker import EmbeddedNSQD
    from .certificates import TLSFiles
    from .embedded_topology import EmbeddedTopology
    from .lookupd import EmbeddedNSQLookupd
    from .topology import NSQLookupdServer, NSQTopology

T = TypeVar("T")

__all__ = ["NSQDServer"]


def wait_for(predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy (and return that); an
    ``AssertionError`` naming it after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            name = getattr(predicate, "__name__", repr(predicate))
            raise AssertionError(f"condition {name} not met within {timeout}s (last: {last!r})")
        time.sleep(interval)


def http_exchange(
    base_url: str,
    method: str,
    path: str,
    query: dict[str, Any] | None = None,
    body: bytes | None = None,
) -> tuple[int, bytes]:
    """One request to an nsqd's or nsqlookupd's HTTP API (with the v1 Accept header, as
    their clients send it); returns (status, body) whatever the status."""
    url = base_url + path
    if query:
        url += "?" + urllib.parse.urlencode(query)
    request = urllib.request.Request(
        url, data=body, method=method, headers={"Accept": "application/vnd.nsq; version=1.0"}
    )
    context = None
    if url.startswith("https:"):  # the embedded broker's throw-away certificate
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class NSQDServer:
    """An NSQ server for a test: its addresses and a few HTTP helpers.

    Works the same against the embedded broker (``embedded=True``, ``broker`` is the
    :class:`~airflow_provider_nsq.testing.broker.EmbeddedNSQD`) and a real nsqd
    (``embedded=False``, ``broker=None``): the helpers only use nsqd's HTTP API.
    """

    def __init__(
        self,
        host: str,
        tcp_port: int,
        http_port: int,
        broker: EmbeddedNSQD | None = None,
        http_scheme: str = "http",
        http_host: str | None = None,
    ) -> None:
        self.host = host
        self.http_host = http_host or host
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.broker = broker
        self.embedded = broker is not None
        self._scheme = http_scheme

    @property
    def tcp_address(self) -> str:
        return f"{self.host}:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"{self.http_host}:{self.http_port}"

    def __repr__(self) -> str:
        kind = "embedded" if self.embedded else "external"
        return f"NSQDServer({kind}, tcp={self.tcp_address}, http={self.http_address})"

    # -- HTTP --------------------------------------------------------------------------

    def http(
        self, method: str, path: str, query: dict[str, Any] | None = None, body: bytes | None = None
    ) -> tuple[int, bytes]:
        """One request to the HTTP API; returns (status, body) whatever the status."""
        return http_exchange(f"{self._scheme}://{self.http_address}", method, path, query, body)

    def _post(
        self, path: str, query: dict[str, Any], body: bytes = b"", ok: tuple[int, ...] = (200,)
    ) -> None:
        status, data = self.http("POST", path, query, body)
        if status not in ok:
            raise AssertionError(f"POST {path} {query} -> {status} {data[:200]!r}")

    def stats(self, topic: str | None = None) -> dict[str, Any]:
        """``/stats?format=json`` (nsqd 1.3 shape: ``version``, ``topics`` ... at the top)."""
        query: dict[str, Any] = {"format": "json"}
        if topic is not None:
            query["topic"] = topic
        status, data = self.http("GET", "/stats", query)
        if status != 200:
            raise AssertionError(f"GET /stats -> {status} {data[:200]!r}")
        doc: dict[str, Any] = json.loads(data)
        return doc.get("data", doc)  # nsqd < 1.0 wrapped it in "data"

    def topic_stats(self, topic: str) -> dict[str, Any] | None:
        for t in self.stats(topic).get("topics") or []:
            if t.get("topic_name") == topic:
                return t
        return None

    def channel_stats(self, topic: str, channel: str) -> dict[str, Any] | None:
        t = self.topic_stats(topic)
        for c in (t or {}).get("channels") or []:
            if c.get("channel_name") == channel:
                return c
        return None

    def http_publish(self, topic: str, body: bytes, defer_ms: int | None = None) -> None:
        query: dict[str, Any] = {"topic": topic}
        if defer_ms is not None:
            query["defer"] = defer_ms
        self._post("/pub", query, body)

    def create_topic(self, topic: str) -> None:
        self._post("/topic/create", {"topic": topic})

    def create_channel(self, topic: str, channel: str) -> None:
        """Create the topic and the channel, so messages published from now on wait."""
        self.create_topic(topic)
        self._post("/channel/create", {"topic": topic, "channel": channel})

    def delete_topic(self, topic: str) -> None:
        self._post("/topic/delete", {"topic": topic}, ok=(200, 404))

    # -- waiting -------------------------------------------------------------------------

    wait_for = staticmethod(wait_for)


def _server_for(broker: EmbeddedNSQD) -> NSQDServer:
    opts = broker.options
    if opts.http_tls_required and broker.https_port:
        return NSQDServer(broker.host, broker.tcp_port, broker.https_port, broker, "https")
    return NSQDServer(broker.host, broker.tcp_port, broker.http_port, broker)


def _split_address(value: str, what: str) -> tuple[str, int]:
    # Here, not at the top: loading the plugin stays cheap for every pytest run.
    from ..client.address import parse_address
    from ..protocol.errors import NSQValueError

    try:
        return parse_address(value, None, what)
    except NSQValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _external_nsqds() -> list[NSQDServer]:
    """The real nsqds of ``NSQD_ADDRESS`` (comma-separated ``host:port``s) and
    ``NSQD_HTTP_ADDRESS`` (the same order; default: each TCP port + 1)."""
    tcp = [a.strip() for a in os.environ.get("NSQD_ADDRESS", "").split(",") if a.strip()]
    http = [a.strip() for a in os.environ.get("NSQD_HTTP_ADDRESS", "").split(",") if a.strip()]
    if http and len(http) != len(tcp):
        raise pytest.UsageError("NSQD_HTTP_ADDRESS must list one address per NSQD_ADDRESS entry")
    servers = []
    for i, address in enumerate(tcp):
        host, tcp_port = _split_address(address, "NSQD_ADDRESS")
        http_host, http_port = (
            _split_address(http[i], "NSQD_HTTP_ADDRESS") if http else (host, tcp_port + 1)
        )
        servers.append(NSQDServer(host, tcp_port, http_port, http_host=http_host))
    return servers


@pytest.fixture(scope="session")
def nsqd() -> Iterator[NSQDServer]:
    """The session's NSQ server: embedded, or ``NSQD_ADDRESS`` / ``NSQD_HTTP_ADDRESS``
    (the first one when they list several)."""
    external = _external_nsqds()
    if external:
        yield external[0]
        return
    from .broker import EmbeddedNSQD

    broker = EmbeddedNSQD().start()
    try:
        yield _server_for(broker)
    finally:
        broker.stop()


@pytest.fixture
def nsqd_factory() -> Iterator[Callable[..., NSQDServer]]:
    """``nsqd_factory(**options)``: a dedicated embedded broker with custom nsqd flags."""
    if os.environ.get("NSQD_ADDRESS"):
        pytest.skip("needs an embedded broker with custom flags")
    from .broker import EmbeddedNSQD

    started: list[EmbeddedNSQD] = []

    def factory(**options: Any) -> NSQDServer:
        broker = EmbeddedNSQD(**options).start()
        started.append(broker)
        return _server_for(broker)

    try:
        yield factory
    finally:
        for broker in reversed(started):
            broker.stop()


# -- nsqlookupd and topologies ------------------------------------------------------------


def _external_lookupd() -> NSQLookupdServer | None:
    """The real nsqlookupd of ``NSQLOOKUPD_HTTP_ADDRESS`` (and ``NSQLOOKUPD_TCP_ADDRESS``,
    default: the HTTP port - 1, as nsqlookupd's 4160/4161), or None."""
    from .topology import NSQLookupdServer

    http = os.environ.get("NSQLOOKUPD_HTTP_ADDRESS", "").strip()
    if not http:
        return None
    http_host, http_port = _split_address(http, "NSQLOOKUPD_HTTP_ADDRESS")
    tcp = os.environ.get("NSQLOOKUPD_TCP_ADDRESS", "").strip()
    host, tcp_port = (
        _split_address(tcp, "NSQLOOKUPD_TCP_ADDRESS") if tcp else (http_host, http_port - 1)
    )
    return NSQLookupdServer(host, tcp_port, http_port, http_host=http_host)


def _lookupd_for(server: EmbeddedNSQLookupd) -> NSQLookupdServer:
    from .topology import NSQLookupdServer

    return NSQLookupdServer(server.host, server.tcp_port, server.http_port, server)


@pytest.fixture(scope="session")
def nsqlookupd() -> Iterator[NSQLookupdServer]:
    """The session's nsqlookupd: embedded, or ``NSQLOOKUPD_HTTP_ADDRESS`` (and
    ``NSQLOOKUPD_TCP_ADDRESS``)."""
    external = _external_lookupd()
    if external is not None:
        yield external
        return
    from .lookupd import EmbeddedNSQLookupd

    server = EmbeddedNSQLookupd().start()
    try:
        yield _lookupd_for(server)
    finally:
        server.stop()


@pytest.fixture
def nsq_topology() -> Iterator[Callable[..., NSQTopology]]:
    """``nsq_topology(n=2, **broker_options)``: an nsqlookupd and ``n`` nsqds registered
    with it, stopped after the test (nsqds first).

    Embedded by default: a fresh lookupd and ``n`` brokers (``broker_options`` are
    :class:`~airflow_provider_nsq.testing.broker.BrokerOptions` fields). With
    ``NSQLOOKUPD_HTTP_ADDRESS`` the lookupd is that real one, and the nsqds are the
    real ones of ``NSQD_ADDRESS`` (comma-separated, registered with it; the test is
    skipped when it lists fewer than ``n`` or broker options are given), or, without
    ``NSQD_ADDRESS``, embedded brokers registered with the real lookupd.
    """
    from .topology import NSQTopology, registered_with

    started: list[EmbeddedTopology] = []

    def factory(n: int = 2, **broker_options: Any) -> NSQTopology:
        if n < 1:
            raise ValueError(f"a topology needs at least one nsqd, got n={n}")
        lookupd = _external_lookupd()
        external_nsqds = _external_nsqds() if lookupd is not None else []
        if external_nsqds:
            assert lookupd is not None
            if broker_options:
                pytest.skip("needs embedded nsqds with custom flags")
            if len(external_nsqds) < n:
                pytest.skip(
                    f"needs {n} nsqds registered with NSQLOOKUPD_HTTP_ADDRESS: list them "
                    "in NSQD_ADDRESS (comma-separated)"
                )
            topology = NSQTopology(lookupd, external_nsqds[:n], [None] * n)
        else:
            from .embedded_topology import EmbeddedTopology

            embedded = EmbeddedTopology(
                n,
                lookupd_tcp_address=lookupd.tcp_address if lookupd is not None else None,
                **broker_options,
            )
            started.append(embedded)
            embedded.start()
            if embedded.lookupd is not None:
                lookupd = _lookupd_for(embedded.lookupd)
            assert lookupd is not None
            brokers = list(embedded.nsqds)
            topology = NSQTopology(lookupd, [_server_for(b) for b in brokers], list(brokers))
        wait_for(registered_with(lookupd, topology.nsqds), timeout=10)
        return topology

    try:
        yield factory
    finally:
        for embedded in reversed(started):
            embedded.stop()


_UNSAFE = re.compile(r"[^.a-zA-Z0-9_-]+")


@pytest.fixture
def nsq_topic(request: pytest.FixtureRequest) -> str:
    """A unique, valid topic name for this test (``t_<test name>_<random hex>``)."""
    suffix = secrets.token_hex(4)
    stem = _UNSAFE.sub("_", request.node.name).strip("_") or "test"
    return f"t_{stem[: 64 - 3 - len(suffix)]}_{suffix}"


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (PEM paths)."""
    from .certificates import generate_tls_files

    return generate_tls_files(tmp_path_factory.mktemp("nsq-tls"))
