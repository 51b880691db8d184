"""Connection -> ClientConfig: every extra, both connection forms, and the errors a
user gets for a bad field (naming the key, never showing the AUTH secret)."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from urllib.parse import quote

import pytest

from airflow_provider_nsq.client.settings.values import delay_to_ms, duration_to_seconds
from airflow_provider_nsq.hooks.nsq import NSQConnectionConfigError, NSQHook
from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.provider_info import CONN_FIELDS

SECRET = "s3cret-auth-token-xyz"

ALL_EXTRAS = {
    "tls": "true",
    "tls_verify": "false",
    "tls_ca_file": "/etc/nsq/ca.pem",
    "tls_cert_file": "/etc/nsq/client.pem",
    "tls_key_file": "/etc/nsq/client.key",
    "tls_server_name": "nsqd.internal",
    "compression": "deflate",
    "deflate_level": "3",
    "heartbeat_interval_ms": "10000",
    "msg_timeout_ms": "120000",
    "client_id": "etl-worker",
    "lookupd_http_addresses": "lookupd-1:4161,lookupd-2:4161",
    "nsqd_tcp_addresses": "nsqd-2:4150,nsqd-3,nsqd.example.com:4155",
    "connect_timeout": "2.5",
    "read_timeout": "7.5",
    "http_port": "4151",
    "https_port": "4152",
    "max_msg_size": "2048",
    "max_body_size": "8192",
    "max_req_timeout_ms": "7200000",
    "nsqadmin_url": "https://nsqadmin.example.com:4171/nsq",
}

EXPECTED = {
    "host": "nsqd.example.com",
    "port": 4155,
    "tls": True,
    "tls_verify": False,
    "tls_ca_file": "/etc/nsq/ca.pem",
    "tls_cert_file": "/etc/nsq/client.pem",
    "tls_key_file": "/etc/nsq/client.key",
    "tls_server_name": "nsqd.internal",
    "compression": "deflate",
    "deflate_level": 3,
    "heartbeat_interval_ms": 10000,
    "msg_timeout_ms": 120000,
    "client_id": "etl-worker",
    "connect_timeout": 2.5,
    "read_timeout": 7.5,
    "max_msg_size": 2048,
    "max_body_size": 8192,
    "max_req_timeout_ms": 7200000,
    "auth_secret": SECRET,
}


def _uri(extras: dict[str, str], secret: str = SECRET) -> str:
    # A URL in a URI's query is percent-encoded (nsqadmin_url=https%3A%2F%2F...).
    query = "&".join(f"{k}={quote(v, safe=',:')}" for k, v in extras.items())
    return f"nsq://:{secret}@nsqd.example.com:4155?{query}"


def _typed(extras: dict[str, str]) -> dict:
    """The same extras as JSON types (what the UI and the JSON form store)."""
    out: dict = {}
    for key, value in extras.items():
        kind = CONN_FIELDS[key]["schema"]["type"][0]
        if kind == "boolean":
            out[key] = value == "true"
        elif kind == "integer":
            out[key] = int(value)
        elif kind == "number":
            out[key] = float(value)
        elif key in ("lookupd_http_addresses", "nsqd_tcp_addresses"):
            out[key] = value.split(",")
        else:
            out[key] = value
    return out


def _check(hook: NSQHook) -> None:
    config = hook.get_client_config()
    for name, value in EXPECTED.items():
        assert getattr(config, name) == value, name
    assert hook.lookupd_http_addresses == ["lookupd-1:4161", "lookupd-2:4161"]
    # host:port first, then the extra's, deduplicated
    assert hook.nsqd_tcp_addresses == ["nsqd.example.com:4155", "nsqd-2:4150", "nsqd-3:4150"]
    assert hook.http_port == 4151
    assert hook.https_port == 4152
    assert hook.nsqadmin_url == "https://nsqadmin.example.com:4171/nsq"


def test_every_extra_is_documented_in_the_test():
    # A new conn-field must be added to this test (and to docs/connections.md).
    assert set(ALL_EXTRAS) == set(CONN_FIELDS)


def test_uri_form_sets_every_extra(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_URI", _uri(ALL_EXTRAS))
    _check(NSQHook(nsq_conn_id="nsq_uri"))


def test_json_form_sets_every_extra(monkeypatch):
    value = {
        "conn_type": "nsq",
        "host": "nsqd.example.com",
        "port": 4155,
        "password": SECRET,
        "extra": _typed(ALL_EXTRAS),
    }
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_JSON", json.dumps(value))
    _check(NSQHook(nsq_conn_id="nsq_json"))


def test_the_trigger_path_builds_the_same_config(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_URI", _uri(ALL_EXTRAS))
    sync = NSQHook(nsq_conn_id="nsq_uri").get_client_config()
    async_ = asyncio.run(NSQHook(nsq_conn_id="nsq_uri").aget_client_config())
    # client_id/hostname defaults aside, every field is equal.
    assert sync == async_


def test_defaults_and_legacy_prefixed_or_blank_extras(monkeypatch):
    value = {
        "conn_type": "nsq",
        "host": "nsqd",
        # the pre-3.2 form prefixed extras; the UI stores blank fields as ""
        "extra": {"extra__nsq__compression": "snappy", "tls_ca_file": "", "msg_timeout_ms": None},
    }
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_JSON", json.dumps(value))
    config = NSQHook(nsq_conn_id="nsq_json").get_client_config()
    assert (config.host, config.port, config.compression) == ("nsqd", 4150, "snappy")
    assert config.tls is False and config.tls_verify is True
    assert config.tls_ca_file is None and config.msg_timeout_ms is None
    assert config.auth_secret is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tls", "yes"),
        ("tls_verify", 2),
        ("deflate_level", "six"),
        ("deflate_level", 12),
        ("compression", "gzip"),
        ("heartbeat_interval_ms", 1.5),
        ("msg_timeout_ms", "10"),
        ("connect_timeout", "soon"),
        ("connect_timeout", 0),
        ("read_timeout", "3601"),
        ("read_timeout", -1),
        ("read_timeout", "inf"),
        ("http_port", True),
        ("client_id", 42),
        ("lookupd_http_addresses", 4161),
        ("lookupd_http_addresses", "lookupd:http"),
        ("nsqd_tcp_addresses", ["nsqd-2:4150", 3]),
        ("nsqd_tcp_addresses", "nsqd-2:port"),
        ("max_body_size", -1),
        ("nsqadmin_url", "nsqadmin:4171"),
        ("nsqadmin_url", "ftp://nsqadmin"),
        ("nsqadmin_url", 4171),
    ],
)
def test_wrong_typed_extra_names_the_key(monkeypatch, key, value):
    conn = {"conn_type": "nsq", "host": "nsqd", "password": SECRET, "extra": {key: value}}
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_BAD", json.dumps(conn))
    with pytest.raises(NSQConnectionConfigError, match=key) as info:
        NSQHook(nsq_conn_id="nsq_bad").get_client_config()
    assert "nsq_bad" in str(info.value)
    assert SECRET not in str(info.value)


def test_unknown_extra_names_the_key_but_not_its_value(monkeypatch, caplog):
    # A secret pasted into the wrong field must not be echoed back.
    conn = {"conn_type": "nsq", "host": "nsqd", "extra": {"auth_secret": SECRET}}
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_BAD", json.dumps(conn))
    with caplog.at_level(logging.DEBUG), pytest.raises(NSQConnectionConfigError) as info:
        NSQHook(nsq_conn_id="nsq_bad").get_client_config()
    assert "extra 'auth_secret': unknown" in str(info.value)
    assert "tls_verify" in str(info.value)  # lists what is allowed
    assert SECRET not in str(info.value)
    assert SECRET not in caplog.text


def test_a_task_names_the_connection_the_user_made(monkeypatch):
    conn = {"conn_type": "nsq", "host": "nsqd", "extra": {"http_prot": 4151}}
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_UI", json.dumps(conn))
    with pytest.raises(NSQConnectionConfigError) as info:
        NSQHook(nsq_conn_id="nsq_ui").get_settings()
    assert str(info.value).startswith("NSQ connection 'nsq_ui': extra 'http_prot': unknown; ")


def test_airflows_connection_test_says_this_connection_not_its_temporary_id(monkeypatch):
    """The code path of ``POST /api/v2/connections/test`` (the UI's Test button) on
    Airflow 3.0 to 3.3: a copy of the connection under a random id, exported as an
    environment variable, then ``Connection.test_connection()``, which builds the hook by
    that id. The answer must not name an id the user never chose."""
    from airflow.models.connection import Connection
    from airflow.utils.strings import get_random_string

    transient = get_random_string()
    conn = Connection(
        conn_id=transient,
        conn_type="nsq",
        host="127.0.0.1",
        port=4150,
        extra=json.dumps({"http_prot": 4151}),
    )
    monkeypatch.setenv(f"AIRFLOW_CONN_{transient.upper()}", conn.get_uri())

    ok, message = conn.test_connection()

    assert not ok
    assert message.startswith("this connection: extra 'http_prot': unknown; known: "), message
    assert "http_port" in message  # what it may have meant
    assert transient not in message


def test_a_bad_url_is_refused_without_showing_it(monkeypatch):
    url = f"nsqadmin.internal/?token={SECRET}"  # no scheme: not a URL nsqadmin serves
    conn = {"conn_type": "nsq", "host": "nsqd", "extra": {"nsqadmin_url": url}}
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_BAD", json.dumps(conn))
    with pytest.raises(NSQConnectionConfigError, match=r"nsqadmin_url.*https") as info:
        NSQHook(nsq_conn_id="nsq_bad").get_client_config()
    assert SECRET not in str(info.value)


def test_secret_never_in_repr_or_logs(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_URI", _uri({"tls": "true"}))
    with caplog.at_level(logging.DEBUG):
        hook = NSQHook(nsq_conn_id="nsq_uri")
        config = hook.get_client_config()
    assert config.auth_secret == SECRET
    assert SECRET not in repr(hook)
    assert SECRET not in repr(config)
    assert SECRET not in caplog.text


def test_cert_without_key_is_an_error_without_the_secret(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_URI", _uri({"tls": "true", "tls_cert_file": "/c.pem"}))
    with pytest.raises(NSQConnectionConfigError, match="tls_cert_file") as info:
        NSQHook(nsq_conn_id="nsq_uri").get_client_config()
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("delay", "ms"),
    [(0, 0), (1500, 1500), (datetime.timedelta(seconds=2), 2000), (datetime.timedelta(0), 0)],
)
def test_delay_accepts_ms_and_timedelta(delay, ms):
    assert delay_to_ms(delay) == ms


@pytest.mark.parametrize(
    "delay", [-1, 1.5, "1000", True, datetime.timedelta(microseconds=500), None]
)
def test_bad_delay_is_refused_with_its_value(delay):
    with pytest.raises(NSQValueError, match="delay"):
        delay_to_ms(delay)


def test_duration_accepts_seconds_and_timedelta():
    assert duration_to_seconds(2, "window") == 2.0
    assert duration_to_seconds(datetime.timedelta(milliseconds=250), "window") == 0.25
    with pytest.raises(NSQValueError, match="window"):
        duration_to_seconds(0, "window")
