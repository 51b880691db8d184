"""This project's asyncio driver, ``airflow_provider_nsq.client.AsyncNSQConnection``.

One coroutine at a time, as the other clients: PUB and MPUB wait for each OK before the
next command, so the figures compare per-call cost, not pipelining.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow_provider_nsq.client import AsyncNSQConnection

from .base import (
    BODY,
    MAX_RDY,
    MPUB_BATCH,
    ConsumeClock,
    Context,
    fill_channel,
    latencies,
    project_config,
    steps,
    throughput,
)


async def _publish(ctx: Context, workload: str) -> dict[str, Any]:
    topic = ctx.topic(workload)
    batch = [BODY] * MPUB_BATCH
    warm, timed = steps(ctx, workload)
    async with AsyncNSQConnection(project_config(ctx)) as conn:
        if workload == "pub":
            for _ in range(warm):
                await conn.publish(topic, BODY)
            timer = ctx.timer()
            timer.start()
            for _ in range(timed):
                await conn.publish(topic, BODY)
            return throughput(timer.stop(timed))
        for _ in range(warm):
            await conn.multi_publish(topic, batch)
        timer = ctx.timer()
        timer.start()
        for _ in range(timed):
            await conn.multi_publish(topic, batch)
        return throughput(timer.stop(timed * MPUB_BATCH))


def pub(ctx: Context) -> dict[str, Any]:
    return asyncio.run(_publish(ctx, "pub"))


def mpub(ctx: Context) -> dict[str, Any]:
    return asyncio.run(_publish(ctx, "mpub"))


async def _consume(ctx: Context, topic: str, channel: str, clock: ConsumeClock) -> dict:
    async with AsyncNSQConnection(project_config(ctx)) as conn:
        await conn.subscribe(topic, channel)
        conn.ready(MAX_RDY)
        while not clock.done:
            messages = await conn.read_messages(10.0)
            if not messages:
                raise TimeoutError(f"no message for 10 s after {clock.got} of {clock.total}")
            conn.finish(*messages)
            clock.add(len(messages))
        return clock.result()


def consume(ctx: Context) -> dict[str, Any]:
    topic, channel = ctx.topic("consume"), "bench"
    clock = ConsumeClock(ctx)
    fill_channel(ctx, topic, channel, clock.total + clock.backlog)
    return asyncio.run(_consume(ctx, topic, channel, clock))


async def _connect(ctx: Context) -> dict[str, Any]:
    config = project_config(ctx)
    for _ in range(ctx.warmups["connect"]):
        await (await AsyncNSQConnection(config).connect()).close()
    timer = ctx.timer()
    samples: list[int] = []
    timer.start()
    for _ in range(ctx.counts["connect"]):
        t0 = time.perf_counter_ns()
        conn = await AsyncNSQConnection(config).connect()
        samples.append(time.perf_counter_ns() - t0)
        await conn.close()
    return latencies(timer, samples)


def connect(ctx: Context) -> dict[str, Any]:
    return asyncio.run(_connect(ctx))
