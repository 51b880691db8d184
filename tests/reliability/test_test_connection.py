"""The Test button exercises what a task will do (issue 11, item 4): a handshake alone
succeeds against an nsqd that will refuse every publish; the Test button must not."""

from __future__ import annotations

import pytest

from airflow_provider_nsq.client import ClientConfig
from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.protocol import NSQServerError, NSQStateError
from tests.support.drivers import DRIVERS, make_driver


def hook_for(monkeypatch, server, **extras: str) -> NSQHook:
    query = "&".join(f"{k}={v}" for k, v in extras.items())
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_TEST", f"nsq://{server.tcp_address}?{query}")
    return NSQHook(nsq_conn_id="nsq_test")


@pytest.fixture
def tls_required_nsqd(nsqd_factory, tls_files):
    return nsqd_factory(
        tls_cert=tls_files.server_cert, tls_key=tls_files.server_key, tls_required=True
    )


def test_tls_required_nsqd_with_tls_off_fails_the_test_like_a_task(
    tls_required_nsqd, monkeypatch, nsq_topic
) -> None:
    hook = hook_for(monkeypatch, tls_required_nsqd)
    ok, message = hook.test_connection()
    assert not ok
    assert "E_INVALID cannot NOP in current state (TLS required)" in message
    assert "turn on the connection's tls extra" in message
    with hook, pytest.raises(NSQServerError, match="TLS required"):
        hook.publish(nsq_topic, "what the task would have done")


def test_tls_required_nsqd_with_tls_on_passes(
    tls_required_nsqd, tls_files, monkeypatch, nsq_topic
) -> None:
    hook = hook_for(monkeypatch, tls_required_nsqd, tls="true", tls_ca_file=tls_files.ca_file)
    ok, message = hook.test_connection()
    assert ok, message
    assert "tls=on" in message
    with hook:
        hook.publish(nsq_topic, "over tls")


@pytest.mark.parametrize("compression", ["none", "snappy", "deflate"])
def test_the_check_works_on_compressed_connections(nsqd, monkeypatch, compression) -> None:
    ok, message = hook_for(monkeypatch, nsqd, compression=compression).test_connection()
    assert ok, message
    assert f"compression={compression}" in message


@pytest.mark.parametrize("kind", DRIVERS)
def test_ping_is_a_round_trip_that_leaves_the_connection_usable(nsqd, nsq_topic, kind) -> None:
    nsqd.create_channel(nsq_topic, "c")
    config = ClientConfig(host=nsqd.host, port=nsqd.tcp_port, heartbeat_interval_ms=5000)
    with make_driver(kind, config) as conn:
        conn.ping()
        conn.publish(nsq_topic, b"after ping")
        conn.ping()
        conn.subscribe(nsq_topic, "c")
        with pytest.raises(NSQStateError, match="PING"):
            conn.ping()  # nsqd refuses IDENTIFY once subscribed: refused before sending
        conn.ready(1)
        got = []
        while not got:
            got = conn.read_messages(5)
        assert [m.body for m in got] == [b"after ping"]
        conn.finish(*got)
