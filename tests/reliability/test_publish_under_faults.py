"""Guarantee (a) of issue 11: publishes through a proxy that keeps cutting connections
(before, inside and after frames, with FIN or RST), retried by the caller on error.

- every message that got nsqd's OK is in nsqd (nothing lost);
- a message is there more than once only if one of its publishes raised (no duplicate
  from a clean publish);
- a client never has more than one live connection at a time.

Over the blocking driver (PUB and MPUB), the hook, and the asyncio driver with 40
concurrent publishes on one connection. Against the embedded broker or NSQD_ADDRESS.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

from airflow_provider_nsq.client import AsyncNSQConnection, ClientConfig, NSQConnection
from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.testing.faults import FaultProxy, random_cuts
from tests.reliability.ledger import Ledger, drain, reconcile

CHANNEL = "audit"
# About one cut per 5-40 commands or frames in one direction: dozens of cuts per client.
EVERY = (5, 40)


@pytest.fixture
def proxies(nsqd) -> Iterator[dict[str, FaultProxy]]:
    """One cutting proxy per client, each with its own reproducible schedule."""
    seeds = itertools.count(11)
    started: dict[str, FaultProxy] = {}

    def make(name: str) -> FaultProxy:
        proxy = FaultProxy(nsqd.tcp_address, policy=random_cuts(next(seeds), EVERY))
        started[name] = proxy.start()
        return proxy

    class Factory(dict):
        def __missing__(self, name: str) -> FaultProxy:
            self[name] = make(name)
            return self[name]

    factory = Factory()
    try:
        yield factory
    finally:
        for proxy in started.values():
            proxy.stop()


def config(proxy: FaultProxy) -> ClientConfig:
    return ClientConfig(host=proxy.host, port=proxy.port, read_timeout=5, connect_timeout=5)


def bodies(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def blocking_pub(ledger: Ledger, proxy: FaultProxy, topic: str, n: int) -> None:
    with NSQConnection(config(proxy)) as conn:
        for body in bodies("pub", n):
            ledger.publish([body], lambda b=body: conn.publish(topic, b))


def blocking_mpub(ledger: Ledger, proxy: FaultProxy, topic: str, n: int) -> None:
    batch = bodies("mpub", n)
    with NSQConnection(config(proxy)) as conn:
        for i in range(0, n, 5):
            chunk = batch[i : i + 5]
            ledger.publish(chunk, lambda c=chunk: conn.multi_publish(topic, c))


def hook_publish(ledger: Ledger, proxy: FaultProxy, topic: str, n: int, monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_FAULTY", f"nsq://{proxy.address}?read_timeout=5&connect_timeout=5"
    )
    with NSQHook("nsq_faulty") as hook:
        all_bodies = bodies("hook", n)
        for body in all_bodies[: n // 2]:
            ledger.publish([body], lambda b=body: hook.publish(topic, b))
        rest = all_bodies[n // 2 :]
        for i in range(0, len(rest), 5):
            chunk = rest[i : i + 5]
            ledger.publish(chunk, lambda c=chunk: hook.multi_publish(topic, c))


async def asyncio_concurrent(
    ledger: Ledger, proxy: FaultProxy, topic: str, n: int, concurrency: int = 40
) -> None:
    todo = bodies("aio", n)
    conn = AsyncNSQConnection(config(proxy))

    async def worker(w: int) -> None:
        while todo:
            if w % 4 == 0 and len(todo) >= 5:  # a quarter of the workers MPUB
                chunk = [todo.pop() for _ in range(5)]
                await ledger.apublish(chunk, lambda c=chunk: conn.multi_publish(topic, c))
            else:
                body = todo.pop()
                await ledger.apublish([body], lambda b=body: conn.publish(topic, b))

    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        await conn.close()


def check(nsqd, topic: str, ledgers: list[Ledger], proxies: dict[str, FaultProxy]) -> None:
    received = drain(nsqd.host, nsqd.tcp_port, topic, CHANNEL)
    outcome = reconcile(ledgers, received)
    for ledger in ledgers:
        proxy = proxies[ledger.name]
        print(
            f"{ledger.name}: {len(ledger.acked)} messages in {ledger.calls} OK calls, "
            f"{ledger.errors} errors, {proxy.connections} connections, {proxy.cuts} cuts, "
            f"peak {proxy.peak_active} live"
        )
    print(outcome)
    assert outcome.lost == 0, outcome
    assert outcome.duplicated_without_error == 0, outcome
    assert outcome.unexpected == 0, outcome
    for ledger in ledgers:
        proxy = proxies[ledger.name]
        assert proxy.peak_active <= 1, (ledger.name, proxy.peak_active)
        assert proxy.cuts >= 5, (ledger.name, proxy.cuts)  # the faults did happen


def test_blocking_and_hook_publishes_survive_cuts(nsqd, nsq_topic, proxies, monkeypatch) -> None:
    nsqd.create_channel(nsq_topic, CHANNEL)
    pub, mpub, hook = Ledger("pub"), Ledger("mpub"), Ledger("hook")
    blocking_pub(pub, proxies["pub"], nsq_topic, 1500)
    blocking_mpub(mpub, proxies["mpub"], nsq_topic, 1500)
    hook_publish(hook, proxies["hook"], nsq_topic, 1000, monkeypatch)
    check(nsqd, nsq_topic, [pub, mpub, hook], proxies)


def test_asyncio_concurrent_publishes_survive_cuts(nsqd, nsq_topic, proxies) -> None:
    nsqd.create_channel(nsq_topic, CHANNEL)
    aio = Ledger("aio")
    asyncio.run(asyncio_concurrent(aio, proxies["aio"], nsq_topic, 1500))
    check(nsqd, nsq_topic, [aio], proxies)
