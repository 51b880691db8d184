"""A cancelled asyncio read ends in ``CancelledError``, also when a message arrives at the
same moment.

On Python 3.11 ``asyncio.wait_for`` returns the awaited result instead of raising when the
task is cancelled in the loop iterations between that result arriving and ``wait_for``
waking up, so the cancellation is lost. A consumer read lost that way keeps the task
running: the triggerer's shared stream, cancelled on shutdown, then polls on for ever and
its ``stop()`` never returns. Each round here cancels the read a few loop iterations after
the message has reached the client, across the whole window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from airflow_provider_nsq.client import AsyncNSQConnection, ClientConfig
from airflow_provider_nsq.client.consumer import AsyncNSQConsumer

pytestmark = pytest.mark.timeout(60)

#: Loop iterations between the message reaching the client and the cancel: on Python
#: 3.11 the first three lose the cancellation with ``wait_for``.
SPINS = range(5)


async def _cancel_as_a_message_arrives(
    read: Callable[[], Awaitable[object]],
    in_flight: Callable[[], int],
    publish: Callable[[], None],
    spins: int,
) -> bool:
    """Start ``read``, publish one message, cancel the read ``spins`` loop iterations
    after the client has the message. False only when the read was still running when
    cancelled and then returned (the cancellation lost); a read that had already
    returned is fine."""
    before = in_flight()
    reader = asyncio.create_task(read())
    await asyncio.sleep(0)  # the read is waiting
    await asyncio.to_thread(publish)
    async with asyncio.timeout(10):
        while in_flight() == before:
            await asyncio.sleep(0)
    for _ in range(spins):
        await asyncio.sleep(0)
    if reader.done():
        await reader
        return True
    reader.cancel()
    try:
        await reader
    except asyncio.CancelledError:
        return True
    return False


def test_a_consumer_read_cancelled_as_a_message_arrives_is_cancelled(nsqd, nsq_topic) -> None:
    async def scenario() -> list[bool]:
        config = ClientConfig(host=nsqd.host, port=nsqd.tcp_port)
        consumer = AsyncNSQConsumer(nsq_topic, "c", config=config)
        nsqd.create_channel(nsq_topic, "c")
        await consumer.start(100)
        try:
            return [
                await _cancel_as_a_message_arrives(
                    lambda: consumer.read(30),
                    consumer.in_flight,
                    lambda: nsqd.http_publish(nsq_topic, b"m"),
                    spins,
                )
                for spins in SPINS
            ]
        finally:
            await consumer.close()

    assert asyncio.run(scenario()) == [True] * len(SPINS)


def test_a_connection_read_cancelled_as_a_message_arrives_is_cancelled(nsqd, nsq_topic) -> None:
    async def scenario() -> list[bool]:
        async with AsyncNSQConnection(ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
            await conn.subscribe(nsq_topic, "c")
            conn.ready(100)
            return [
                await _cancel_as_a_message_arrives(
                    lambda: conn.read_messages(30),
                    lambda: conn.in_flight,
                    lambda: nsqd.http_publish(nsq_topic, b"m"),
                    spins,
                )
                for spins in SPINS
            ]

    assert asyncio.run(scenario()) == [True] * len(SPINS)
