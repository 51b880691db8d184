"""gnsq, the gevent NSQ client.

Used as its docs show: ``Producer.publish``/``multipublish`` (block until nsqd's
response), ``Consumer`` with an ``on_message`` handler (gnsq FINs after the handler
returns), and ``NsqdTCPClient.connect()`` + ``identify()`` for the bare handshake. No
monkey-patching: gnsq uses gevent sockets itself, and the channel fill (this project's
blocking client) runs before any greenlet starts.
"""

from __future__ import annotations

from typing import Any

import gevent
import gevent.event
import gnsq

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


def _producer(ctx: Context) -> gnsq.Producer:
    producer = gnsq.Producer([f"{ctx.host}:{ctx.port}"])
    producer.start()
    return producer


def pub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("pub")
    producer = _producer(ctx)
    try:
        return timed_calls(ctx, "pub", lambda: producer.publish(topic, BODY))
    finally:
        producer.close()


def mpub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("mpub")
    batch = [BODY] * MPUB_BATCH
    producer = _producer(ctx)
    try:
        return timed_calls(ctx, "mpub", lambda: producer.multipublish(topic, batch))
    finally:
        producer.close()


def consume(ctx: Context) -> dict[str, Any]:
    topic, channel = ctx.topic("consume"), "bench"
    clock = ConsumeClock(ctx)
    fill_channel(ctx, topic, channel, clock.total + clock.backlog)
    done = gevent.event.AsyncResult()

    def handler(consumer: Any, message: Any) -> None:
        clock.add(1)
        if clock.done and not done.ready():
            done.set(clock.result())
            # Stop reading here: while data keeps arriving gnsq's reader greenlet never
            # blocks, so the waiting greenlet would not run until the stream pauses.
            consumer.close()

    consumer = gnsq.Consumer(
        topic, channel, nsqd_tcp_addresses=[f"{ctx.host}:{ctx.port}"], max_in_flight=MAX_RDY
    )
    consumer.on_message.connect(handler, weak=False)
    consumer.start(block=False)
    try:
        return done.get(timeout=120)
    except gevent.Timeout:  # a BaseException: would end the worker, not the workload
        raise TimeoutError(f"got {clock.got} of {clock.total} messages in 120 s") from None
    finally:
        consumer.close()


def connect(ctx: Context) -> dict[str, Any]:
    def once() -> Any:
        conn = gnsq.NsqdTCPClient(ctx.host, ctx.port)
        conn.connect()
        conn.identify()
        return conn.close_stream

    return measure_connects(ctx, once)
