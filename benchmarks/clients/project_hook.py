"""This project's blocking client through ``NSQHook``, as an Airflow task uses it.

The parent process sets ``AIRFLOW_HOME`` (a temporary directory) and
``AIRFLOW_CONN_NSQ_BENCH`` before this worker starts, so importing Airflow touches
nothing of the user's and the hook reads its connection from the environment.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_nsq.hooks.nsq import NSQHook

from .base import (
    BODY,
    MAX_RDY,
    MPUB_BATCH,
    ConsumeClock,
    Context,
    fill_channel,
    measure_connects,
    timed_calls,
)

CONN_ID = "nsq_bench"


def pub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("pub")
    with NSQHook(nsq_conn_id=CONN_ID) as hook:
        return timed_calls(ctx, "pub", lambda: hook.publish(topic, BODY))


def mpub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("mpub")
    batch = [BODY] * MPUB_BATCH
    with NSQHook(nsq_conn_id=CONN_ID) as hook:
        return timed_calls(ctx, "mpub", lambda: hook.multi_publish(topic, batch))


def consume(ctx: Context) -> dict[str, Any]:
    # The hook has no streaming consumer: a sensor or task takes one subscribe window
    # per call (fresh connection, SUB, RDY n, collect, CLS, FIN), so this row measures
    # back-to-back windows of the largest size nsqd allows.
    topic, channel = ctx.topic("consume"), "bench"
    clock = ConsumeClock(ctx)
    fill_channel(ctx, topic, channel, clock.total + clock.backlog)
    with NSQHook(nsq_conn_id=CONN_ID) as hook:
        while not clock.done:
            # The warm-up is a window of its own, so timing starts on a window boundary.
            end = clock.warmup if clock.got < clock.warmup else clock.total
            want = min(MAX_RDY, end - clock.got)
            got = hook.consume(topic, channel, max_messages=want, timeout=10.0)
            if not got:
                raise TimeoutError(f"empty window after {clock.got} of {clock.total}")
            clock.add(len(got))
        result = clock.result()
    result["note"] = f"hook.consume() windows of {MAX_RDY}"
    return result


def connect(ctx: Context) -> dict[str, Any]:
    # A task's cost: a new hook, its Connection looked up, then open + IDENTIFY.
    def once() -> Any:
        hook = NSQHook(nsq_conn_id=CONN_ID)
        hook.get_conn()
        return hook.close

    return measure_connects(ctx, once)
