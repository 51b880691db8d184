"""pynsq (``nsq`` on PyPI), the official Python client, on tornado.

Used as its docs show: ``Writer.pub``/``mpub`` with a callback (the next command goes
out from the previous one's callback, so one is in flight at a time, as for every other
client), ``Reader`` with a message handler that returns True (pynsq then FINs), and
``AsyncConn`` for the bare handshake.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nsq

from .base import (
    BODY,
    MAX_RDY,
    MPUB_BATCH,
    ConsumeClock,
    Context,
    fill_channel,
    latencies,
    steps,
    throughput,
)


async def _writer(ctx: Context) -> nsq.Writer:
    writer = nsq.Writer([f"{ctx.host}:{ctx.port}"])
    for _ in range(500):  # the Writer connects on the next loop iteration
        if any(c.connected() for c in writer.conns.values()):
            return writer
        await asyncio.sleep(0.01)
    raise TimeoutError("pynsq Writer did not connect within 5 s")


async def _chain(send: Any, topic: str, payload: Any, calls: int) -> None:
    """``calls`` commands, each sent from the previous one's callback."""
    done = asyncio.get_running_loop().create_future()
    left = calls

    def callback(conn: Any, data: Any) -> None:
        nonlocal left
        if isinstance(data, Exception):
            done.set_exception(RuntimeError(f"pynsq: {data}"))
            return
        left -= 1
        if left:
            send(topic, payload, callback=callback)
        else:
            done.set_result(None)

    if calls:
        send(topic, payload, callback=callback)
        await done


async def _publish(ctx: Context, workload: str) -> dict[str, Any]:
    writer = await _writer(ctx)
    topic = ctx.topic(workload)
    send, payload, per_call = (
        (writer.pub, BODY, 1)
        if workload == "pub"
        else (writer.mpub, [BODY] * MPUB_BATCH, MPUB_BATCH)
    )
    warm, timed = steps(ctx, workload)
    await _chain(send, topic, payload, warm)
    timer = ctx.timer()
    timer.start()
    await _chain(send, topic, payload, timed)
    result = throughput(timer.stop(timed * per_call))
    for conn in list(writer.conns.values()):
        conn.close()
    return result


def pub(ctx: Context) -> dict[str, Any]:
    return asyncio.run(_publish(ctx, "pub"))


def mpub(ctx: Context) -> dict[str, Any]:
    return asyncio.run(_publish(ctx, "mpub"))


async def _consume(ctx: Context, topic: str, channel: str, clock: ConsumeClock) -> dict:
    done = asyncio.get_running_loop().create_future()

    def handler(message: Any) -> bool:
        clock.add(1)
        if clock.done and not done.done():
            done.set_result(clock.result())
        return True  # pynsq FINs the message

    reader = nsq.Reader(
        topic=topic,
        channel=channel,
        message_handler=handler,
        nsqd_tcp_addresses=[f"{ctx.host}:{ctx.port}"],
        max_in_flight=MAX_RDY,
    )
    try:
        return await asyncio.wait_for(done, 120)
    finally:
        reader.close()


def consume(ctx: Context) -> dict[str, Any]:
    topic, channel = ctx.topic("consume"), "bench"
    clock = ConsumeClock(ctx)
    fill_channel(ctx, topic, channel, clock.total + clock.backlog)
    return asyncio.run(_consume(ctx, topic, channel, clock))


async def _connect_once(ctx: Context) -> nsq.AsyncConn:
    ready = asyncio.get_running_loop().create_future()
    conn = nsq.AsyncConn(ctx.host, ctx.port)
    conn.on("ready", lambda **kw: ready.done() or ready.set_result(None))
    conn.on(
        "error",
        lambda **kw: ready.done() or ready.set_exception(RuntimeError(str(kw.get("error")))),
    )
    conn.connect()
    await ready
    return conn


async def _connect(ctx: Context) -> dict[str, Any]:
    for _ in range(ctx.warmups["connect"]):
        (await _connect_once(ctx)).close()
    timer = ctx.timer()
    samples: list[int] = []
    timer.start()
    for _ in range(ctx.counts["connect"]):
        t0 = time.perf_counter_ns()
        conn = await _connect_once(ctx)
        samples.append(time.perf_counter_ns() - t0)
        conn.close()
    return latencies(timer, samples)


def connect(ctx: Context) -> dict[str, Any]:
    return asyncio.run(_connect(ctx))
