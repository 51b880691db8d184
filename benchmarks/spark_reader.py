"""Rows/s of ``spark.readStream.format("nsq")`` vs this project's blocking consumer.

    python benchmarks/spark_reader.py                   # 1,000,000 messages x 200 bytes
    python benchmarks/spark_reader.py --messages 50000  # a quick smoke run

Both sides drain the same number of 200-byte messages from a channel filled before the
clock starts, in one run, one after the other, against the same broker:

- **blocking consumer**: one ``NSQConnection`` in this process, RDY 2500 (nsqd's
  maximum), FIN'ing each read's messages in one write: the consume loop of
  ``benchmarks/throughput.py``;
- **stream reader**: Spark ``local[2]``, ``trigger(availableNow=True)`` into the ``noop``
  sink, timed from ``start()`` to the end of the query (FIN of the last batch included).

While the reader drains, the peak resident memory (VmHWM) of the driver's two processes
is sampled: the Python process that holds the connections and the batches (pyspark's
stream source runner) and the driver JVM. A warm-up drain of a few thousand messages
first keeps Spark's Python worker start-up and the JVM's first JIT out of the timings.

The broker is the embedded one, started as a separate process, or the nsqd at
``NSQD_ADDRESS`` (HTTP at ``NSQD_HTTP_ADDRESS``, default TCP port + 1).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airflow_provider_nsq.client import ClientConfig, NSQConnection

BODY_SIZE = 200
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per drain")
    # Unset: the reader's defaults.
    parser.add_argument("--max-messages-per-batch", type=int)
    parser.add_argument("--max-bytes-per-batch", type=int)
    parser.add_argument("--max-in-flight", type=int)
    parser.add_argument("--max-connections-per-nsqd", type=int)
    parser.add_argument("--min-partitions", type=int)
    parser.add_argument("--json", help="also write the figures to this file")
    return parser.parse_args()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(host: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on {host}:{port} after {timeout}s") from None
            time.sleep(0.1)


@contextlib.contextmanager
def broker() -> Iterator[tuple[str, int, int, str]]:
    """(host, tcp_port, http_port, description)."""
    address = os.environ.get("NSQD_ADDRESS")
    if address:
        host, _, port = address.rpartition(":")
        http = os.environ.get("NSQD_HTTP_ADDRESS")
        http_port = int(http.rpartition(":")[2]) if http else int(port) + 1
        yield host, int(port), http_port, f"nsqd at {address}"
        return
    tcp_port, http_port = _free_port(), _free_port()
    cmd = [sys.executable, "-m", "airflow_provider_nsq.testing.broker"]
    cmd += ["--tcp-port", str(tcp_port), "--http-port", str(http_port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd)
    try:
        _wait_listening("127.0.0.1", tcp_port)
        yield "127.0.0.1", tcp_port, http_port, f"embedded broker (pid {proc.pid})"
    finally:
        proc.terminate()
        proc.wait(30)


def _http(host: str, port: int, method: str, path: str) -> bytes:
    request = urllib.request.Request(f"http://{host}:{port}{path}", method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=60) as response:
        return bytes(response.read())


def channel_stats(host: str, http_port: int, topic: str, channel: str) -> dict[str, Any]:
    doc = json.loads(_http(host, http_port, "GET", f"/stats?format=json&topic={topic}"))
    doc = doc.get("data", doc)
    for t in doc.get("topics") or []:
        for c in t.get("channels") or []:
            if c.get("channel_name") == channel:
                return dict(c)
    return {}


def fill(host: str, tcp_port: int, http_port: int, topic: str, channel: str, count: int) -> None:
    """Create ``channel`` and publish ``count`` distinct 200-byte bodies to ``topic``."""
    _http(host, http_port, "POST", f"/topic/create?topic={topic}")
    _http(host, http_port, "POST", f"/channel/create?topic={topic}&channel={channel}")
    pad = b"x" * (BODY_SIZE - 12)
    with NSQConnection(ClientConfig(host=host, port=tcp_port)) as conn:
        for start in range(0, count, 2000):
            conn.multi_publish(
                topic, [b"%012d" % i + pad for i in range(start, min(count, start + 2000))]
            )


def delete_topic(host: str, http_port: int, topic: str) -> None:
    # Frees the broker's memory between drains (the embedded one keeps messages in RAM).
    with contextlib.suppress(OSError):
        _http(host, http_port, "POST", f"/topic/delete?topic={topic}")


def blocking_consumer(host: str, tcp_port: int, topic: str, channel: str, count: int) -> float:
    """Seconds to drain ``count`` messages with one blocking connection."""
    got = 0
    with NSQConnection(ClientConfig(host=host, port=tcp_port)) as conn:
        conn.subscribe(topic, channel)
        conn.ready(2500)
        started = time.perf_counter()
        while got < count:
            messages = conn.read_messages(10.0)
            if not messages:
                raise RuntimeError(f"blocking consumer: nothing for 10 s after {got} messages")
            conn.finish(*messages)
            got += len(messages)
        return time.perf_counter() - started


def _peak_rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    # Each thread has its own list: the JVM forks its Python workers from several threads.
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(p) for p in (task / "children").read_text().split()]
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class PeakMemory:
    """Samples VmHWM of the driver JVM and of the stream source runner while it runs."""

    def __init__(self) -> None:
        self.jvm = next((p for p in _children(os.getpid()) if "java" in _cmdline(p)), None)
        self.runner_peak = 0
        self.jvm_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            if self.jvm is None:
                continue
            self.jvm_peak = max(self.jvm_peak, _peak_rss(self.jvm) or 0)
            for pid in _children(self.jvm):
                if RUNNER in _cmdline(pid):
                    self.runner_peak = max(self.runner_peak, _peak_rss(pid) or 0)


def main() -> int:
    args = parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # Spark's driver listens on loopback only
    from pyspark.sql import SparkSession

    from airflow_provider_nsq.spark import register

    checkpoints = tempfile.mkdtemp(prefix="nsq-reader-bench-")
    with broker() as (host, tcp_port, http_port, where):
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("nsq-spark-reader-benchmark")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "1g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        def reader(count: int) -> dict[str, Any]:
            topic, channel = f"bench.reader.{uuid.uuid4().hex[:8]}", "spark"
            fill(host, tcp_port, http_port, topic, channel, count)
            tuning = {
                name: str(value)
                for name in (
                    "max_messages_per_batch",
                    "max_bytes_per_batch",
                    "max_in_flight",
                    "max_connections_per_nsqd",
                    "min_partitions",
                )
                if (value := getattr(args, name)) is not None
            }
            query = (
                spark.readStream.format("nsq")
                .option("nsqd", f"{host}:{tcp_port}")
                .option("topic", topic)
                .option("channel", channel)
                .options(**tuning)
                .option("batch_timeout", "0.5")
                .load()
                .writeStream.format("noop")
                .trigger(availableNow=True)
                .option("checkpointLocation", f"{checkpoints}/{topic}")
            )
            with PeakMemory() as memory:
                started = time.perf_counter()
                running = query.start()
                running.awaitTermination()
                seconds = time.perf_counter() - started
            if running.exception():
                raise RuntimeError(f"stream reader failed: {running.exception()}")
            rows = sum(p["numInputRows"] for p in running.recentProgress)
            full = [p for p in running.recentProgress if p["numInputRows"]]
            batches = len(full)
            # From the first batch's start to the last non-empty batch's end: without the
            # query's start-up and the final batch_timeout that tells the drain is over.
            first = datetime.datetime.fromisoformat(full[0]["timestamp"].replace("Z", "+00:00"))
            last = datetime.datetime.fromisoformat(full[-1]["timestamp"].replace("Z", "+00:00"))
            in_batches = (last - first).total_seconds() + (
                full[-1]["durationMs"]["triggerExecution"] / 1000
            )
            left = channel_stats(host, http_port, topic, channel)
            delete_topic(host, http_port, topic)
            if rows != count or left.get("depth") or left.get("in_flight_count"):
                raise RuntimeError(f"stream reader: {rows} rows of {count}; channel now {left}")
            return {
                "rows": rows,
                "seconds": seconds,
                "rate": rows / seconds,
                "batches": batches,
                "batch_seconds": in_batches,
                "batch_rate": rows / in_batches,
                "runner_peak_rss": memory.runner_peak,
                "jvm_peak_rss": memory.jvm_peak,
            }

        def consumer(count: int) -> dict[str, Any]:
            topic, channel = f"bench.consumer.{uuid.uuid4().hex[:8]}", "bench"
            fill(host, tcp_port, http_port, topic, channel, count)
            seconds = blocking_consumer(host, tcp_port, topic, channel, count)
            delete_topic(host, http_port, topic)
            return {"rows": count, "seconds": seconds, "rate": count / seconds}

        print(f"broker: {where}; Spark local[2]; {args.messages:,} messages x {BODY_SIZE} B")
        warm = min(20_000, args.messages)
        reader(warm)
        consumer(warm)
        result_consumer = consumer(args.messages)
        result_reader = reader(args.messages)
        spark.stop()

    mib = 1024 * 1024
    ratio = result_reader["rate"] / result_consumer["rate"]
    print()
    print(f"{'drain':<44} {'rows':>10} {'seconds':>8} {'rows/s':>10}")
    print(
        f"{'blocking NSQConnection, RDY 2500, FIN per read':<44} {result_consumer['rows']:>10,} "
        f"{result_consumer['seconds']:>8.2f} {result_consumer['rate']:>10,.0f}"
    )
    label = f"stream reader, availableNow, {result_reader['batches']} batches"
    print(
        f"{label:<44} {result_reader['rows']:>10,} {result_reader['seconds']:>8.2f} "
        f"{result_reader['rate']:>10,.0f}"
    )
    print(f"\nratio: the stream reader drains at {ratio:.2f}x the blocking consumer's rows/s")
    batch_ratio = result_reader["batch_rate"] / result_consumer["rate"]
    print(
        f"within its batches (first batch start to last batch end, {result_reader['batch_seconds']:.2f}"
        f" s: {result_reader['batch_rate']:,.0f} rows/s) it drains at {batch_ratio:.2f}x; the rest "
        f"is the query's start-up and the batch_timeout that ends the drain"
    )
    print(
        f"driver peak RSS while draining: stream source process "
        f"{result_reader['runner_peak_rss'] / mib:,.0f} MiB, driver JVM "
        f"{result_reader['jvm_peak_rss'] / mib:,.0f} MiB (spark.driver.memory 1g)"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "consumer": result_consumer,
                    "reader": result_reader,
                    "ratio": ratio,
                    "batch_ratio": batch_ratio,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
