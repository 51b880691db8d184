"""NSQSensor's ``max_xcom_bytes``: what one window hands to XCom is capped before
anything is FINished; over the cap the rest goes back to nsqd at once, and a message that
cannot fit alone fails the task with both sizes named, losing nothing."""

from __future__ import annotations

import json
import re

import pytest

from airflow_provider_nsq.client import NSQConnection
from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.sensors.nsq import (
    DEFAULT_MAX_XCOM_BYTES,
    NSQSensor,
    list_bytes,
    record_bytes,
    records_that_fit,
)
from tests.support.nsqd_contents import client_config, read


class FakeTI:
    def __init__(self) -> None:
        self.pushed: dict = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def _sensor(**kwargs) -> NSQSensor:
    defaults = {"task_id": "wait", "topic": "events", "channel": "etl", "window_timeout": 1.0}
    return NSQSensor(**{**defaults, **kwargs})


def _publish(nsqd, topic: str, bodies: list[bytes]) -> None:
    with NSQConnection(client_config(nsqd)) as conn:
        conn.multi_publish(topic, bodies)


def test_sizes_are_those_of_the_json_the_database_stores():
    records = [
        {"id": "0a", "body": "plain", "attempts": 1},
        {"id": "0b", "body": "naïve — ünïcode", "attempts": 2},  # escaped: \\u00ef ...
        {"id": "0c", "body": "", "attempts": 1},
    ]
    sizes = [record_bytes(r) for r in records]
    for count in range(len(records) + 1):
        assert list_bytes(sizes[:count]) == len(json.dumps(records[:count]))
    exact = len(json.dumps(records[:2]))
    assert records_that_fit(sizes, exact) == 2
    assert records_that_fit(sizes, exact - 1) == 1
    assert records_that_fit(sizes, sizes[0] + 1) == 0  # the brackets do not fit


def test_the_default_cap_is_far_below_the_databases_limits():
    mysql_default_packet = 64 * 1024 * 1024  # the smallest of the three
    assert mysql_default_packet == DEFAULT_MAX_XCOM_BYTES * 16
    assert _sensor().max_xcom_bytes == DEFAULT_MAX_XCOM_BYTES


@pytest.mark.parametrize("value", [0, 255, "4096", 1.5e6, True])
def test_a_bad_cap_fails_at_parse(value):
    with pytest.raises(NSQValueError, match="max_xcom_bytes"):
        _sensor(max_xcom_bytes=value)


def test_over_the_cap_the_window_keeps_what_fits_and_hands_the_rest_back_at_once(
    nsqd, nsq_default, nsq_topic
):
    bodies = [b"%d:" % n + b"x" * 500 for n in range(6)]
    _publish(nsqd, nsq_topic, bodies)
    cap = 1500  # two ~710-byte records fit, the third does not
    sensor = _sensor(topic=nsq_topic, max_messages=6, max_xcom_bytes=cap)
    ti = FakeTI()
    try:
        assert sensor.poke({}) is True
        # Before the push: the four that do not fit are back on the channel already (no
        # delay), the two kept are still in flight, none is FINished.
        stats = nsqd.wait_for(
            lambda: (s := nsqd.channel_stats(nsq_topic, "etl")) and s["depth"] == 4 and s
        )
        assert stats["in_flight_count"] == 2
        assert stats["deferred_count"] == 0
        sensor._deliver({"ti": ti})  # type: ignore[typeddict-item]
    finally:
        sensor.hook.close()
    records = ti.pushed["return_value"]
    assert [r["body"].encode() for r in records] == bodies[:2]
    assert len(json.dumps(records)) <= cap
    rest = read(nsqd, nsq_topic, "etl", count=6, timeout=3)
    assert sorted(m.body for m in rest) == bodies[2:]  # nothing lost
    assert {m.attempts for m in rest} == {2}


def test_a_message_too_big_for_the_cap_fails_the_task_naming_both_sizes_and_loses_nothing(
    nsqd, nsq_default, nsq_topic
):
    big = b"y" * 2000
    _publish(nsqd, nsq_topic, [b"skip-this", big])
    sensor = _sensor(
        topic=nsq_topic,
        max_messages=2,
        max_xcom_bytes=1024,
        message_filter="tests.support.dags.nsq_sensor_dags.keep",  # rejects b"skip-..."
        rejected="finish",
    )
    try:
        with pytest.raises(NSQValueError) as info:
            sensor.poke({})
    finally:
        sensor.hook.close()  # REQs what the window held
    text = str(info.value)
    assert "max_xcom_bytes=1024" in text
    assert "its body is 2000 bytes" in text
    size = int(re.search(r"is (\d+) bytes as an XCom value", text).group(1))
    assert 2000 < size < 2300  # the body and the record's other fields, as JSON
    assert "Nothing was FINished" in text
    # The rejected message was not FINished either: both are still there.
    again = read(nsqd, nsq_topic, "etl", count=2, timeout=3)
    assert sorted(m.body for m in again) == sorted([b"skip-this", big])
    assert {m.attempts for m in again} == {2}
