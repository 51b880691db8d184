"""pytest plugin: NSQ servers for tests.

Installing the provider does not register it: a project loads it where it wants the
fixtures, with one line in its top-level ``conftest.py``::

    pytest_plugins = ["airflow_provider_nsq.testing.pytest_plugin"]

(registered for every pytest run, its fixture names would appear in every project that
installs the provider, and could clash with that project's own).

Fixtures:

- ``nsqd`` (session): an embedded nsqd-compatible broker, or the real nsqd named by
  ``NSQD_ADDRESS=host:port`` (and ``NSQD_HTTP_ADDRESS=host:port``, default: the TCP
  port + 1): an :class:`~.handles.NSQDServer` (addresses and HTTP helpers);
- ``nsqd_factory`` (function): ``nsqd_factory(**options)`` starts a dedicated embedded
  broker with custom nsqd flags (limits, TLS, AUTH ...), stopped after the test; skips
  when ``NSQD_ADDRESS`` is set;
- ``nsqlookupd`` (session): an embedded nsqlookupd-compatible server, or the real one
  named by ``NSQLOOKUPD_HTTP_ADDRESS`` (and ``NSQLOOKUPD_TCP_ADDRESS``, default: the
  HTTP port - 1): an :class:`~.handles.NSQLookupdServer`;
- ``nsq_topology`` (function): ``nsq_topology(n=2, **broker_options)`` gives a lookupd
  and ``n`` nsqds registered with it: an :class:`~.topologies.NSQTopology`;
- ``nsq_topic`` (function): a unique valid topic name for the test;
- ``tls_files`` (session): a throw-away CA, server certificate (127.0.0.1) and client
  certificate, see :func:`airflow_provider_nsq.testing.certificates.generate_tls_files`.

This is the only module of :mod:`airflow_provider_nsq.testing` that imports pytest.
Importing it is cheap: it imports neither Airflow, nor the client, nor the servers until
a fixture needs them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .broker import EmbeddedNSQD
    from .certificates import TLSFiles
    from .handles import NSQDServer, NSQLookupdServer
    from .topologies import EmbeddedTopology, NSQTopology


def _split_address(value: str, what: str) -> tuple[str, int]:
    # Here, not at the top: loading the plugin stays cheap for every pytest run.
    from ..client.settings.address import parse_address
    from ..protocol.errors import NSQValueError

    try:
        return parse_address(value, None, what)
    except NSQValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _env_list(name: str) -> list[str]:
    return [a.strip() for a in os.environ.get(name, "").split(",") if a.strip()]


def _external_nsqds() -> list[NSQDServer]:
    """The real nsqds of ``NSQD_ADDRESS`` (comma-separated ``host:port``s) and
    ``NSQD_HTTP_ADDRESS`` (the same order; default: each TCP port + 1)."""
    tcp = _env_list("NSQD_ADDRESS")
    http = _env_list("NSQD_HTTP_ADDRESS")
    if http and len(http) != len(tcp):
        raise pytest.UsageError("NSQD_HTTP_ADDRESS must list one address per NSQD_ADDRESS entry")
    if not tcp:
        return []
    from .handles import NSQDServer

    servers = []
    for i, address in enumerate(tcp):
        host, tcp_port = _split_address(address, "NSQD_ADDRESS")
        http_host, http_port = (
            _split_address(http[i], "NSQD_HTTP_ADDRESS") if http else (host, tcp_port + 1)
        )
        servers.append(NSQDServer(host, tcp_port, http_port, http_host=http_host))
    return servers


def _external_lookupd() -> NSQLookupdServer | None:
    """The real nsqlookupd of ``NSQLOOKUPD_HTTP_ADDRESS`` (and ``NSQLOOKUPD_TCP_ADDRESS``,
    default: the HTTP port - 1, as nsqlookupd's 4160/4161), or None."""
    http = os.environ.get("NSQLOOKUPD_HTTP_ADDRESS", "").strip()
    if not http:
        return None
    from .handles import NSQLookupdServer

    http_host, http_port = _split_address(http, "NSQLOOKUPD_HTTP_ADDRESS")
    tcp = os.environ.get("NSQLOOKUPD_TCP_ADDRESS", "").strip()
    host, tcp_port = (
        _split_address(tcp, "NSQLOOKUPD_TCP_ADDRESS") if tcp else (http_host, http_port - 1)
    )
    return NSQLookupdServer(host, tcp_port, http_port, http_host=http_host)


@pytest.fixture(scope="session")
def nsqd() -> Iterator[NSQDServer]:
    """The session's NSQ server: embedded, or ``NSQD_ADDRESS`` / ``NSQD_HTTP_ADDRESS``
    (the first one when they list several)."""
    external = _external_nsqds()
    if external:
        yield external[0]
        return
    from .broker import EmbeddedNSQD
    from .handles import nsqd_server_for

    with EmbeddedNSQD() as broker:
        yield nsqd_server_for(broker)


@pytest.fixture
def nsqd_factory() -> Iterator[Callable[..., NSQDServer]]:
    """``nsqd_factory(**options)``: a dedicated embedded broker with custom nsqd flags."""
    if os.environ.get("NSQD_ADDRESS"):
        pytest.skip("needs an embedded broker with custom flags")
    from .broker import EmbeddedNSQD
    from .handles import nsqd_server_for

    started: list[EmbeddedNSQD] = []

    def factory(**options: Any) -> NSQDServer:
        broker = EmbeddedNSQD(**options).start()
        started.append(broker)
        return nsqd_server_for(broker)

    try:
        yield factory
    finally:
        for broker in reversed(started):
            broker.stop()


@pytest.fixture(scope="session")
def nsqlookupd() -> Iterator[NSQLookupdServer]:
    """The session's nsqlookupd: embedded, or ``NSQLOOKUPD_HTTP_ADDRESS`` (and
    ``NSQLOOKUPD_TCP_ADDRESS``)."""
    external = _external_lookupd()
    if external is not None:
        yield external
        return
    from .handles import lookupd_server_for
    from .lookupd import EmbeddedNSQLookupd

    with EmbeddedNSQLookupd() as server:
        yield lookupd_server_for(server)


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
    from .topologies import NSQTopology, registered_with

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
            from .handles import lookupd_server_for, nsqd_server_for
            from .topologies import EmbeddedTopology

            embedded = EmbeddedTopology(
                n,
                lookupd_tcp_address=lookupd.tcp_address if lookupd is not None else None,
                **broker_options,
            )
            started.append(embedded)
            embedded.start()
            if embedded.lookupd is not None:
                lookupd = lookupd_server_for(embedded.lookupd)
            assert lookupd is not None
            brokers = list(embedded.nsqds)
            topology = NSQTopology(lookupd, [nsqd_server_for(b) for b in brokers], list(brokers))
        lookupd.wait_for(registered_with(lookupd, topology.nsqds), timeout=10)
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
    suffix = os.urandom(4).hex()
    stem = _UNSAFE.sub("_", request.node.name).strip("_") or "test"
    return f"t_{stem[: 64 - 3 - len(suffix)]}_{suffix}"


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (PEM paths)."""
    from .certificates import generate_tls_files

    return generate_tls_files(tmp_path_factory.mktemp("nsq-tls"))
