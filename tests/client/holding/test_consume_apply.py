"""The consume-and-apply loop's parts without Airflow: the function's thread, the
dead-letter envelope, and a run with no message limit (the operator's own tests are in
tests/operators/test_consume_operator.py)."""

from __future__ import annotations

import contextvars
import threading

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection, NSQConsumer, NSQMessage
from airflow_provider_nsq.client.holding.apply import ApplySettings, ConsumeApply
from airflow_provider_nsq.client.holding.dead_letters import MAX_ERROR_CHARS, dead_letter_envelope
from airflow_provider_nsq.client.holding.function_thread import FunctionThread
from airflow_provider_nsq.client.message import decode_record_body

REQUEST = contextvars.ContextVar("REQUEST", default="unset")


def test_the_function_thread_runs_calls_in_order_with_the_callers_context():
    thread = FunctionThread("test-apply")
    REQUEST.set("task-1")

    def call(n: int) -> tuple[int, str, bool]:
        return n, REQUEST.get(), threading.current_thread().daemon

    def fail() -> None:
        raise KeyError("boom")

    futures = [thread.submit(call, n) for n in range(3)]
    failed = thread.submit(fail)
    thread.stop()
    assert [f.result(timeout=5) for f in futures] == [(n, "task-1", True) for n in range(3)]
    assert isinstance(failed.exception(timeout=5), KeyError)


def test_an_envelope_is_the_record_plus_what_happened_with_the_error_cut():
    message = NSQMessage(1_700_000_000_000_000_000, 4, b"0123456789abcdef", b"\xff\xfe")
    envelope = dead_letter_envelope(
        message,
        "orders",
        "warehouse",
        "max_attempts",
        error=ValueError("x" * 5000),
        by={"dag_id": "d"},
        failed_at_ns=1_700_000_001_000_000_000,
    )
    assert envelope == {
        "id": "0123456789abcdef",
        "body": "//4=",
        "body_encoding": "base64",
        "attempts": 4,
        "timestamp": 1_700_000_000_000_000_000,
        "topic": "orders",
        "channel": "warehouse",
        "nsqd": "",
        "reason": "max_attempts",
        "error": {"type": "ValueError", "message": "x" * (MAX_ERROR_CHARS - 3) + "..."},
        "failed_at": 1_700_000_001_000_000_000,
        "by": {"dag_id": "d"},
    }
    assert decode_record_body(envelope) == b"\xff\xfe"


@pytest.mark.parametrize("batch", [False, True], ids=["per-message", "batch"])
def test_without_max_messages_a_run_takes_everything_then_ends_on_its_window(
    nsqd, nsq_topic, batch
):
    config = ClientConfig(host=nsqd.host, port=nsqd.tcp_port)
    with NSQConnection(config) as conn:
        conn.multi_publish(nsq_topic, [f"m{i}".encode() for i in range(7)])
    seen: list[str] = []

    def apply(given):
        seen.extend(r["body"] for r in (given if batch else [given]))

    run = ConsumeApply(
        NSQConsumer(nsq_topic, "apply", config=config),
        apply,
        topic=nsq_topic,
        channel="apply",
        settings=ApplySettings(batch=batch, max_messages=None, max_in_flight=3, idle_timeout=0.5),
    )
    summary = run.run()

    assert sorted(seen) == [f"m{i}" for i in range(7)]
    assert (summary.applied, summary.ended) == (7, "idle_timeout")

    def all_finished() -> bool:
        stats = nsqd.channel_stats(nsq_topic, "apply")
        return (stats["depth"], stats["in_flight_count"]) == (0, 0)

    nsqd.wait_for(all_finished)
