"""Spark jobs that publish and read NSQ in a Python without Airflow.

Spark executors get this package installed with ``pip install --no-deps`` (or zipped as
``--py-files``), not Airflow. This test builds such an environment: a venv whose
site-packages holds only pyspark, py4j, pyarrow (pandas and numpy, which PySpark's Arrow
code imports), python-snappy (cramjam), h11 and this package, linked from the test
environment as ``pip install --no-deps`` would install them. A Spark application then
runs entirely in it (driver, the stream source's process and the executors' workers:
``PYSPARK_PYTHON``) and checks that ``import airflow`` fails everywhere. It publishes with
``publish_dataframe`` (every PySpark), writes a topic with the data source (PySpark 4.0+)
and reads it back with the stream reader (PySpark 4.2+).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConsumer
from tests.spark.pyspark_features import DATA_SOURCE_MISSING, STREAM_READER_MISSING
from tests.spark.python_envs import EXECUTOR_DISTRIBUTIONS, python_with

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = textwrap.dedent(
    """
    import importlib.util, json, sys
    from pyspark.sql import SparkSession
    from airflow_provider_nsq.spark import publish_dataframe

    nsqd, topic, count, checkpoint, pieces = sys.argv[1:6]
    count = int(count)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def has_airflow(_):
        return importlib.util.find_spec("airflow") is not None

    df = spark.range(count, numPartitions=2).selectExpr("concat('event-', id) as value")
    result = {"published": publish_dataframe(df, nsqd=nsqd, topic=topic + "_p")["messages"]}
    if "write" in pieces:
        from airflow_provider_nsq.spark import register

        register(spark)
        df.write.format("nsq").mode("append").option("nsqd", nsqd).option("topic", topic).save()
    if "read" in pieces:
        query = (
            spark.readStream.format("nsq")
            .option("nsqd", nsqd).option("topic", topic).option("channel", "no-airflow")
            .option("batch_timeout", "0.5")
            .load()
            .writeStream.format("memory").queryName("back")
            .trigger(availableNow=True)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        query.awaitTermination(120)
        back = spark.sql("select body from back").collect()
        result["read"] = sorted(bytes(r.body).decode() for r in back)
        result["error"] = str(query.exception()) if query.exception() else None
    result["driver_has_airflow"] = has_airflow(None)
    result["executors_have_airflow"] = (
        spark.sparkContext.parallelize(range(4), 2).map(has_airflow).collect()
    )
    print("RESULT " + json.dumps(result))
    spark.stop()
    """
)


@pytest.fixture(scope="session")
def python_without_airflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv's python whose site-packages has the executor packages and no Airflow."""
    venv = tmp_path_factory.mktemp("venv-without-airflow")
    return python_with(venv, EXECUTOR_DISTRIBUTIONS, with_package=True, check_missing="airflow")


def test_publishing_and_reading_run_where_airflow_is_not_installed(
    python_without_airflow: Path, nsqd: Any, tmp_path: Path, read_topic: Any
) -> None:
    topic = f"t_no_airflow_{uuid.uuid4().hex[:8]}"
    nsqd.create_channel(topic, "no-airflow")
    pieces = [
        p
        for p, missing in (("write", DATA_SOURCE_MISSING), ("read", STREAM_READER_MISSING))
        if not missing
    ]
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHONPATH"))},
        "PYSPARK_PYTHON": str(python_without_airflow),
        "PYSPARK_DRIVER_PYTHON": str(python_without_airflow),
    }
    done = subprocess.run(
        [
            str(python_without_airflow),
            str(script),
            nsqd.tcp_address,
            topic,
            "25",
            str(tmp_path / "checkpoint"),
            ",".join(pieces),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[0].removeprefix("RESULT "))
    events = sorted(f"event-{i}".encode() for i in range(25))
    assert result["published"] == 25
    assert sorted(read_topic(f"{topic}_p", 25)) == events
    if "read" in pieces:
        assert result["error"] is None
        assert result["read"] == [e.decode() for e in events]
    elif "write" in pieces:
        config = ClientConfig(host=nsqd.host, port=nsqd.tcp_port)
        with NSQConsumer(topic, "no-airflow", config=config) as consumer:
            got = consumer.consume(max_messages=30, timeout=2.0)
        assert sorted(m.body for m in got) == events
    assert result["driver_has_airflow"] is False
    assert result["executors_have_airflow"] == [False] * 4
