"""Guarantee (b) of issue 11: the broker dies mid-run and comes back. Every publish call
either returns OK or raises an NSQError within its configured bounds, and the same client
recovers on its own once nsqd is back: what it publishes then is there.

Two ways to kill it: the embedded broker stopped and started again on the same port
(needs the embedded broker), and a proxy that resets every connection and refuses new
ones for a while (runs against a real nsqd too)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from airflow_provider_nsq.client import AsyncNSQConnection, ClientConfig, NSQConnection
from airflow_provider_nsq.protocol import NSQError
from airflow_provider_nsq.testing.broker import EmbeddedNSQD
from airflow_provider_nsq.testing.faults import FaultProxy
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.drivers import DRIVERS

CONNECT_TIMEOUT = 1.0
READ_TIMEOUT = 1.0
# A call may connect and then wait for its reply; give the loaded machine a margin.
BOUND = CONNECT_TIMEOUT + READ_TIMEOUT + 3.0


class Run:
    """A publisher that keeps publishing, timing every call, until told to stop."""

    def __init__(self) -> None:
        self.ok_before: list[bytes] = []
        self.ok_after: list[bytes] = []
        self.errors: list[str] = []
        self.slowest = 0.0
        self.restarted = threading.Event()
        self.recovered = threading.Event()
        self.stop = threading.Event()

    def record(self, body: bytes, started: float, error: BaseException | None) -> None:
        self.slowest = max(self.slowest, time.monotonic() - started)
        if error is not None:
            self.errors.append(type(error).__name__)
        elif self.restarted.is_set():
            self.ok_after.append(body)
            if len(self.ok_after) >= 20:
                self.recovered.set()
        else:
            self.ok_before.append(body)


def publish_blocking(run: Run, config: ClientConfig, topic: str) -> None:
    with NSQConnection(config) as conn:
        for i in range(10**6):
            if run.stop.is_set():
                return
            body, started, error = b"%d" % i, time.monotonic(), None
            try:
                conn.publish(topic, body)
            except NSQError as exc:
                error = exc
                time.sleep(0.05)  # a caller's retry pause
            run.record(body, started, error)


def publish_asyncio(run: Run, config: ClientConfig, topic: str) -> None:
    async def main() -> None:
        conn = AsyncNSQConnection(config)
        try:
            for i in range(10**6):
                if run.stop.is_set():
                    return
                body, started, error = b"%d" % i, time.monotonic(), None
                try:
                    await conn.publish(topic, body)
                except NSQError as exc:
                    error = exc
                    await asyncio.sleep(0.05)
                run.record(body, started, error)
        finally:
            await conn.close()

    asyncio.run(main())


PUBLISHERS: dict[str, Callable[[Run, ClientConfig, str], None]] = {
    "blocking": publish_blocking,
    "asyncio": publish_asyncio,
}


def run_through_outage(
    config: ClientConfig,
    topic: str,
    kind: str,
    kill: Callable[[], None],
    revive: Callable[[], None],
) -> Run:
    run = Run()
    thread = threading.Thread(target=PUBLISHERS[kind], args=(run, config, topic), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(run.ok_before) >= 50, 20, 0.01, message="50 publishes before")
        kill()
        errors_at_kill = len(run.errors)
        # nsqd stays down while the publisher keeps trying: three failed publishes.
        wait_for(
            lambda: len(run.errors) >= errors_at_kill + 3,
            20,
            0.01,
            message=lambda: f"publishes noticing the outage ({len(run.errors) - errors_at_kill})",
        )
        revive()
        run.restarted.set()
        assert run.recovered.wait(30), f"no recovery: {run.errors[-5:]}"
    finally:
        run.stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert run.slowest <= BOUND, f"a call took {run.slowest:.1f}s"
    assert set(run.errors) <= {"NSQConnectionError", "NSQConnectionClosedError", "NSQTimeoutError"}
    return run


def config_for(host: str, port: int) -> ClientConfig:
    return ClientConfig(
        host=host, port=port, connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT
    )


@pytest.mark.parametrize("kind", DRIVERS)
def test_publishers_recover_when_the_embedded_broker_restarts(kind, nsq_topic, nsqd) -> None:
    if not nsqd.embedded:
        pytest.skip("restarts an embedded broker on the same port")
    broker = EmbeddedNSQD().start()
    port, http_port = broker.tcp_port, broker.http_port
    holder = {"broker": broker}

    def kill() -> None:
        holder["broker"].stop()

    def revive() -> None:
        holder["broker"] = EmbeddedNSQD(tcp_port=port, http_port=http_port).start()

    try:
        run = run_through_outage(config_for(broker.host, port), nsq_topic, kind, kill, revive)
        # The new broker starts empty: what was acknowledged after the restart is there.
        stats = holder["broker"].stats(nsq_topic)["topics"][0]
        assert stats["message_count"] >= len(run.ok_after)
    finally:
        holder["broker"].stop()


@pytest.mark.parametrize("kind", DRIVERS)
def test_publishers_recover_when_nsqd_drops_off_the_network(kind, nsq_topic, nsqd) -> None:
    nsqd.create_channel(nsq_topic, "c")
    with FaultProxy(nsqd.tcp_address) as proxy:
        run = run_through_outage(
            config_for(proxy.host, proxy.port), nsq_topic, kind, proxy.down, proxy.up
        )
        assert proxy.peak_active == 1
    # nsqd itself never went away: every acknowledged message is there.
    acked = len(set(run.ok_before) | set(run.ok_after))
    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, "c")["depth"] >= acked)
