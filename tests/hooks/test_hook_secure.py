"""The connection's TLS, compression and AUTH settings against a broker that needs them,
as the Test button and a task see them. The AUTH secret never shows up in messages."""

from __future__ import annotations

import logging
import time

import pytest

from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.testing.auth_server import StaticAuthorizer, allow_all

SECRET = "etl-secret-9f2c71"


@pytest.fixture
def secure_nsqd(nsqd_factory, tls_files):
    return nsqd_factory(
        tls_cert=tls_files.server_cert,
        tls_key=tls_files.server_key,
        authorizer=StaticAuthorizer({SECRET: allow_all("etl-bot")}),
    )


def _use(monkeypatch, server, tls_files, secret: str | None = SECRET, **extras: str) -> NSQHook:
    query = "&".join(
        f"{k}={v}" for k, v in {"tls": "true", "tls_ca_file": tls_files.ca_file, **extras}.items()
    )
    auth = f":{secret}@" if secret else ""
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_SECURE", f"nsq://{auth}{server.host}:{server.tcp_port}?{query}"
    )
    return NSQHook(nsq_conn_id="nsq_secure")


@pytest.mark.parametrize("compression", ["snappy", "deflate"])
def test_tls_auth_and_compression_from_the_connection(
    secure_nsqd, tls_files, monkeypatch, nsq_topic, compression, caplog
):
    caplog.set_level(logging.DEBUG)
    hook = _use(monkeypatch, secure_nsqd, tls_files, compression=compression)
    ok, message = hook.test_connection()
    assert ok, message
    assert message == (
        f"nsqd 1.3.0 at {secure_nsqd.tcp_address}; tls=on, "
        f"auth=ok (etl-bot, 1 permissions), compression={compression}"
    )
    with hook:
        hook.publish(nsq_topic, "over tls")
        (got,) = hook.consume(nsq_topic, "c", max_messages=1, timeout=5)
    assert got.body == b"over tls"
    assert SECRET not in caplog.text


def test_missing_secret_is_reported(secure_nsqd, tls_files, monkeypatch):
    ok, message = _use(monkeypatch, secure_nsqd, tls_files, secret=None).test_connection()
    assert not ok
    assert "AUTH" in message and "secret" in message


def test_wrong_secret_is_refused_without_echoing_it(secure_nsqd, tls_files, monkeypatch):
    wrong = "not-the-right-secret-42"
    ok, message = _use(monkeypatch, secure_nsqd, tls_files, secret=wrong).test_connection()
    assert not ok
    assert "E_AUTH_FAILED" in message
    assert wrong not in message


def test_tls_requested_from_a_plaintext_nsqd_fails(nsqd, tls_files, monkeypatch):
    ok, message = _use(monkeypatch, nsqd, tls_files, secret=None).test_connection()
    assert not ok
    assert "TLS" in message


def test_pointing_at_the_http_port_fails_within_the_connect_timeout(nsqd, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_HTTP", f"nsq://{nsqd.http_address}?connect_timeout=2")
    started = time.monotonic()
    ok, message = NSQHook("nsq_http").test_connection()
    assert not ok
    assert time.monotonic() - started < 3
    # nsqd's Go HTTP server (and the embedded broker's) answers the "  V2IDENTIFY" line at
    # once with "HTTP/1.1 400": the client reads "HTTP" as a frame size and says so.
    assert "HTTP port" in message
