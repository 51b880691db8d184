"""NSQSensor in ``mode="reschedule"`` without nsqd's HTTP API: each poke is a new
process, so the pause between windows comes from the task instance's reschedule history
(``task_reschedule_count``, ``ti.get_first_reschedule_date``), and the task is
rescheduled for the next window instead of every ``poke_interval``. The same in a real
scheduler run: tests/e2e/test_production_e2e.py."""

from __future__ import annotations

import datetime

import pytest
from airflow.exceptions import AirflowRescheduleException
from airflow.providers.common.compat.sdk import AirflowSensorTimeout

from airflow_provider_nsq.sensors.nsq import (
    TCP_WINDOW_MAX_BACKOFF_S,
    NSQSensor,
    next_reschedule,
    tcp_pause,
)
from tests.support.nsqd_contents import read

UTC = datetime.UTC


class RescheduledTI:
    """The task instance of a rescheduled try: when its first poke started."""

    def __init__(self, first_poke: datetime.datetime | None) -> None:
        self.first_poke = first_poke

    def get_first_reschedule_date(self, context):
        return self.first_poke


def _sensor(topic: str, **kwargs) -> NSQSensor:
    return NSQSensor(
        task_id="wait",
        topic=topic,
        channel="etl",
        min_messages=2,
        window_timeout=1.0,
        poke_interval=1,
        timeout=600,
        mode="reschedule",
        **kwargs,
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(UTC)


def test_the_pauses_double_up_to_the_cap():
    assert [tcp_pause(n, 1, 1) for n in (1, 2, 3, 4)] == [4, 8, 16, 32]
    assert tcp_pause(20, 1, 1) == TCP_WINDOW_MAX_BACKOFF_S
    assert tcp_pause(1, 10, 2) == 40  # max(poke_interval, window_timeout) x 4
    assert tcp_pause(9, 600, 1) == 600  # a poke_interval beyond the cap wins


def test_the_next_window_never_comes_after_the_timeout():
    start = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    now = start + datetime.timedelta(seconds=50)
    wake = next_reschedule(
        reschedules=2, started=start, now=now, timeout=600, poke_interval=1, window_timeout=1
    )
    assert wake == now + datetime.timedelta(seconds=16)  # after the 3rd short window
    wake = next_reschedule(
        reschedules=2, started=start, now=now, timeout=60, poke_interval=1, window_timeout=1
    )
    assert wake == start + datetime.timedelta(seconds=61)  # the timeout, then it ends


@pytest.mark.parametrize(("reschedules", "pause"), [(0, 4), (1, 8), (3, 32)])
def test_a_short_window_reschedules_for_the_next_one(
    nsqd, nsq_default_tcp_only, nsq_topic, reschedules, pause
):
    nsqd.create_channel(nsq_topic, "etl")
    nsqd.http_publish(nsq_topic, b"only-one")
    first = _now() - datetime.timedelta(seconds=30) if reschedules else None
    context = {"ti": RescheduledTI(first), "task_reschedule_count": reschedules}

    before = _now()
    with pytest.raises(AirflowRescheduleException) as info:
        _sensor(nsq_topic).execute(context)

    wait = (info.value.reschedule_date - before).total_seconds()
    assert pause <= wait <= pause + 5  # not poke_interval (1 s): the next window's time
    (again,) = read(nsqd, nsq_topic, "etl", count=1)
    assert (again.body, again.attempts) == (b"only-one", 2)  # this poke's one window


def test_the_poke_at_the_timeout_opens_no_window(nsqd, nsq_default_tcp_only, nsq_topic):
    nsqd.create_channel(nsq_topic, "etl")
    nsqd.http_publish(nsq_topic, b"only-one")
    long_ago = _now() - datetime.timedelta(seconds=601)
    context = {"ti": RescheduledTI(long_ago), "task_reschedule_count": 5}

    with pytest.raises(AirflowSensorTimeout):
        _sensor(nsq_topic).execute(context)

    (still,) = read(nsqd, nsq_topic, "etl", count=1)
    assert (still.body, still.attempts) == (b"only-one", 1)  # never delivered


def test_with_the_http_api_the_reschedule_is_airflows(nsqd, nsq_default, nsq_topic):
    nsqd.create_channel(nsq_topic, "etl")
    nsqd.http_publish(nsq_topic, b"only-one")
    context = {"ti": RescheduledTI(None), "task_reschedule_count": 0}

    before = _now()
    with pytest.raises(AirflowRescheduleException) as info:
        _sensor(nsq_topic).execute(context)

    assert (info.value.reschedule_date - before).total_seconds() < 3  # poke_interval
    (still,) = read(nsqd, nsq_topic, "etl", count=1)
    assert still.attempts == 1  # the HTTP check took nothing
