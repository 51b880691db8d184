"""This project's blocking client, ``airflow_provider_nsq.client.NSQConnection``."""

from __future__ import annotations

from typing import Any

from airflow_provider_nsq.client import NSQConnection

from .base import (
    BODY,
    MAX_RDY,
    MPUB_BATCH,
    ConsumeClock,
    Context,
    fill_channel,
    measure_connects,
    project_config,
    timed_calls,
)


def pub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("pub")
    with NSQConnection(project_config(ctx)) as conn:
        return timed_calls(ctx, "pub", lambda: conn.publish(topic, BODY))


def mpub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("mpub")
    batch = [BODY] * MPUB_BATCH
    with NSQConnection(project_config(ctx)) as conn:
        return timed_calls(ctx, "mpub", lambda: conn.multi_publish(topic, batch))


def consume(ctx: Context) -> dict[str, Any]:
    topic, channel = ctx.topic("consume"), "bench"
    clock = ConsumeClock(ctx)
    fill_channel(ctx, topic, channel, clock.total + clock.backlog)
    with NSQConnection(project_config(ctx)) as conn:
        conn.subscribe(topic, channel)
        conn.ready(MAX_RDY)
        # The loop a streaming consumer writes: read what arrived, FIN it in one write.
        while not clock.done:
            messages = conn.read_messages(10.0)
            if not messages:
                raise TimeoutError(f"no message for 10 s after {clock.got} of {clock.total}")
            conn.finish(*messages)
            clock.add(len(messages))
        return clock.result()


def connect(ctx: Context) -> dict[str, Any]:
    config = project_config(ctx)

    def once() -> Any:
        return NSQConnection(config).connect().close

    return measure_connects(ctx, once)
