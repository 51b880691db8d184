"""NSQConsumeOperator: arguments checked at DAG parse, then what nsqd holds after a run
(FIN after the function returned, REQ with backoff when it raised, dead letters after
max_attempts, nothing lost when the task fails), TOUCH during a slow function, the three
ways a run ends, results, templates and metrics."""

from __future__ import annotations

import datetime
import json
import re
import threading
import time
import types

import pytest
from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_nsq import metrics
from airflow_provider_nsq.client import NSQConnection
from airflow_provider_nsq.client.message import decode_record_body
from airflow_provider_nsq.operators.nsq_consume import NSQConsumeOperator
from airflow_provider_nsq.protocol.errors import NSQPoisonMessageError, NSQValueError
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.airflow_runs import EXAMPLE_DAGS, TEST_DAGS, load_dag, run_dag
from tests.support.dags import nsq_consume_dags
from tests.support.nsqd_contents import channel_is_empty, client_config, read

DAGS = TEST_DAGS / "nsq_consume_dags.py"
RECORD_KEYS = {"id", "body", "body_encoding", "attempts", "timestamp", "topic", "channel", "nsqd"}
TI = types.SimpleNamespace(dag_id="orders", task_id="apply", run_id="manual__1")


def _op(**kwargs) -> NSQConsumeOperator:
    defaults = {"task_id": "apply", "topic": "events", "channel": "apply", "idle_timeout": 1.0}
    if "apply_function" not in kwargs and "apply_function_batch" not in kwargs:
        defaults["apply_function"] = lambda record: None
    return NSQConsumeOperator(**{**defaults, **kwargs})


def _dead(topic: str) -> str:
    """A dead-letter topic for ``topic`` (names are at most 64 characters; the fixture's
    unique suffix is kept)."""
    return f"dead_{topic[-40:]}"


def _publish(nsqd, topic: str, bodies: list[bytes]) -> None:
    with NSQConnection(client_config(nsqd)) as conn:
        conn.multi_publish(topic, bodies)


def _held_back(nsqd, topic: str, channel: str, count: int):
    """A predicate: ``count`` messages wait on the channel (ready or deferred), none in
    flight: everything the task took and did not FIN was handed back."""

    def held_back() -> bool:
        stats = nsqd.channel_stats(topic, channel) or {}
        waiting = stats.get("depth", 0) + stats.get("deferred_count", 0)
        return (waiting, stats.get("in_flight_count")) == (count, 0)

    return held_back


class Calls:
    """An apply function that records what it was given (from its own thread)."""

    def __init__(self, fail=lambda record: False, seconds: float = 0.0, result=None) -> None:
        self.records: list[dict] = []
        self.times: list[float] = []
        self.threads: set[str] = set()
        self.fail = fail
        self.seconds = seconds
        self.result = result

    def __call__(self, record):
        self.records.append(record)
        self.times.append(time.monotonic())
        self.threads.add(threading.current_thread().name)
        if self.seconds:
            time.sleep(self.seconds)
        if self.fail(record):
            raise ValueError(f"cannot apply {record['body']!r}")
        return self.result(record) if self.result else None

    def seen(self) -> list[tuple[str, int]]:
        return [(r["body"], r["attempts"]) for r in self.records]


# -- arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"apply_function": print, "apply_function_batch": print}, "exactly one"),
        ({"apply_function": None}, "exactly one"),
        (
            {"apply_function": 42},
            "apply_function must be a callable or a dotted path (module.function), got 42",
        ),
        ({"apply_function": "nodots"}, "'nodots'"),
        ({"topic": "bad topic!"}, "'bad topic!'"),
        ({"channel": "bad channel"}, "'bad channel'"),
        ({"channel": "apply#ephemeral"}, "'apply#ephemeral' is #ephemeral"),
        ({"max_messages": 0}, "max_messages must be an int >= 1, got 0"),
        ({"max_messages": "lots"}, "got 'lots'"),
        ({"max_messages": True}, "got True"),
        ({"max_batch_size": 0}, "max_batch_size must be an int 1-2500"),
        ({"max_batch_size": 2501}, "got 2501"),
        ({"idle_timeout": 0}, "idle_timeout must be a number of seconds > 0, got 0"),
        ({"max_attempts": 0}, "max_attempts must be an int >= 1, got 0"),
        ({"requeue_delay": -5}, "requeue_delay must not be negative"),
        ({"requeue_delay": 1.5}, "requeue_delay must be a timedelta or whole milliseconds"),
        ({"dead_letter_topic": "events"}, "dead_letter_topic must differ from topic"),
        ({"dead_letter_topic": "dead letters"}, "'dead letters'"),
        ({"return_apply_function_results": "yes"}, "got 'yes'"),
    ],
)
def test_bad_literal_arguments_fail_at_dag_parse_naming_the_value(kwargs, named):
    with pytest.raises(NSQValueError, match=re.escape(named)):
        _op(**kwargs)


def test_templated_arguments_are_checked_when_rendered_without_network():
    # Parsing reads no connection: this one does not exist.
    op = _op(
        topic="{{ params.topic }}",
        channel="{{ params.channel }}",
        max_messages="{{ params.max }}",
        idle_timeout="{{ params.idle }}",
        dead_letter_topic="{{ params.dead }}",
        nsq_conn_id="nowhere",
    )
    assert {
        "topic",
        "channel",
        "apply_function_args",
        "apply_function_kwargs",
        "max_messages",
        "idle_timeout",
        "dead_letter_topic",
        "nsq_conn_id",
    } <= set(op.template_fields)

    op.topic, op.channel, op.max_messages, op.idle_timeout = "events", "apply#ephemeral", "3", "1"
    with pytest.raises(NSQValueError, match="is #ephemeral"):
        op.execute({})
    op.channel, op.dead_letter_topic = "apply", "events"
    with pytest.raises(NSQValueError, match="must differ from topic"):
        op.execute({})
    op.dead_letter_topic, op.max_messages = None, "-1"
    with pytest.raises(NSQValueError, match="max_messages"):
        op.execute({})


def test_a_dotted_path_is_imported_when_the_task_runs(nsqd, nsq_default, nsq_topic):
    op = _op(topic=nsq_topic, apply_function="tests.support.dags.nsq_consume_dags.no_such_function")
    with pytest.raises(NSQValueError, match=r"apply_function .* cannot be imported"):
        op.execute({})


# -- applying ----------------------------------------------------------------------------


def test_each_message_is_applied_on_its_own_thread_then_finished(nsqd, nsq_default, nsq_topic):
    _publish(nsqd, nsq_topic, [b"a", b"b", b"\xff\x00"])
    given: list = []

    def apply(*args, **kwargs):
        given.append((args, kwargs, threading.current_thread() is threading.main_thread()))

    op = _op(
        topic=nsq_topic,
        apply_function=apply,
        apply_function_args=["first"],
        apply_function_kwargs={"key": "value"},
        max_messages=3,
    )

    summary = op.execute({})

    assert summary == {
        "topic": nsq_topic,
        "channel": "apply",
        "messages": 3,
        "applied": 3,
        "requeued": 0,
        "dead_lettered": 0,
        "nsqds": [nsqd.tcp_address],
        "ended": "max_messages",
    }
    # Kafka's order: the positional arguments, then the record; the keywords.
    assert all(args[0] == "first" and kwargs == {"key": "value"} for args, kwargs, _ in given)
    assert not any(on_main for _, _, on_main in given)
    records = [args[1] for args, _, _ in given]
    assert all(set(r) == RECORD_KEYS for r in records)
    assert [decode_record_body(r) for r in records] == [b"a", b"b", b"\xff\x00"]
    assert records[2]["body_encoding"] == "base64"
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "apply"))


def test_batches_of_max_batch_size_are_applied_then_finished(nsqd, nsq_default, nsq_topic):
    _publish(nsqd, nsq_topic, [f"m{i}".encode() for i in range(5)])
    batches: list[list[str]] = []
    op = _op(
        topic=nsq_topic,
        apply_function_batch=lambda records: batches.append([r["body"] for r in records]),
        max_batch_size=2,
        max_messages=5,
    )

    summary = op.execute({})

    assert (summary["applied"], summary["ended"]) == (5, "max_messages")
    assert [len(b) for b in batches] == [2, 2, 1]
    assert sorted(body for b in batches for body in b) == [f"m{i}" for i in range(5)]
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "apply"))


def test_a_failing_batch_is_requeued_as_a_whole(nsqd, nsq_default, nsq_topic):
    _publish(nsqd, nsq_topic, [b"x", b"y"])

    def fail(records):
        raise RuntimeError("warehouse down")

    op = _op(topic=nsq_topic, apply_function_batch=fail, max_batch_size=2, max_messages=2)
    summary = op.execute({})

    assert (summary["applied"], summary["requeued"]) == (0, 2)
    nsqd.wait_for(_held_back(nsqd, nsq_topic, "apply", 2))


def test_a_failure_is_requeued_with_a_delay_doubling_per_delivery(nsqd, nsq_default, nsq_topic):
    nsqd.create_channel(nsq_topic, "apply")
    nsqd.http_publish(nsq_topic, b"flaky")
    calls = Calls(fail=lambda record: record["attempts"] < 3)
    op = _op(
        topic=nsq_topic,
        apply_function=calls,
        requeue_delay=datetime.timedelta(milliseconds=400),
        max_messages=3,
        # nsqd finds due deferred messages by sampling 20 channels every 100 ms: a real
        # nsqd holding hundreds of channels hands them back seconds late.
        idle_timeout=30,
    )

    summary = op.execute({})

    assert calls.seen() == [("flaky", 1), ("flaky", 2), ("flaky", 3)]
    first, second = calls.times[1] - calls.times[0], calls.times[2] - calls.times[1]
    assert first >= 0.4, first  # REQ after delivery 1: 400 ms
    assert second >= 0.8, second  # after delivery 2: 800 ms
    assert (summary["applied"], summary["requeued"]) == (1, 2)
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "apply"))


def test_the_requeue_delay_is_capped_at_the_connections_max_req_timeout(
    nsqd, nsq_default, nsq_topic
):
    nsqd.http_publish(nsq_topic, b"always-fails")

    def fail(record):
        raise ValueError("no")

    # Two hours: nsqd (--max-req-timeout, 1 h) would refuse that REQ and close the
    # connection; the operator sends 1 h instead.
    op = _op(
        topic=nsq_topic,
        apply_function=fail,
        requeue_delay=datetime.timedelta(hours=2),
        max_attempts=None,
        max_messages=1,
    )
    try:
        summary = op.execute({})
        assert summary["requeued"] == 1

        def deferred() -> bool:
            stats = nsqd.channel_stats(nsq_topic, "apply") or {}
            return (stats.get("deferred_count"), stats.get("in_flight_count")) == (1, 0)

        nsqd.wait_for(deferred)
    finally:
        nsqd.delete_topic(nsq_topic)


# -- dead letters ------------------------------------------------------------------------


def test_a_poison_message_is_dead_lettered_after_max_attempts(nsqd, nsq_default, nsq_topic):
    dead = _dead(nsq_topic)
    nsqd.create_channel(dead, "inspect")
    _publish(nsqd, nsq_topic, [b"good", b"\xffpoison"])
    calls = Calls(fail=lambda record: record["body_encoding"] == "base64")
    op = _op(
        topic=nsq_topic,
        apply_function=calls,
        max_attempts=3,
        requeue_delay=0,
        dead_letter_topic=dead,
        max_messages=4,
    )
    published_after = time.time_ns()

    summary = op.execute({"ti": TI})

    assert (summary["applied"], summary["requeued"], summary["dead_lettered"]) == (1, 2, 1)
    assert sorted(attempts for body, attempts in calls.seen() if body != "good") == [1, 2, 3]
    (letter,) = read(nsqd, dead, "inspect", count=1)
    envelope = json.loads(letter.body)
    assert decode_record_body(envelope) == b"\xffpoison"
    assert {k: envelope[k] for k in ("topic", "channel", "nsqd", "attempts", "body_encoding")} == {
        "topic": nsq_topic,
        "channel": "apply",
        "nsqd": nsqd.tcp_address,
        "attempts": 3,
        "body_encoding": "base64",
    }
    assert envelope["error"] == {"type": "ValueError", "message": "cannot apply '/3BvaXNvbg=='"}
    assert envelope["by"] == {"dag_id": "orders", "task_id": "apply", "run_id": "manual__1"}
    assert envelope["timestamp"] <= envelope["failed_at"]
    assert envelope["failed_at"] >= published_after
    assert len(envelope["id"]) == 16
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "apply"))


def test_the_envelope_never_carries_a_secret(nsqd, nsq_default, nsq_topic):
    try:
        from airflow.providers.common.compat.sdk import mask_secret
    except ImportError:  # common-compat before 1.22 (the floor) has no mask_secret
        from airflow.sdk.execution_time.secrets_masker import mask_secret

    dead = _dead(nsq_topic)
    nsqd.create_channel(dead, "inspect")
    nsqd.http_publish(nsq_topic, b"m")
    mask_secret("s3cr3t-token")

    def leak(record):
        raise PermissionError("login with s3cr3t-token refused")

    op = _op(topic=nsq_topic, apply_function=leak, max_attempts=1, dead_letter_topic=dead)
    assert op.execute({})["dead_lettered"] == 1
    (letter,) = read(nsqd, dead, "inspect", count=1)
    assert json.loads(letter.body)["error"] == {
        "type": "PermissionError",
        "message": "login with *** refused",
    }


def test_without_a_dead_letter_topic_max_attempts_fails_the_task_and_requeues(
    nsqd, nsq_default, nsq_topic
):
    nsqd.create_channel(nsq_topic, "apply")
    _publish(nsqd, nsq_topic, [b"poison", b"next-1", b"next-2"])
    calls = Calls(fail=lambda record: record["body"] == "poison")
    op = _op(
        topic=nsq_topic, apply_function=calls, max_attempts=1, max_batch_size=3, max_messages=3
    )

    with pytest.raises(NSQPoisonMessageError, match="failed delivery 1 and no dead_letter_topic"):
        op.execute({})

    # The poison message and what the task had read ahead are all back on the channel.
    nsqd.wait_for(_held_back(nsqd, nsq_topic, "apply", 3))
    assert calls.seen() == [("poison", 1)]


def test_a_failed_dead_letter_publish_requeues_and_fails_the_task(nsqd_factory, monkeypatch):
    small = nsqd_factory(max_msg_size=200)  # the body fits, its envelope does not
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{small.tcp_address}?http_port={small.http_port}"
    )
    small.create_channel("orders", "apply")
    small.http_publish("orders", b"p" * 150)

    def fail(record):
        raise ValueError("no")

    op = _op(topic="orders", apply_function=fail, max_attempts=1, dead_letter_topic="orders_dead")
    with pytest.raises(NSQPoisonMessageError, match="could not be published to the dead-letter"):
        op.execute({})
    small.wait_for(_held_back(small, "orders", "apply", 1))


# -- keeping messages in flight ----------------------------------------------------------


@pytest.mark.slow
def test_a_slow_function_keeps_its_messages_in_flight_with_touch(nsqd, monkeypatch, nsq_topic):
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT",
        f"nsq://{nsqd.tcp_address}?http_port={nsqd.http_port}&msg_timeout_ms=2000",
    )
    _publish(nsqd, nsq_topic, [b"slow-1", b"slow-2"])
    calls = Calls(seconds=3.0)  # each call outlives msg_timeout; the second waits 3 s more
    op = _op(topic=nsq_topic, apply_function=calls, max_batch_size=2, max_messages=2)

    summary = op.execute({})

    assert calls.seen() == [("slow-1", 1), ("slow-2", 1)]  # never redelivered
    assert summary["applied"] == 2
    stats = nsqd.channel_stats(nsq_topic, "apply")
    assert stats["timeout_count"] == 0, stats
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "apply"))


# -- how a run ends ----------------------------------------------------------------------


def test_max_messages_takes_no_more_than_it_answers(nsqd, nsq_default, nsq_topic):
    nsqd.create_channel(nsq_topic, "apply")
    _publish(nsqd, nsq_topic, [f"m{i}".encode() for i in range(5)])
    op = _op(topic=nsq_topic, max_messages=3, max_batch_size=10)

    summary = op.execute({})

    assert (summary["applied"], summary["ended"]) == (3, "max_messages")
    left = read(nsqd, nsq_topic, "apply", count=2)
    assert [m.attempts for m in left] == [1, 1]  # never delivered: the budget held them


def test_an_empty_channel_ends_the_run_after_idle_timeout(nsqd, nsq_default, nsq_topic):
    started = time.monotonic()
    summary = _op(topic=nsq_topic, idle_timeout=1.0).execute({})
    elapsed = time.monotonic() - started
    assert (summary["messages"], summary["ended"]) == (0, "idle_timeout")
    assert 1.0 <= elapsed < 4.0, elapsed


def test_the_idle_timeout_counts_from_the_last_message(nsqd, nsq_default, nsq_topic):
    nsqd.create_channel(nsq_topic, "apply")
    bodies = [f"t{i}".encode() for i in range(4)]

    def trickle() -> None:
        for n, body in enumerate(bodies):
            nsqd.http_publish(nsq_topic, body)
            # The next one a third of the idle_timeout after this one was applied: the
            # wait is on the apply, the pause only spaces them.
            wait_for(lambda n=n: len(calls.records) > n, 10)
            time.sleep(0.5)

    publisher = threading.Thread(target=trickle, daemon=True)
    calls = Calls()
    publisher.start()
    summary = _op(topic=nsq_topic, apply_function=calls, idle_timeout=1.5).execute({})
    ended = time.monotonic()
    publisher.join(5)

    assert [body for body, _ in calls.seen()] == ["t0", "t1", "t2", "t3"]
    assert summary["ended"] == "idle_timeout"
    # Counted from the last message: the run outlived an idle_timeout from the first one.
    assert ended - calls.times[-1] >= 1.5 and calls.times[-1] - calls.times[0] >= 1.5
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "apply"))


def test_a_kill_hands_back_what_the_task_held(nsqd, nsq_default, nsq_topic):
    nsqd.create_channel(nsq_topic, "apply")
    _publish(nsqd, nsq_topic, [b"k1", b"k2", b"k3"])
    started = threading.Event()
    release = threading.Event()

    def stuck(record):
        started.set()
        release.wait(30)

    op = _op(topic=nsq_topic, apply_function=stuck, max_batch_size=3)
    # on_kill runs in Airflow's SIGTERM handler; here another thread stands in for it.
    killer = threading.Thread(target=lambda: started.wait(10) and op.on_kill(), daemon=True)
    killer.start()
    try:
        with pytest.raises(AirflowException, match="killed"):
            op.execute({})
    finally:
        release.set()
    nsqd.wait_for(_held_back(nsqd, nsq_topic, "apply", 3))


# -- results -----------------------------------------------------------------------------


def test_return_apply_function_results_returns_the_non_none_results(nsqd, nsq_default, nsq_topic):
    _publish(nsqd, nsq_topic, [b"1", b"skip", b"3"])

    def parse(record):
        return None if record["body"] == "skip" else {"n": int(record["body"])}

    op = _op(
        topic=nsq_topic, apply_function=parse, max_messages=3, return_apply_function_results=True
    )
    assert op.execute({}) == [{"n": 1}, {"n": 3}]


def test_a_result_xcom_cannot_store_fails_the_task_and_requeues(nsqd, nsq_default, nsq_topic):
    nsqd.create_channel(nsq_topic, "apply")
    nsqd.http_publish(nsq_topic, b"m")
    op = _op(
        topic=nsq_topic,
        apply_function=lambda record: object(),
        return_apply_function_results=True,
    )
    with pytest.raises(NSQValueError, match="returned a object, which cannot be kept as a JSON"):
        op.execute({})
    nsqd.wait_for(_held_back(nsqd, nsq_topic, "apply", 1))


# -- metrics -----------------------------------------------------------------------------


def test_the_operator_counts_applied_requeued_and_dead_lettered(
    mocker, nsqd, nsq_default, nsq_topic
):
    stats = mocker.Mock()
    mocker.patch.object(metrics, "_task_stats", return_value=stats)
    _publish(nsqd, nsq_topic, [b"ok", b"bad"])
    op = _op(
        topic=nsq_topic,
        apply_function=Calls(fail=lambda record: record["body"] == "bad"),
        max_attempts=2,
        requeue_delay=0,
        dead_letter_topic=_dead(nsq_topic),
        max_messages=3,
    )
    op.execute({"ti": TI})

    tags = {"dag_id": "orders", "task_id": "apply", "topic": nsq_topic, "channel": "apply"}
    counted: dict[str, int] = {}
    for call in stats.incr.call_args_list:
        assert call.kwargs["tags"] == tags
        counted[call.args[0]] = counted.get(call.args[0], 0) + call.args[1]
    assert counted == {
        "nsq.consume.applied": 1,
        "nsq.consume.requeued": 1,
        "nsq.consume.dead_lettered": 1,
    }
    timed = {call.args[0] for call in stats.timing.call_args_list}
    assert timed == {"nsq.consume.apply_duration", "nsq.consume.delay"}


# -- whole DAG runs ----------------------------------------------------------------------


@pytest.mark.slow
def test_templated_fields_are_rendered(airflow_db, nsqd, nsq_default, nsq_topic):
    _publish(nsqd, nsq_topic, [b"a", b"b", b"c"])
    dag = load_dag(DAGS, "nsq_consume_templated")
    result = run_dag(dag, topic=nsq_topic, channel="tpl", dead=_dead(nsq_topic))
    assert result.state == "success", result
    assert result.xcom["consume"] == [
        f"tpl:a:{result.run_id}@consume",
        f"tpl:b:{result.run_id}@consume",
    ]
    (left,) = read(nsqd, nsq_topic, "tpl", count=1)  # max_messages rendered: 2
    assert left.body == b"c"


@pytest.mark.slow
def test_a_task_timeout_hands_back_what_the_task_held(airflow_db, nsqd, nsq_default, nsq_topic):
    nsqd.create_channel(nsq_topic, "slow")
    _publish(nsqd, nsq_topic, [b"t1", b"t2", b"t3"])
    try:
        result = run_dag(load_dag(DAGS, "nsq_consume_timeout"), topic=nsq_topic, channel="slow")
    finally:
        nsq_consume_dags.RELEASE.set()
    assert result.task_states["consume"] == "failed", result
    nsqd.wait_for(_held_back(nsqd, nsq_topic, "slow", 3))
    again = read(nsqd, nsq_topic, "slow", count=3)
    assert sorted(m.body for m in again) == [b"t1", b"t2", b"t3"]
    nsq_consume_dags.RELEASE.clear()


@pytest.mark.slow
def test_the_example_dag_applies_orders_and_dead_letters_the_bad_one(
    airflow_db, nsqd, nsq_default, nsq_topic
):
    dead = _dead(nsq_topic)
    nsqd.create_channel(dead, "inspect")
    orders = [{"order_id": i, "amount": 10 * i} for i in (1, 2)]
    _publish(nsqd, nsq_topic, [json.dumps(o).encode() for o in orders] + [b"not json"])
    dag = load_dag(EXAMPLE_DAGS / "nsq_consume_apply.py", "nsq_consume_apply")

    result = run_dag(dag, topic=nsq_topic, dead_letter_topic=dead, max_attempts=1)

    assert result.state == "success", result
    summary = result.xcom["apply_orders"]
    assert (summary["applied"], summary["dead_lettered"]) == (2, 1)
    (letter,) = read(nsqd, dead, "inspect", count=1)
    assert json.loads(letter.body)["body"] == "not json"
