"""A host name that does not resolve is reported with the host and the resolver's own
reason, by both drivers and the HTTP client (not as ``Unknown error -2``).

The host is under ``.invalid`` (RFC 6761: never resolves). Looking it up asks the local
resolver only; with no resolver at all the lookup still fails, with another reason
("Temporary failure in name resolution"), which the tests expect in that case.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from airflow_provider_nsq.client import ClientConfig
from airflow_provider_nsq.client.http.nsqd_api import NSQDHTTPClient
from airflow_provider_nsq.protocol.errors import NSQConnectionError
from tests.support.drivers import DRIVERS, make_driver

HOST = "nsqd.invalid"


@pytest.fixture(scope="module")
def reason() -> str:
    """What this machine's resolver says about :data:`HOST`."""
    try:
        socket.getaddrinfo(HOST, 4150)
    except socket.gaierror as exc:
        assert exc.strerror, exc
        return exc.strerror
    pytest.skip(f"this machine's resolver answers for {HOST}, which RFC 6761 reserves")


@pytest.mark.parametrize("kind", DRIVERS)
def test_a_host_name_typo_names_the_host_and_the_resolvers_reason(kind, reason) -> None:
    conn = make_driver(kind, ClientConfig(host=HOST, port=4150, connect_timeout=5))
    try:
        with pytest.raises(NSQConnectionError) as raised:
            conn.connect()
    finally:
        conn.close()
    assert str(raised.value) == (
        f"could not connect to nsqd at {HOST}:4150: its host name did not resolve ({reason})"
    )


@pytest.mark.parametrize("style", ["blocking", "asyncio"])
def test_the_http_client_names_the_host_and_the_resolvers_reason(style, reason) -> None:
    api = NSQDHTTPClient(HOST, 4151, timeout=5)
    with pytest.raises(NSQConnectionError) as raised:
        if style == "blocking":
            api.channel_depth("orders", "etl")
        else:
            asyncio.run(api.achannel_depth("orders", "etl"))
    message = str(raised.value)
    assert message.startswith(f"could not reach http://{HOST}:4151/stats"), message
    assert message.endswith(f": its host name did not resolve ({reason})"), message
