"""Shared fixtures for the Spark tests: data source options and reading a topic back
with the NSQ client (the local[2] ``spark`` session, the Spark Connect server and its
``spark_connect`` session are in ``tests/conftest.py``, shared with the docs' blocks).

The broker comes from the project's pytest plugin (``nsqd``: the embedded broker, or a
real nsqd when NSQD_ADDRESS is set), so these tests run unchanged against both.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConsumer
from airflow_provider_nsq.testing.polling import wait_for


@pytest.fixture
def nsq_options(nsqd: Any, nsq_topic: str) -> dict[str, str]:
    """Data source options pointing at the test broker and this test's topic."""
    return {"nsqd": f"{nsqd.host}:{nsqd.tcp_port}", "topic": nsq_topic}


@pytest.fixture
def read_topic(nsqd: Any) -> Callable[..., list[bytes]]:
    """``read_topic(topic, expected)``: read ``expected`` bodies (a fresh connection per
    window), then one short window more so extra messages are caught too."""

    def read(
        topic: str, expected: int, *, timeout: float = 30.0, config: ClientConfig | None = None
    ) -> list[bytes]:
        config = config or ClientConfig(host=nsqd.host, port=nsqd.tcp_port)
        channel = f"check-{uuid.uuid4().hex[:8]}"
        bodies: list[bytes] = []

        def enough() -> bool:
            if len(bodies) < expected:
                want = min(expected - len(bodies), 2000)  # within nsqd's max RDY (2500)
                with NSQConsumer(topic, channel, config=config) as consumer:
                    got = consumer.consume(max_messages=want, timeout=2.0)
                bodies.extend(m.body for m in got)
            return len(bodies) >= expected

        wait_for(enough, timeout, 0, message=lambda: f"{len(bodies)} of {expected} on {topic}")
        with NSQConsumer(topic, channel, config=config) as consumer:
            extra = consumer.consume(max_messages=10, timeout=0.5)
        return bodies + [m.body for m in extra]

    return read
