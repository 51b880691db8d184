"""Issue 11, item 1: concurrent publishes on an AsyncNSQConnection that is not connected
yet, or whose connection just dropped, share ONE new connection: replies never cross
connections, no socket is left open after close(), and no OK is reported for a message
nsqd does not have. The proxy counts the connections."""

from __future__ import annotations

import asyncio
import socket

import pytest

from airflow_provider_nsq.client import AsyncNSQConnection, ClientConfig
from airflow_provider_nsq.protocol import NSQConnectionClosedError, NSQError
from airflow_provider_nsq.testing.faults import FaultProxy
from airflow_provider_nsq.testing.polling import async_wait_for


@pytest.fixture
def proxy(nsqd):
    with FaultProxy(nsqd.tcp_address) as p:
        yield p


def depth(nsqd, topic: str) -> int:
    stats = nsqd.channel_stats(topic, "c")
    return stats["depth"] if stats else 0


def config(proxy: FaultProxy) -> ClientConfig:
    return ClientConfig(host=proxy.host, port=proxy.port, read_timeout=5)


async def burst(conn: AsyncNSQConnection, topic: str, prefix: str, n: int = 20) -> list:
    return await asyncio.gather(
        *(conn.publish(topic, f"{prefix}{i}".encode()) for i in range(n)),
        return_exceptions=True,
    )


def test_a_burst_on_a_new_connection_opens_one_connection(nsqd, nsq_topic, proxy) -> None:
    nsqd.create_channel(nsq_topic, "c")

    async def run() -> list:
        conn = AsyncNSQConnection(config(proxy))
        try:
            return await burst(conn, nsq_topic, "m")
        finally:
            await conn.close()

    results = asyncio.run(run())
    assert results == [None] * 20
    assert (proxy.connections, proxy.peak_active) == (1, 1)
    nsqd.wait_for(lambda: proxy.active == 0)  # nothing left open after close()
    nsqd.wait_for(lambda: depth(nsqd, nsq_topic) == 20)


def test_a_burst_after_a_drop_shares_one_new_connection(nsqd, nsq_topic, proxy) -> None:
    nsqd.create_channel(nsq_topic, "c")

    async def run() -> list:
        conn = AsyncNSQConnection(config(proxy))
        try:
            await conn.publish(nsq_topic, b"first")
            proxy.cut_all(how="rst")
            # Wait until the client saw the reset, so every publish below finds the
            # connection dropped.
            await async_wait_for(
                lambda: not conn.connected, 5, 0.01, message="the client saw the reset"
            )
            return await burst(conn, nsq_topic, "after-drop")
        finally:
            await conn.close()

    results = asyncio.run(run())
    assert results == [None] * 20
    assert (proxy.connections, proxy.peak_active) == (2, 1)
    nsqd.wait_for(lambda: proxy.active == 0)
    nsqd.wait_for(lambda: depth(nsqd, nsq_topic) == 21)


def test_every_ok_is_true_when_the_connection_drops_mid_burst(nsqd, nsq_topic, proxy) -> None:
    """Cut while 40 publishes are in flight, then retry the failed ones: what got OK is
    in nsqd, whichever connection carried it."""
    nsqd.create_channel(nsq_topic, "c")
    acked: set[bytes] = set()

    async def publish(conn: AsyncNSQConnection, body: bytes) -> None:
        for _ in range(20):
            try:
                await conn.publish(nsq_topic, body)
            except NSQError:
                continue
            acked.add(body)
            return

    async def run() -> None:
        conn = AsyncNSQConnection(config(proxy))
        try:
            await conn.connect()
            tasks = [asyncio.ensure_future(publish(conn, b"%d" % i)) for i in range(40)]
            await asyncio.sleep(0)
            proxy.cut_all(how="rst")
            await asyncio.gather(*tasks)
        finally:
            await conn.close()

    asyncio.run(run())
    assert len(acked) == 40
    assert proxy.peak_active == 1
    nsqd.wait_for(lambda: depth(nsqd, nsq_topic) >= 40)


def test_a_cancelled_publisher_does_not_break_the_shared_connect(nsqd, nsq_topic, proxy) -> None:
    nsqd.create_channel(nsq_topic, "c")

    async def run() -> list:
        conn = AsyncNSQConnection(config(proxy))
        try:
            tasks = [asyncio.ensure_future(conn.publish(nsq_topic, b"%d" % i)) for i in range(10)]
            await asyncio.sleep(0)
            tasks[0].cancel()  # the one that started the connect
            return await asyncio.gather(*tasks[1:], return_exceptions=True)
        finally:
            await conn.close()

    assert asyncio.run(run()) == [None] * 9
    assert proxy.peak_active == 1
    nsqd.wait_for(lambda: depth(nsqd, nsq_topic) >= 9)


def test_close_during_a_shared_connect_fails_every_publisher_cleanly() -> None:
    """close() stops a connect under way: the publishers waiting for it get an NSQError
    at once, not a CancelledError and not the connect timeout."""
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    try:

        async def run() -> list:
            conn = AsyncNSQConnection(
                ClientConfig(port=silent.getsockname()[1], connect_timeout=30)
            )
            tasks = [asyncio.ensure_future(conn.publish("t", b"%d" % i)) for i in range(5)]
            await async_wait_for(lambda: conn._connecting.running, 5, message="a connect")
            await conn.close()
            return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)

        results = asyncio.run(run())
    finally:
        silent.close()
    assert [type(r) for r in results] == [NSQConnectionClosedError] * 5
