"""Guarantee (c) of issue 11: 50 publisher threads and 5 consumers on one channel, at
once: every message published is consumed exactly once (0 lost, 0 duplicated).

Publishers: blocking PUB, blocking MPUB and the hook; consumers: blocking and asyncio.
Against the embedded broker or NSQD_ADDRESS."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

from airflow_provider_nsq.client import AsyncNSQConnection, ClientConfig, NSQConnection
from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.testing.polling import wait_for

PUBLISHERS = 50
CONSUMERS = 5
PER_PUBLISHER = 40


class Inbox:
    def __init__(self) -> None:
        self.got: Counter[bytes] = Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    def add(self, bodies: list[bytes]) -> None:
        with self.lock:
            self.got.update(bodies)

    @property
    def total(self) -> int:
        with self.lock:
            return sum(self.got.values())


def consume_blocking(inbox: Inbox, config: ClientConfig, topic: str) -> None:
    with NSQConnection(config) as conn:
        conn.subscribe(topic, "c")
        conn.ready(100)
        while not inbox.stop.is_set():
            messages = conn.read_messages(0.1)
            if messages:
                inbox.add([m.body for m in messages])
                conn.finish(*messages)
        conn.start_close()


def consume_asyncio(inbox: Inbox, config: ClientConfig, topic: str) -> None:
    async def main() -> None:
        async with AsyncNSQConnection(config) as conn:
            await conn.subscribe(topic, "c")
            conn.ready(100)
            while not inbox.stop.is_set():
                messages = await conn.read_messages(0.1)
                if messages:
                    inbox.add([m.body for m in messages])
                    conn.finish(*messages)
            await conn.start_close()

    asyncio.run(main())


def publish(n: int, config: ClientConfig, topic: str) -> None:
    bodies = [f"p{n:02d}-{i:03d}".encode() for i in range(PER_PUBLISHER)]
    if n % 5 == 4:  # every fifth publisher goes through the hook
        with NSQHook("nsq_concurrency") as hook:
            for body in bodies[: PER_PUBLISHER // 2]:
                hook.publish(topic, body)
            hook.multi_publish(topic, bodies[PER_PUBLISHER // 2 :])
        return
    with NSQConnection(config) as conn:
        if n % 2:
            for i in range(0, PER_PUBLISHER, 10):
                conn.multi_publish(topic, bodies[i : i + 10])
        else:
            for body in bodies:
                conn.publish(topic, body)


def guarded(inbox: Inbox, fn, *args) -> threading.Thread:
    def run() -> None:
        try:
            fn(*args)
        except BaseException as exc:
            inbox.errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_50_publishers_and_5_consumers_lose_and_duplicate_nothing(
    nsqd, nsq_topic, monkeypatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_CONCURRENCY", f"nsq://{nsqd.tcp_address}")
    nsqd.create_channel(nsq_topic, "c")
    config = ClientConfig(
        host=nsqd.host, port=nsqd.tcp_port, read_timeout=30, heartbeat_interval_ms=5000
    )
    inbox = Inbox()
    consumers = [
        guarded(inbox, consume_blocking if i < 3 else consume_asyncio, inbox, config, nsq_topic)
        for i in range(CONSUMERS)
    ]
    publishers = [guarded(inbox, publish, n, config, nsq_topic) for n in range(PUBLISHERS)]
    for thread in publishers:
        thread.join(120)
    expected = {f"p{n:02d}-{i:03d}".encode() for n in range(PUBLISHERS) for i in range(40)}
    try:
        wait_for(
            lambda: inbox.total >= len(expected) or inbox.errors,
            60,
            0.05,
            message=lambda: f"{inbox.total} of {len(expected)} consumed",
        )

        def nothing_left() -> bool:  # so no duplicate can still come
            stats = nsqd.channel_stats(nsq_topic, "c") or {}
            return stats.get("depth") == 0 and stats.get("in_flight_count") == 0

        nsqd.wait_for(nothing_left, 10, message="every message FINished, none waiting")
    finally:
        inbox.stop.set()
        for thread in consumers:
            thread.join(30)
    assert inbox.errors == []
    lost = expected - inbox.got.keys()
    duplicated = {body for body, n in inbox.got.items() if n > 1}
    print(
        f"{PUBLISHERS} publishers, {CONSUMERS} consumers: {len(expected)} published, "
        f"{inbox.total} consumed, {len(lost)} lost, {len(duplicated)} duplicated"
    )
    assert (len(lost), len(duplicated)) == (0, 0)
    assert inbox.got.keys() == expected
