"""The ceiling of PySpark's Python streaming data sources on this machine, without NSQ.

    python benchmarks/spark_source_ceiling.py --rows 1000000 --rows-per-batch 40000

A stream reader that serves pre-built Arrow data (the ``nsq`` reader's schema, 200-byte
bodies, the same partitioning: Arrow IPC bytes inside the input partitions, decoded by
``read()`` on the executors) to a ``noop`` sink with ``trigger(availableNow=True)``,
``local[2]``. No broker, no connections, no decoding of NSQ frames: what it measures is
what Spark's Python data source path costs per row and per micro-batch, the rate no
Python stream reader can beat here. ``benchmarks/spark_reader.py`` is the ``nsq``
reader's own figure; compare the two.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

BODY_SIZE = 200


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in all")
    parser.add_argument("--rows-per-batch", type=int, default=40_000, help="rows per micro-batch")
    parser.add_argument("--partitions", type=int, default=2, help="input partitions per batch")
    return parser.parse_args()


def arrow_payload(rows: int) -> bytes:
    """Arrow IPC bytes of ``rows`` rows shaped like the nsq reader's."""
    import pyarrow as pa

    from airflow_provider_nsq.spark.reader import arrow_schema

    columns = [
        pa.array([b"0123456789abcdef"] * rows, pa.binary()).cast(pa.string()),
        pa.array([bytes(BODY_SIZE)] * rows, pa.binary()),
        pa.array([1] * rows, pa.int32()),
        pa.array([0] * rows, pa.timestamp("us", tz="UTC")),
        pa.repeat(pa.scalar("topic", pa.string()), rows),
        pa.repeat(pa.scalar("channel", pa.string()), rows),
        pa.repeat(pa.scalar("127.0.0.1:4150", pa.string()), rows),
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def main() -> int:
    args = parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # Spark's driver listens on loopback only
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    from airflow_provider_nsq.spark.reader import READ_SCHEMA

    total, per_batch, parts = args.rows, args.rows_per_batch, args.partitions

    class Slice(InputPartition):
        def __init__(self, index: int, payload: bytes) -> None:
            super().__init__(index)
            self.payload = payload

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self) -> None:
            self.payload = arrow_payload(per_batch // parts)

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def initialOffset(self) -> dict[str, int]:
            return {"rows": 0}

        def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
            done = start["rows"] if start else 0
            return {"rows": min(done + per_batch, total)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            if start["rows"] == end["rows"]:
                return []
            return [Slice(i, self.payload) for i in range(parts)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            with pa.ipc.open_stream(partition.payload) as stream:  # type: ignore[attr-defined]
                yield from stream

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "nsq_ceiling"

        def schema(self) -> Any:
            return READ_SCHEMA

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return Reader()

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(Ceiling)
    started = time.perf_counter()
    query = (
        spark.readStream.format("nsq_ceiling")
        .load()
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="nsq-ceiling-"))
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    in_batches = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
    executing = sum(p["durationMs"].get("addBatch", 0) for p in progress) / 1000
    spark.stop()
    print(
        f"Python stream source ceiling, local[2]: {rows:,} rows of {BODY_SIZE} B in "
        f"{len(progress)} batches of {per_batch:,}"
    )
    print(f"  whole query   {seconds:6.2f} s  {rows / seconds:10,.0f} rows/s")
    print(f"  in batches    {in_batches:6.2f} s  {rows / in_batches:10,.0f} rows/s")
    print(f"  executing     {executing:6.2f} s  ({executing / rows * 1e6:.1f} us per row)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
