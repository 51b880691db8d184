"""Both drivers against a running server: the embedded broker, or a real nsqd when
NSQD_ADDRESS (and NSQD_HTTP_ADDRESS) are set. Tests that need server flags (TLS, AUTH,
small limits) use ``nsqd_factory``, which skips against a real nsqd."""

from __future__ import annotations

import time

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection
from airflow_provider_nsq.protocol import NSQServerError, NSQTLSError
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.drivers import DRIVERS, consume_window, make_driver

pytestmark = pytest.mark.parametrize("kind", DRIVERS)


def cfg(server, **kw) -> ClientConfig:
    return ClientConfig(host=server.host, port=server.tcp_port, **kw)


def consume_all(server, topic: str, channel: str, n: int, timeout: float = 10.0, **kw):
    """One window of up to ``n`` messages, FIN'd, as a plain blocking consumer reads it."""
    return consume_window(
        "blocking", cfg(server, **kw), topic, channel, max_messages=n, timeout=timeout
    )


def test_publish_then_consume_round_trip(kind, nsqd, nsq_topic) -> None:
    nsqd.create_channel(nsq_topic, "c")
    with make_driver(kind, cfg(nsqd)) as conn:
        conn.publish(nsq_topic, b"hello")
        assert conn.server_info["version"].startswith("1.")
    got = consume_all(nsqd, nsq_topic, "c", 1)
    assert [(m.body, m.attempts) for m in got] == [(b"hello", 1)]
    assert len(got[0].id) == 16
    assert abs(got[0].timestamp / 1e9 - time.time()) < 60
    nsqd.wait_for(
        lambda: (
            (s := nsqd.channel_stats(nsq_topic, "c"))
            and s["depth"] == 0
            and s["in_flight_count"] == 0
        )
    )


def test_every_byte_value_and_a_1_mib_message_round_trip(kind, nsqd, nsq_topic) -> None:
    nsqd.create_channel(nsq_topic, "c")
    bodies = [bytes(range(256)), bytes(range(255, -1, -1)) * 3, b"\x00", bytes([0xFF]) * 1_048_576]
    with make_driver(kind, cfg(nsqd)) as conn:
        for body in bodies:
            conn.publish(nsq_topic, body)
    got = consume_all(nsqd, nsq_topic, "c", len(bodies))
    assert sorted(m.body for m in got) == sorted(bodies)


def test_mpub_over_5_mib_is_split_and_every_message_arrives_in_order(kind, nsqd, nsq_topic) -> None:
    nsqd.create_channel(nsq_topic, "c")
    bodies = [b"%06d" % i + b"x" * 99_994 for i in range(60)]  # 6 MB in all
    with make_driver(kind, cfg(nsqd)) as conn:
        frames = conn.multi_publish(nsq_topic, bodies)
    assert frames == 2
    got = consume_all(nsqd, nsq_topic, "c", 60)
    assert [m.body[:6] for m in got] == [b[:6] for b in bodies]


def test_deferred_message_arrives_no_earlier_than_its_delay(kind, nsqd, nsq_topic) -> None:
    with make_driver(kind, cfg(nsqd)) as sub:
        sub.subscribe(nsq_topic, "c")
        sub.ready(1)
        with NSQConnection(cfg(nsqd)) as pub:
            published = time.monotonic()
            pub.defer_publish(nsq_topic, b"later", 1000)
        got = []
        while not got and time.monotonic() - published < 10:
            got = sub.read_messages(1.0)
        arrived = time.monotonic() - published
        assert [m.body for m in got] == [b"later"]
        assert arrived >= 1.0
        sub.finish(*got)


def test_req_redelivers_with_attempts_plus_one_and_fin_empties_the_channel(
    kind, nsqd, nsq_topic
) -> None:
    nsqd.create_channel(nsq_topic, "c")
    with NSQConnection(cfg(nsqd)) as pub:
        pub.publish(nsq_topic, b"retry me")
    with make_driver(kind, cfg(nsqd)) as sub:
        sub.subscribe(nsq_topic, "c")
        sub.ready(1)
        first = _read_one(sub)
        first.requeue()
        second = _read_one(sub)
        assert (second.id, second.body, first.attempts, second.attempts) == (
            first.id,
            b"retry me",
            1,
            2,
        )
        second.finish()
        sub.nop()
        nsqd.wait_for(
            lambda: (
                (s := nsqd.channel_stats(nsq_topic, "c"))
                and s["depth"] == 0
                and s["in_flight_count"] == 0
            )
        )


def test_touch_postpones_the_redelivery_timeout(kind, nsqd, nsq_topic) -> None:
    nsqd.create_channel(nsq_topic, "c")
    with NSQConnection(cfg(nsqd)) as pub:
        pub.publish(nsq_topic, b"slow work")
    with make_driver(kind, cfg(nsqd, msg_timeout_ms=1000)) as sub:
        sub.subscribe(nsq_topic, "c")
        sub.ready(1)
        msg = _read_one(sub)
        delivered = time.monotonic()
        assert sub.read_messages(0.6) == []
        sub.touch(msg)
        # Without the TOUCH it would come back ~1.0 s after delivery; now ~1.6 s.
        assert sub.read_messages(1.2 - (time.monotonic() - delivered)) == []
        again = _read_one(sub, timeout=10)  # real nsqd: a new channel waits for its scanner
        assert again.id == msg.id and again.attempts == 2
        assert time.monotonic() - delivered >= 1.5
        again.finish()


def test_heartbeats_keep_an_idle_subscription_alive(kind, nsqd, nsq_topic) -> None:
    with make_driver(kind, cfg(nsqd, heartbeat_interval_ms=1000)) as sub:
        sub.subscribe(nsq_topic, "c")
        sub.ready(1)
        assert sub.read_messages(3.2) == []  # > 2 intervals of nsqd's read deadline
        with NSQConnection(cfg(nsqd)) as pub:
            pub.publish(nsq_topic, b"still here")
        msg = _read_one(sub)
        assert msg.body == b"still here"
        msg.finish()


def test_idle_publisher_past_nsqds_deadline_still_publishes(kind, nsqd, nsq_topic) -> None:
    nsqd.create_channel(nsq_topic, "c")
    with make_driver(kind, cfg(nsqd, heartbeat_interval_ms=1000)) as conn:
        conn.publish(nsq_topic, b"one")
        time.sleep(2.3)  # set-up, not an assertion: let nsqd's 2 s read deadline pass
        conn.publish(nsq_topic, b"two")
    got = consume_all(nsqd, nsq_topic, "c", 2)
    assert sorted(m.body for m in got) == [b"one", b"two"]


@pytest.mark.parametrize("compression", ["snappy", "deflate"])
def test_compressed_connections_publish_and_consume(kind, compression, nsqd, nsq_topic) -> None:
    nsqd.create_channel(nsq_topic, "c")
    bodies = [b"compressible " * 100, bytes(range(256)) * 8, b"x"]
    with make_driver(kind, cfg(nsqd, compression=compression)) as conn:
        assert conn.compression == compression
        conn.multi_publish(nsq_topic, bodies)
    compressed = cfg(nsqd, compression=compression)
    got = consume_window(kind, compressed, nsq_topic, "c", max_messages=3, timeout=10)
    assert sorted(m.body for m in got) == sorted(bodies)


def test_server_error_keeps_nsqds_code_and_text(kind, nsqd, nsq_topic) -> None:
    with make_driver(kind, cfg(nsqd, max_msg_size=4_000_000)) as conn:
        with pytest.raises(NSQServerError) as info:
            conn.publish(nsq_topic, b"x" * 2_000_000)  # the client was told a bigger limit
        assert info.value.code == "E_BAD_MESSAGE"
        assert info.value.description == "PUB message too big 2000000 > 1048576"
        conn.publish(nsq_topic, b"reconnected")


def test_tls_with_verification_against_a_custom_ca(
    kind, nsqd_factory, tls_files, nsq_topic
) -> None:
    server = nsqd_factory(tls_cert=tls_files.server_cert, tls_key=tls_files.server_key)
    server.create_channel(nsq_topic, "c")
    with make_driver(kind, cfg(server, tls=True, tls_ca_file=tls_files.ca_file)) as conn:
        assert conn.tls
        conn.publish(nsq_topic, b"secret payload")
    tls_deflate = cfg(server, tls=True, tls_ca_file=tls_files.ca_file, compression="deflate")
    got = consume_window(kind, tls_deflate, nsq_topic, "c", max_messages=1, timeout=10)
    assert [m.body for m in got] == [b"secret payload"]
    conn = make_driver(kind, cfg(server, tls=True))  # the system CAs do not know the test CA
    with pytest.raises(NSQTLSError, match="verification"):
        conn.connect()
    conn.close()


def test_tls_required_server_and_plaintext_client(kind, nsqd_factory, tls_files, nsq_topic) -> None:
    server = nsqd_factory(
        tls_cert=tls_files.server_cert, tls_key=tls_files.server_key, tls_required=True
    )
    with make_driver(kind, cfg(server)) as conn, pytest.raises(NSQServerError) as info:
        conn.publish(nsq_topic, b"x")
    assert info.value.code == "E_INVALID" and "TLS required" in info.value.description


def _read_one(conn, timeout: float = 10.0):
    (message,) = wait_for(lambda: conn.read_messages(0.5), timeout, 0, message="a message")
    return message


def test_auth_with_a_secret_publishes_and_a_bad_secret_fails_without_leaking(
    kind, nsqd_factory, nsq_topic
) -> None:
    from airflow_provider_nsq.testing.auth_server import StaticAuthorizer, allow_all

    server = nsqd_factory(authorizer=StaticAuthorizer({"good-secret": allow_all("alice")}))
    server.create_channel(nsq_topic, "c")
    with make_driver(kind, cfg(server, auth_secret="good-secret")) as conn:
        assert conn.server_info["auth_required"] is True
        conn.publish(nsq_topic, b"authorized")
    got = consume_all(server, nsq_topic, "c", 1, auth_secret="good-secret")
    assert [m.body for m in got] == [b"authorized"]

    conn = make_driver(kind, cfg(server, auth_secret="wrong-secret"))
    with pytest.raises(NSQServerError) as info:
        conn.connect()
    conn.close()
    assert (info.value.code, info.value.description) == ("E_AUTH_FAILED", "AUTH failed")
    assert "wrong-secret" not in str(info.value)
