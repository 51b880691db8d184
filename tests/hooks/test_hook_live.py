"""NSQHook against the broker: publishing over one reused connection, consume windows,
and the connection form's Test button."""

from __future__ import annotations

import datetime
import json
import socket
import time

import pytest

from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.protocol.errors import NSQValueError
from tests.support.nsqd_contents import channel_is_empty, read


def test_publish_calls_share_one_connection(nsqd, nsq_default, nsq_topic):
    nsqd.create_channel(nsq_topic, "c")
    with NSQHook() as hook:
        assert hook.publish(nsq_topic, "plain") == {"topic": nsq_topic, "messages": 1, "bytes": 5}
        assert hook.publish(nsq_topic, {"k": [1, 2]}) == {
            "topic": nsq_topic,
            "messages": 1,
            "bytes": 11,
        }
        result = hook.multi_publish(nsq_topic, [b"\x00\x01", "two", ["three"]])
        assert result == {"topic": nsq_topic, "messages": 3, "bytes": 2 + 3 + 9}
        dpub = hook.defer_publish(nsq_topic, "later", datetime.timedelta(milliseconds=1500))
        assert dpub == {"topic": nsq_topic, "messages": 1, "bytes": 5, "delay_ms": 1500}
        assert hook.get_conn().connects == 1
        assert hook.get_server_info()["version"]
    assert hook._producer is not None and hook._producer.address is None  # closed

    bodies = [m.body for m in read(nsqd, nsq_topic, "c", count=5, timeout=3.0)]
    assert bodies == [b"plain", b'{"k":[1,2]}', b"\x00\x01", b"two", b'["three"]']
    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, "c")["deferred_count"] == 1)


def test_delay_above_the_connections_limit_is_refused_before_sending(nsqd, monkeypatch):
    uri = f"nsq://{nsqd.host}:{nsqd.tcp_port}?max_req_timeout_ms=1000"
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_SMALL", uri)
    with NSQHook("nsq_small") as hook, pytest.raises(NSQValueError, match="2000 ms"):
        hook.defer_publish("events", "m", 2000)
    assert hook._producer is None  # nothing was opened


def test_consume_windows_fin_req_and_manual(nsqd, nsq_default, nsq_topic):
    with NSQHook() as hook:
        hook.multi_publish(nsq_topic, ["m1", "m2"])
        peeked = hook.consume(nsq_topic, "c", max_messages=2, timeout=3, ack="req")
        assert sorted(m.body for m in peeked) == [b"m1", b"m2"]

        held = hook.consume(nsq_topic, "c", max_messages=2, timeout=3, ack="manual")
        assert sorted(m.attempts for m in held) == [2, 2]
        hook.finish(*held[:1])
    # close() REQ'd the unanswered one
    (left,) = read(nsqd, nsq_topic, "c", count=1)
    assert left.body == held[1].body and left.attempts == 3
    with NSQHook() as hook:
        assert hook.consume(nsq_topic, "c", max_messages=1, timeout=0.3) == []
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "c"))


def test_window_longer_than_msg_timeout_is_refused(nsqd, monkeypatch, nsq_topic):
    uri = f"nsq://{nsqd.host}:{nsqd.tcp_port}?msg_timeout_ms=2000"
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_SHORT", uri)
    with NSQHook("nsq_short") as hook, pytest.raises(NSQValueError, match="msg_timeout"):
        hook.consume(nsq_topic, "c", max_messages=1, timeout=datetime.timedelta(seconds=3))


def test_test_connection_reports_the_server(nsqd, nsq_default):
    ok, message = NSQHook().test_connection()
    assert ok, message
    assert message.startswith("nsqd ")
    assert f"at {nsqd.host}:{nsqd.tcp_port}; tls=off" in message
    assert "auth=off" in message


def test_test_connection_to_a_closed_port_fails_fast(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    secret = "my-auth-secret-123"
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_CLOSED", f"nsq://:{secret}@127.0.0.1:{port}?connect_timeout=3"
    )
    started = time.monotonic()
    ok, message = NSQHook("nsq_closed").test_connection()
    assert not ok
    assert f"127.0.0.1:{port}" in message
    assert secret not in message
    assert time.monotonic() - started < 3


def test_test_connection_with_a_bad_extra_explains_it(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_BAD",
        json.dumps({"conn_type": "nsq", "password": "p4ssw0rd!", "extra": {"tls": "maybe"}}),
    )
    ok, message = NSQHook("nsq_bad").test_connection()
    assert not ok
    assert "'tls'" in message and "p4ssw0rd!" not in message


def test_the_test_button_finds_the_hook_by_connection_type(nsqd, monkeypatch):
    # What the API server's /connections/test does with the form's values: export them
    # under a transient id, then Connection.test_connection() -> get_hook() by conn_type.
    from airflow.models.connection import Connection

    conn = Connection(conn_id="nsq_button", conn_type="nsq", host=nsqd.host, port=nsqd.tcp_port)
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_BUTTON", conn.get_uri())
    ok, message = conn.test_connection()
    assert ok, message
    assert f"at {nsqd.host}:{nsqd.tcp_port}; tls=off" in message


def test_the_verbs_take_what_the_consumers_take(nsqd, nsq_default, nsq_topic):
    with NSQHook() as hook:
        hook.multi_publish(nsq_topic, ["a", "b", "c", "d"])
        held = hook.consume(nsq_topic, "c", max_messages=4, timeout=3, ack="manual")
        assert len(held) == 4
        by_body = {m.body: m for m in held}
        hook.touch(by_body[b"a"], by_body[b"b"])
        hook.finish(by_body[b"a"])
        hook.requeue(by_body[b"b"], delay_ms=datetime.timedelta(0))
        hook.finish(by_body[b"c"])
        hook.requeue(by_body[b"d"], delay_ms=0)
    again = read(nsqd, nsq_topic, "c", count=2)
    assert sorted((m.body, m.attempts) for m in again) == [(b"b", 2), (b"d", 2)]
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "c"))
