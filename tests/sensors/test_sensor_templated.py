"""NSQSensor's ``min_messages``, ``max_messages`` and ``window_timeout`` are templated: accepted
as templates when the DAG is parsed, checked when rendered with the errors a literal
value gets at parse."""

from __future__ import annotations

import pytest

from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.sensors.nsq import NSQSensor
from tests.support.airflow_runs import TEST_DAGS, load_dag, run_dag
from tests.support.nsqd_contents import read

DAGS = TEST_DAGS / "nsq_sensor_dags.py"


def _sensor(**kwargs) -> NSQSensor:
    defaults = {"task_id": "wait", "topic": "events", "channel": "etl", "window_timeout": 1.0}
    return NSQSensor(**{**defaults, **kwargs})


def _parse_error(**kwargs) -> str:
    with pytest.raises(NSQValueError) as info:
        _sensor(**kwargs)
    return str(info.value)


def _render_error(**rendered) -> str:
    """The error of a sensor whose templates rendered to ``rendered``."""
    sensor = _sensor(**{name: "{{ params.x }}" for name in rendered})
    for name, value in rendered.items():
        setattr(sensor, name, value)
    with pytest.raises(NSQValueError) as info:
        sensor._check_rendered()
    return str(info.value)


def test_the_sizes_are_template_fields():
    sensor = _sensor(
        min_messages="{{ params.min }}",
        max_messages="{{ params.max }}",
        window_timeout="{{ params.window }}",
    )
    assert {"min_messages", "max_messages", "window_timeout"} <= set(sensor.template_fields)
    assert sensor.window_timeout == "{{ params.window }}"  # kept until rendered


@pytest.mark.parametrize(
    ("literal", "rendered"),
    [
        ({"min_messages": 0}, {"min_messages": "0"}),
        ({"max_messages": 2501}, {"max_messages": "2501"}),
        ({"min_messages": 5, "max_messages": 4}, {"min_messages": "5", "max_messages": "4"}),
        ({"window_timeout": 0}, {"window_timeout": "0"}),
    ],
)
def test_a_bad_rendered_value_gets_the_error_a_literal_gets(literal, rendered):
    at_parse = _parse_error(**literal)
    at_render = _render_error(**rendered)
    # The same sentence, the value quoted as it came (an int, or the rendered text).
    assert at_parse.replace("'", "") == at_render.replace("'", "")


@pytest.mark.parametrize("rendered", [{"min_messages": "two"}, {"window_timeout": "soon"}])
def test_rendered_text_that_is_no_number_is_named(rendered):
    ((name, value),) = rendered.items()
    text = _render_error(**rendered)
    assert name in text and repr(value) in text


def test_a_literal_checked_against_a_template_waits_for_the_render():
    _sensor(min_messages=500, max_messages="{{ params.max }}")  # the pair: once rendered
    assert "max_messages=2501" in _parse_error(max_messages=2501, min_messages="{{ x }}")


@pytest.mark.slow
def test_sizes_rendered_from_params_drive_the_window(airflow_db, nsqd, nsq_default, nsq_topic):
    for body in (b"a", b"b", b"c", b"d"):
        nsqd.http_publish(nsq_topic, body)
    dag = load_dag(DAGS, "nsq_sensor_templated")

    result = run_dag(dag, topic=nsq_topic, channel="sensor", min=2, max=3, window=1.5)

    assert result.state == "success", result.task_states
    assert [r["body"] for r in result.xcom["received"]] == ["a", "b", "c"]  # max_messages=3
    (left,) = read(nsqd, nsq_topic, "sensor", count=2, timeout=2)
    assert left.body == b"d"


@pytest.mark.slow
def test_a_bad_rendered_size_fails_the_task_and_takes_nothing(
    airflow_db, nsqd, nsq_default, nsq_topic
):
    nsqd.http_publish(nsq_topic, b"a")
    dag = load_dag(DAGS, "nsq_sensor_templated")

    result = run_dag(dag, topic=nsq_topic, channel="sensor", min=0)

    assert result.task_states["wait_for_messages"] == "failed"
    (still,) = read(nsqd, nsq_topic, "sensor", count=1, timeout=2)
    assert (still.body, still.attempts) == (b"a", 1)  # never delivered
