"""PySpark job: aggregate staged pipeline events and publish one result per pipeline to NSQ.

Submitted by ``example_dags/nsq_gate_spark_job.py`` with ``SparkSubmitOperator``::

    spark-submit aggregate_pipeline_events.py --events /stage/events.jsonl \\
        --nsq-options /stage/nsq-options.json --topic pipeline.results --batch <run id> \\
        [--summary /stage/publish-summary.json]

``--events`` is a JSON Lines file, one event per line, staged by the DAG from the
NSQSensor's messages. A local path is read on the driver (the batch is bounded by the
sensor's ``max_messages``), so on a cluster in client mode only the Airflow worker needs
the file; a URI (``hdfs://``, ``s3a://``...) is read by Spark itself.

``--nsq-options`` is a JSON object of ``nsq`` data source options (``nsqd``, TLS, AUTH
secret...) built from the Airflow connection by the DAG; it is a file, not arguments, so
the secret never appears on a command line. The job imports the NSQ provider's Spark
package only, never Airflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_nsq.spark import register

EVENT_SCHEMA = (
    "event_id string, pipeline string, stage string, status string, rows long, "
    "duration_ms long, emitted_at string, nsq_id string, nsq_attempts int"
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", required=True, help="JSON Lines file of events")
    parser.add_argument("--nsq-options", required=True, help="JSON file of nsq options")
    parser.add_argument("--topic", required=True, help="topic for the result messages")
    parser.add_argument("--batch", required=True, help="id of this batch (the DAG run id)")
    parser.add_argument("--summary", help="where the nsq data source writes its summary")
    return parser.parse_args(argv)


def load_events(spark: SparkSession, path: str) -> DataFrame:
    if urlparse(path).scheme in ("", "file"):
        local = Path(urlparse(path).path if path.startswith("file:") else path)
        rows = [json.loads(line) for line in local.read_text("utf-8").splitlines() if line]
        return spark.createDataFrame(rows, EVENT_SCHEMA)
    return spark.read.schema(EVENT_SCHEMA).json(path)


def aggregate(events: DataFrame, batch: str) -> DataFrame:
    """One row per pipeline. NSQ delivers at least once: a redelivered message carries the
    same event_id, so duplicates are dropped before counting."""
    return (
        events.dropDuplicates(["event_id"])
        .groupBy("pipeline")
        .agg(
            F.count("*").alias("events"),
            F.sum(F.when(F.col("status") == "failed", 1).otherwise(0)).alias("failed"),
            F.sum("rows").alias("rows"),
            F.round(F.avg("duration_ms"), 3).alias("avg_duration_ms"),
            F.max("duration_ms").alias("max_duration_ms"),
            F.min("emitted_at").alias("first_event_at"),
            F.max("emitted_at").alias("last_event_at"),
        )
        .withColumn("batch", F.lit(batch))
        .orderBy("pipeline")
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    nsq_options: dict[str, Any] = json.loads(Path(args.nsq_options).read_text("utf-8"))

    spark = (
        SparkSession.builder.appName("nsq-gate-aggregate-pipeline-events")
        # A handful of groups: a few shuffle partitions, not the default 200.
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    register(spark)
    try:
        events = load_events(spark, args.events).cache()
        results = aggregate(events, args.batch).cache()
        writer = (
            results.write.format("nsq")
            .mode("append")  # the only mode a topic supports
            .options(**{k: str(v) for k, v in nsq_options.items()})
            .option("topic", args.topic)
            .option("format", "json")  # each result row becomes one JSON message
        )
        if args.summary:
            writer = writer.option("summary_file", args.summary)
        writer.save()
        received = events.count()
        unique = events.dropDuplicates(["event_id"]).count()
        print(
            f"aggregated {unique} events ({received - unique} duplicate deliveries dropped) "
            f"into {results.count()} result messages on topic {args.topic!r}",
            flush=True,
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
