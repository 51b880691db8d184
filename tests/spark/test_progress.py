"""What the nsq data source reports in a Spark job's logs: each write task's count (on
the executor's stderr) beside the whole write's line, and each committed stream batch
(on the driver's), whose rows Spark counts in the query's progress.

The job runs in its own process (a fresh local SparkSession) so that its whole stderr,
Python workers' included, is the job's log this test reads.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.spark.pyspark_features import needs_stream_reader
from tests.spark.test_stream_reader import CHANNEL, publish

pytestmark = [pytest.mark.spark, needs_stream_reader]

JOB = """
import json, sys
from pyspark.sql import SparkSession
from airflow_provider_nsq.spark import register

nsqd, write_topic, read_topic, checkpoint = sys.argv[1:5]
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
register(spark)
rows = spark.createDataFrame([(f"row-{n}",) for n in range(30)], "value string")
rows.repartition(3).write.format("nsq").mode("append").option("nsqd", nsqd).option(
    "topic", write_topic
).save()
events = (
    spark.readStream.format("nsq")
    .option("nsqd", nsqd)
    .option("topic", read_topic)
    .option("channel", "spark")
    .option("batch_timeout", "0.5")
    .option("max_messages_per_batch", "10")
    .load()
)
query = (
    events.writeStream.format("memory")
    .queryName("progress_check")
    .trigger(availableNow=True)
    .option("checkpointLocation", checkpoint)
    .start()
)
query.awaitTermination(120)
print("ROWS " + json.dumps([p["numInputRows"] for p in query.recentProgress]), flush=True)
spark.stop()
"""


def test_the_jobs_log_has_each_task_and_batch(nsqd, nsq_topic, tmp_path):
    read_topic = f"{nsq_topic}_in"
    publish(nsqd, read_topic, [b"m%d" % n for n in range(25)])
    done = subprocess.run(
        [sys.executable, "-c", JOB, nsqd.tcp_address, nsq_topic, read_topic, str(tmp_path)],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr

    parts = re.findall(
        rf"nsq: partition (\d+) \(attempt \d+\) published (\d+) messages \((\d+) bytes, "
        rf"\d+ MPUB frames\) to topic '{nsq_topic}' on {re.escape(nsqd.tcp_address)}",
        err,
    )
    assert sorted(int(p) for p, _, _ in parts) == [0, 1, 2]
    assert sum(int(m) for _, m, _ in parts) == 30
    assert sum(int(b) for _, _, b in parts) == sum(len(f"row-{n}") for n in range(30))
    assert "nsq: published 30 messages" in err  # the driver's line for the whole write

    batches = re.findall(
        rf"nsq: batch (\d+) of {read_topic}/{CHANNEL} committed by Spark: FIN'd its (\d+) "
        r"messages \((\d+) in all since the query started\)",
        err,
    )
    assert [int(count) for _, count, _ in batches] == [10, 10, 5]
    assert int(batches[-1][2]) == 25
    (line,) = (x for x in done.stdout.splitlines() if x.startswith("ROWS "))
    assert sum(json.loads(line.removeprefix("ROWS "))) == 25  # Spark's own count
