"""Shared fixtures for the Spark tests: one local[2] SparkSession per test session, and
reading a topic back with the NSQ client.

The broker comes from the project's pytest plugin (``nsqd``: the embedded broker, or a
real nsqd when NSQD_ADDRESS is set), so these tests run unchanged against both.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if shutil.which("java") or os.environ.get("JAVA_HOME"):
        return
    skip = pytest.mark.skip(reason="Spark needs Java (install a JDK 17 or set JAVA_HOME)")
    for item in items:
        if "spark" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """local[2] with the nsq data source registered (where PySpark has it); started once
    (~7 s)."""
    # Spark's Python workers run `python3` from PATH unless told otherwise: use ours, which
    # has this package installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tests.spark.pyspark_features import DATA_SOURCE_MISSING

    session = (
        SparkSession.builder.master("local[2]")
        .appName("airflow-provider-nsq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    # py4j logs at INFO from __del__ at interpreter exit, after pytest closed its streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if DATA_SOURCE_MISSING is None:
        from airflow_provider_nsq.spark import register

        register(session)
    yield session
    session.stop()


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
        deadline = time.monotonic() + timeout
        while len(bodies) < expected and time.monotonic() < deadline:
            want = min(expected - len(bodies), 2000)  # within nsqd's max RDY (2500)
            with NSQConnection(config) as conn:
                got = conn.consume(topic, channel, max_messages=want, timeout=2.0)
            bodies.extend(m.body for m in got)
        with NSQConnection(config) as conn:
            extra = conn.consume(topic, channel, max_messages=10, timeout=0.5)
        return bodies + [m.body for m in extra]

    return read
