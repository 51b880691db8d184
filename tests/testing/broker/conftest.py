"""Helpers for the broker tests: raw connections to an embedded broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from airflow_provider_nsq.testing.handles import NSQDServer
from tests.support.nsqd_wire import Peer, connect


@pytest.fixture
def broker(nsqd_factory: Callable[..., NSQDServer]) -> NSQDServer:
    """A fresh embedded broker with default flags (no shared state between tests)."""
    return nsqd_factory()


@pytest.fixture
def open_peer() -> Iterator[Callable[..., Peer]]:
    """``open_peer(server)``: a raw V2 connection, closed after the test."""
    peers: list[Peer] = []

    def opener(server: NSQDServer, magic: bytes = b"  V2") -> Peer:
        peer = connect((server.host, server.tcp_port), magic)
        peers.append(peer)
        return peer

    yield opener
    for peer in peers:
        peer.close()
