"""The nsq data source and ``publish_dataframe`` through Spark Connect.

A client session (``spark_connect``) on a local Connect server started for the test
session (``spark_connect_server``, tests/conftest.py), whose Python workers have this
package and its runtime libraries, no Airflow. The guarantees are classic Spark's
(test_datasource.py, test_publish_dataframe.py, test_stream_reader.py): every row
published once, a failed write reports what stays published; the stream reader FINs a
message only after Spark committed its batch, and a failed batch loses nothing. Then what
differs on Connect: a server without the package, or with another version, fails with an
error saying what to install there; a client with only pyspark-client (what Airflow's
Spark provider installs) runs all of it.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import textwrap
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_nsq import __version__
from airflow_provider_nsq.spark import NSQConnectServerError, publish_dataframe
from airflow_provider_nsq.testing.polling import wait_for
from tests.spark.connect_server import CONNECT_MISSING, ConnectServer
from tests.spark.pyspark_features import needs_data_source, needs_stream_reader
from tests.spark.python_envs import (
    CONNECT_CLIENT_DISTRIBUTIONS,
    EXECUTOR_DISTRIBUTIONS,
    python_with,
)
from tests.spark.test_stream_reader import CHANNEL, assert_all_finished, publish

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(CONNECT_MISSING is not None, reason=CONNECT_MISSING or ""),
]

Save = Callable[..., dict[str, Any]]


def _save_with_data_source(df: Any, options: dict[str, str], summary_file: Path) -> dict:
    writer = df.write.format("nsq").mode("append").options(**options)
    writer.option("summary_file", str(summary_file)).save()
    return json.loads(summary_file.read_text())


def _save_with_publish_dataframe(df: Any, options: dict[str, str], summary_file: Path) -> dict:
    return publish_dataframe(df, options, summary_file=str(summary_file))


@pytest.fixture(params=["data source", "publish_dataframe"])
def save(request: pytest.FixtureRequest) -> Save:
    """``save(df, options, summary_file)`` with each writer; returns the summary."""
    if request.param == "data source":
        request.applymarker(needs_data_source)
        return _save_with_data_source
    return _save_with_publish_dataframe


def test_each_writer_publishes_every_row_once(
    spark_connect: Any, save: Save, nsq_options: dict[str, str], read_topic: Any, tmp_path: Path
) -> None:
    texts = [f"event {i} · ünïcode ✓" for i in range(50)]
    df = spark_connect.createDataFrame([(t,) for t in texts], "value string").repartition(3)

    summary = save(df, {**nsq_options, "batch_size": "7"}, tmp_path / "summary.json")

    assert sorted(b.decode() for b in read_topic(nsq_options["topic"], 50)) == sorted(texts)
    assert (summary["status"], summary["messages"], summary["partitions"]) == ("committed", 50, 3)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    for part in summary["per_partition"]:
        assert part["connects"] == 1 and part["mpub_calls"] == math.ceil(part["messages"] / 7)


def test_a_failed_write_raises_and_reports_what_stays_published(
    spark_connect: Any, save: Save, nsq_options: dict[str, str], read_topic: Any, tmp_path: Path
) -> None:
    # Partition 2 ends with a null body; partitions 0 and 1 are fine.
    df = spark_connect.range(300, numPartitions=3).selectExpr(
        "if(id = 299, null, concat(spark_partition_id(), ':', id)) as value"
    )
    summary_file = tmp_path / "summary.json"

    with pytest.raises(Exception, match="row 99 of partition 2 has a null 'value'"):
        save(df, nsq_options, summary_file)

    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "aborted"
    finished = {p["partition"]: p["messages"] for p in summary["per_partition"]}
    assert 2 not in finished and set(finished.values()) <= {100}
    assert summary["messages"] == 100 * len(finished)
    if save is _save_with_data_source:  # Spark hands abort() every finished partition
        assert (summary["partitions"], summary["failed_partitions"]) == (3, 1)
    else:  # publish_dataframe on Connect sees the rows Spark sent, in partition order
        assert (summary["partitions"], summary["failed_partitions"]) == (None, None)
    # What it reports as published is on the topic (at-least-once: the failed partition's
    # accepted batches may be there too).
    got = {b.decode() for b in read_topic(nsq_options["topic"], summary["messages"])}
    for partition in finished:
        assert {f"{partition}:{i}" for i in range(partition * 100, partition * 100 + 100)} <= got


def test_a_bad_option_fails_before_anything_is_published(
    spark_connect: Any, save: Save, nsqd: Any, nsq_options: dict[str, str], tmp_path: Path
) -> None:
    df = spark_connect.createDataFrame([("a",)], "value string")

    with pytest.raises(Exception, match="nsq data source option 'batch_size'"):
        save(df, {**nsq_options, "batch_size": "0"}, tmp_path / "summary.json")

    assert nsqd.topic_stats(nsq_options["topic"]) is None


def drain_to_memory(df: Any, checkpoint: Path, timeout: float = 120.0) -> tuple[str, Any]:
    """Run ``df`` with trigger(availableNow=True) into a memory table; wait for the end."""
    name = f"nsq_{uuid.uuid4().hex[:8]}"
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        assert query.awaitTermination(timeout), f"availableNow did not stop within {timeout}s"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return name, query


def stream(spark: Any, nsqd: Any, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("nsq").options(
        nsqd=nsqd.tcp_address, topic=topic, channel=CHANNEL, batch_timeout="0.5"
    )
    return reader.options(**options).load()


def _source_rows(progress: Any) -> list[int]:
    return [source["numInputRows"] for source in progress["sources"]]


@needs_stream_reader
def test_the_stream_reader_reads_each_message_once_and_fins_what_spark_committed(
    spark_connect: Any, nsqd: Any, nsq_topic: str, tmp_path: Path
) -> None:
    bodies = [f"{i:04d}:".encode() + bytes([i % 256]) * 40 for i in range(600)]
    publish(nsqd, nsq_topic, bodies)
    df = stream(spark_connect, nsqd, nsq_topic, max_messages_per_batch="200", min_partitions="2")

    name, query = drain_to_memory(df, tmp_path / "checkpoint")

    rows = spark_connect.sql(f"select body, attempts, topic, channel from {name}").collect()
    got = Counter(bytes(r.body) for r in rows)
    assert [body for body, n in got.items() if n > 1] == []  # no duplicates
    assert set(got) == set(bodies)  # no loss
    assert {(r.attempts, r.topic, r.channel) for r in rows} == {(1, nsq_topic, CHANNEL)}
    # Connect's progress has no top-level numInputRows: the sources' counts.
    sizes = [n for p in query.recentProgress for n in _source_rows(p) if n]
    assert sum(sizes) == 600 and len(sizes) >= 3 and max(sizes) <= 200
    assert_all_finished(nsqd, nsq_topic)


@needs_stream_reader
def test_a_failed_batch_finishes_nothing_and_the_rerun_gets_every_message_once(
    spark_connect: Any, nsqd: Any, nsq_topic: str, tmp_path: Path
) -> None:
    bodies = [b"held-%d" % i for i in range(100)]
    publish(nsqd, nsq_topic, bodies)
    started, release = tmp_path / "started", tmp_path / "release"
    checkpoint = tmp_path / "checkpoint"

    def hold_then_fail(row: Any) -> None:  # runs in the server's Python workers, batch 0
        started.touch()
        wait_for(release.exists, 120, 0.05, message="the test's release")
        raise RuntimeError("the sink failed")

    query = (
        stream(spark_connect, nsqd, nsq_topic)
        .writeStream.foreach(hold_then_fail)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        nsqd.wait_for(started.exists, timeout=120)
        # The batch is running: every message is delivered, held, and none is FIN'd.
        stats = nsqd.channel_stats(nsq_topic, CHANNEL)
        assert (stats["in_flight_count"], stats["depth"]) == (len(bodies), 0)
        release.touch()
        with pytest.raises(Exception, match="the sink failed"):
            query.awaitTermination(120)
    finally:
        release.touch()
        query.stop()

    # Spark never committed the batch: every message goes back to the channel ...
    nsqd.wait_for(
        lambda: nsqd.channel_stats(nsq_topic, CHANNEL)["requeue_count"] == len(bodies),
        timeout=30,
    )
    # ... and the query, run again from its checkpoint (into Parquet, a sink that can
    # restart from one), gets each of them once.
    out = tmp_path / "out"
    rerun = (
        stream(spark_connect, nsqd, nsq_topic)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert rerun.awaitTermination(120), "availableNow did not stop within 120s"
    finally:
        rerun.stop()
    assert rerun.exception() is None, rerun.exception()
    rows = spark_connect.read.parquet(str(out)).select("body", "attempts").collect()
    got = Counter(bytes(r.body) for r in rows)
    assert sorted(got) == sorted(bodies) and set(got.values()) == {1}
    assert {r.attempts for r in rows} == {2}  # delivered to the failed batch, then here
    stats = nsqd.channel_stats(nsq_topic, CHANNEL)  # all FIN'd: none waits or is held
    assert (stats["depth"], stats["in_flight_count"], stats["requeue_count"]) == (0, 0, 100)


def test_a_server_with_another_version_is_refused(
    spark_connect_server: Any, nsqd: Any, nsq_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_nsq.spark import connect_session, register

    monkeypatch.setattr(connect_session, "__version__", "0.0.1")  # this client's, here
    session = spark_connect_server.session()  # a new session: checked anew
    try:
        says = re.escape(f"server has airflow-provider-nsq {__version__}, this client 0.0.1")
        with pytest.raises(NSQConnectServerError, match=says):
            register(session)
        df = session.createDataFrame([("a",)], "value string")
        with pytest.raises(NSQConnectServerError, match=says):
            publish_dataframe(df, nsqd=nsqd.tcp_address, topic=nsq_topic)
    finally:
        session.stop()
    assert nsqd.topic_stats(nsq_topic) is None


@pytest.mark.slow
def test_a_server_without_the_package_says_to_install_it_there(
    tmp_path: Path, nsqd: Any, nsq_topic: str
) -> None:
    from airflow_provider_nsq.spark import register

    python = python_with(
        tmp_path / "venv",
        EXECUTOR_DISTRIBUTIONS,
        with_package=False,
        check_missing="airflow_provider_nsq",
    )
    server = ConnectServer(python, tmp_path / "server.log")
    try:
        session = server.session()
        try:
            says = re.escape(
                "the Spark Connect server cannot import airflow_provider_nsq ("
                "ModuleNotFoundError: No module named 'airflow_provider_nsq'): install "
                f"airflow-provider-nsq {__version__} where the Spark Connect server runs its "
                f"Python workers (python {python})"
            )
            with pytest.raises(NSQConnectServerError, match=says):
                register(session)
            df = session.createDataFrame([("a",)], "value string")
            with pytest.raises(NSQConnectServerError, match=says):
                publish_dataframe(df, nsqd=nsqd.tcp_address, topic=nsq_topic)
        finally:
            session.stop()
    finally:
        server.stop()
    assert nsqd.topic_stats(nsq_topic) is None


CLIENT_JOB = textwrap.dedent(
    """
    import importlib.util, json, sys
    from pyspark.sql import SparkSession
    from airflow_provider_nsq.spark import publish_dataframe, register

    url, nsqd, topic = sys.argv[1:4]
    spark = SparkSession.builder.remote(url).getOrCreate()
    register(spark)
    df = spark.range(20, numPartitions=2).selectExpr("concat('event-', id) as value")
    result = {"published": publish_dataframe(df, nsqd=nsqd, topic=topic + "_p")["messages"]}
    df.write.format("nsq").mode("append").option("nsqd", nsqd).option("topic", topic).save()
    stream = spark.readStream.format("nsq").option("nsqd", nsqd).option("topic", topic)
    result["read_schema"] = stream.option("channel", "client").load().schema.simpleString()
    result["classic_pyspark"] = importlib.util.find_spec("pyspark.core") is not None
    print("RESULT " + json.dumps(result))
    spark.stop()
    """
)


@pytest.mark.slow
@needs_stream_reader
def test_a_client_with_only_pyspark_client_runs_the_writers_and_plans_a_read(
    spark_connect_server: Any, tmp_path: Path, nsqd: Any, read_topic: Any
) -> None:
    from airflow_provider_nsq.spark import READ_SCHEMA

    # The client only sends plans: reading runs on the server as in the tests above.
    topic = f"t_client_{uuid.uuid4().hex[:8]}"
    python = python_with(
        tmp_path / "venv", CONNECT_CLIENT_DISTRIBUTIONS, with_package=True, check_missing="airflow"
    )
    script = tmp_path / "client.py"
    script.write_text(CLIENT_JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}

    done = subprocess.run(
        [str(python), str(script), spark_connect_server.url, nsqd.tcp_address, topic],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[0].removeprefix("RESULT "))
    expected = {
        "published": 20,
        "read_schema": READ_SCHEMA.simpleString(),
        "classic_pyspark": False,
    }
    assert result == expected
    events = sorted(f"event-{i}" for i in range(20))
    assert sorted(b.decode() for b in read_topic(f"{topic}_p", 20)) == events
    assert sorted(b.decode() for b in read_topic(topic, 20)) == events
