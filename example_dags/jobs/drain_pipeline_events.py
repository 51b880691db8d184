"""PySpark job: drain pipeline events from NSQ, aggregate them, publish one result per pipeline.

Submitted by ``example_dags/nsq_stream_gate_spark_job.py`` with ``SparkSubmitOperator``::

    spark-submit --py-files aggregate_pipeline_events.py drain_pipeline_events.py \\
        --nsq-options /stage/nsq-options.json --events-topic pipeline.events \\
        --channel spark-stream --stage /stage --topic pipeline.results --batch <run id>

Two steps, at-least-once end to end:

1. **Drain.** ``spark.readStream.format("nsq")`` with ``trigger(availableNow=True)`` reads
   what the channel holds now and lands it as Parquet in ``<stage>/events`` (checkpoint
   in ``<stage>/checkpoint``). The stream reader FINs a batch's messages only after Spark
   committed that batch to the Parquet sink, so an event is on disk before nsqd forgets
   it; a job that dies mid-drain leaves its messages to be redelivered.
2. **Aggregate.** A plain batch read of ``<stage>/events`` (the same aggregation as the
   XCom gate's job), published with ``df.write.format("nsq")``.

A retried run (same ``--stage``) restarts the drain from its checkpoint and aggregates
everything staged so far, so its results carry the same ``batch`` and replace nothing:
consumers drop duplicates by ``(pipeline, batch)``. The job imports PySpark and the NSQ
provider's Spark package only, never Airflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_nsq.spark import KNOWN_OPTIONS, register

try:  # shipped with --py-files; next to this file when run from a checkout
    from aggregate_pipeline_events import EVENT_SCHEMA, aggregate
except ImportError:  # pragma: no cover - only when run by hand from another directory
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from aggregate_pipeline_events import EVENT_SCHEMA, aggregate

# The JSON fields of an event (EVENT_SCHEMA less the two columns the job adds).
JSON_SCHEMA = ", ".join(field for field in EVENT_SCHEMA.split(", ") if not field.startswith("nsq_"))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsq-options", required=True, help="JSON file of nsq options")
    parser.add_argument("--events-topic", required=True, help="the topic to drain")
    parser.add_argument("--channel", required=True, help="the (durable) channel to drain")
    parser.add_argument("--stage", required=True, help="directory for Parquet + checkpoint")
    parser.add_argument("--topic", required=True, help="topic for the result messages")
    parser.add_argument("--batch", required=True, help="id of this batch (the DAG run id)")
    parser.add_argument("--summary", help="where the nsq writer writes its summary")
    parser.add_argument("--drain-summary", help="where this job writes what it drained")
    return parser.parse_args(argv)


def drain(spark: SparkSession, nsq: dict[str, str], args: argparse.Namespace) -> int:
    """Land the channel's messages as Parquet; returns how many rows this drain added."""
    stage = Path(args.stage)
    query = (
        spark.readStream.format("nsq")
        .options(**nsq)
        .option("topic", args.events_topic)
        .option("channel", args.channel)
        .load()
        .select(
            F.col("id").alias("nsq_id"),
            F.col("attempts").alias("nsq_attempts"),
            F.col("body").cast("string").alias("json"),
        )
        .writeStream.format("parquet")
        .option("path", str(stage / "events"))
        .option("checkpointLocation", str(stage / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"draining {args.events_topic!r} failed: {query.exception()}")
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def staged_events(spark: SparkSession, stage: Path) -> DataFrame:
    """Every event staged so far (this run and a retried run's), parsed; bad JSON dropped."""
    path = stage / "events"
    if not (path / "_spark_metadata").exists():
        return spark.createDataFrame([], EVENT_SCHEMA)
    raw = spark.read.parquet(str(path))
    parsed = raw.select(F.from_json("json", JSON_SCHEMA).alias("e"), "nsq_id", "nsq_attempts")
    return parsed.where(F.col("e.event_id").isNotNull()).select("e.*", "nsq_id", "nsq_attempts")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    nsq: dict[str, Any] = json.loads(Path(args.nsq_options).read_text("utf-8"))
    nsq = {k: str(v) for k, v in nsq.items()}

    spark = (
        SparkSession.builder.appName("nsq-stream-gate-drain-pipeline-events")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    register(spark)
    try:
        drained = drain(spark, nsq, args)
        events = staged_events(spark, Path(args.stage)).cache()
        results = aggregate(events, args.batch).cache()
        # The writer publishes to the nsqds, never through nsqlookupd: drop what only the
        # stream reader takes.
        publish = {k: v for k, v in nsq.items() if k in KNOWN_OPTIONS}
        writer = (
            results.write.format("nsq")
            .mode("append")
            .options(**publish)
            .option("topic", args.topic)
            .option("format", "json")
        )
        if args.summary:
            writer = writer.option("summary_file", args.summary)
        writer.save()
        staged = events.count()
        unique = events.dropDuplicates(["event_id"]).count()
        summary = {
            "drained": drained,
            "staged": staged,
            "unique": unique,
            "results": results.count(),
        }
        if args.drain_summary:
            Path(args.drain_summary).write_text(json.dumps(summary), "utf-8")
        print(
            f"drained {drained} messages from {args.events_topic!r}/{args.channel!r}; "
            f"aggregated {unique} events ({staged - unique} duplicate deliveries dropped) "
            f"into {summary['results']} result messages on topic {args.topic!r}",
            flush=True,
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
