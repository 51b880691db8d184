"""Hostile message bodies (issue 11, item 3): every one is a clear NSQValueError naming the
message, raised before anything is sent; nothing reaches nsqd."""

from __future__ import annotations

import json
import math

import pytest

from airflow_provider_nsq.client import ClientConfig, encode_body
from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.protocol import NSQValueError
from tests.support.drivers import DRIVERS, make_driver


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = [
    pytest.param({"a": float("nan")}, "NaN", id="nan"),
    pytest.param([float("inf")], "NaN or Infinity", id="infinity"),
    pytest.param({"deep": nested(5000)}, "nested too deeply", id="5000-deep"),
    pytest.param("\ud800", "lone surrogate", id="lone-surrogate-str"),
    pytest.param({"k": "ok\udfff"}, "lone surrogate", id="lone-surrogate-json"),
    pytest.param({1j: 1}, "not JSON-serialisable", id="complex-key"),
    pytest.param(object(), "must be str, bytes", id="object"),
]


@pytest.fixture
def hook(nsqd, monkeypatch) -> NSQHook:
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{nsqd.tcp_address}")
    with NSQHook() as h:
        yield h


@pytest.mark.parametrize(("value", "says"), HOSTILE)
def test_publish_refuses_a_hostile_body_before_sending(nsqd, nsq_topic, hook, value, says) -> None:
    nsqd.create_channel(nsq_topic, "c")
    with pytest.raises(NSQValueError, match=r"^message ") as info:
        hook.publish(nsq_topic, value)
    assert says in str(info.value)
    hook.publish(nsq_topic, {"fine": 1.5})  # the hook is still usable
    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, "c")["depth"] == 1)


@pytest.mark.parametrize(("value", "says"), HOSTILE)
def test_multi_publish_names_the_bad_message_and_sends_none(
    nsqd, nsq_topic, hook, value, says
) -> None:
    nsqd.create_channel(nsq_topic, "c")
    with pytest.raises(NSQValueError, match=r"^message 2 ") as info:
        hook.multi_publish(nsq_topic, [b"a", "b", value, b"d"])
    assert says in str(info.value)
    assert nsqd.channel_stats(nsq_topic, "c")["depth"] == 0


@pytest.mark.parametrize("messages", [None, 42, b"one", "one", {"a": 1}])
def test_multi_publish_of_something_that_is_not_a_list(nsqd, nsq_topic, hook, messages) -> None:
    with pytest.raises(NSQValueError, match="messages must be a list"):
        hook.multi_publish(nsq_topic, messages)


@pytest.mark.parametrize("kind", DRIVERS)
@pytest.mark.parametrize("bodies", [None, 42, b"one"])
def test_client_multi_publish_of_something_that_is_not_a_list(nsqd, kind, bodies) -> None:
    with make_driver(kind, ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        with pytest.raises(NSQValueError, match="must be a list"):
            conn.multi_publish("t", bodies)
        conn.publish("t_after_bad_mpub", b"still usable")


def test_strict_json_is_what_other_parsers_accept() -> None:
    body = encode_body({"x": [1, 2.5, "é", None, True], "y": {"z": -0.0}})
    assert json.loads(body, parse_constant=lambda c: pytest.fail(f"non-standard {c}"))
    assert body == '{"x":[1,2.5,"é",null,true],"y":{"z":-0.0}}'.encode()
    assert math.isfinite(json.loads(body)["y"]["z"])
