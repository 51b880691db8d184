"""``publish_dataframe``: what it returns and reports beyond what it shares with the data
source (tests/spark/test_datasource.py runs the shared cases through both writers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_nsq.spark import NSQOptionError, publish_dataframe

pytestmark = pytest.mark.spark


def test_returns_the_summary_and_takes_options_as_python_values(
    spark: Any, nsq_options: dict[str, str], read_topic: Any
) -> None:
    df = spark.createDataFrame([(f"row {i}",) for i in range(25)], "value string").repartition(2)

    summary = publish_dataframe(df, nsq_options, batch_size=10, tls=False, connect_timeout=5.0)

    assert summary["status"] == "committed"
    assert (summary["messages"], summary["partitions"], summary["failed_partitions"]) == (25, 2, 0)
    assert summary["topic"] == nsq_options["topic"] and summary["nsqds"] == [nsq_options["nsqd"]]
    for part in summary["per_partition"]:
        assert part["connects"] == 1 and part["mpub_calls"] == -(-part["messages"] // 10)
    assert sorted(read_topic(nsq_options["topic"], 25)) == sorted(
        f"row {i}".encode() for i in range(25)
    )


def test_only_the_body_column_is_sent_and_other_columns_may_be_anything(
    spark: Any, nsq_options: dict[str, str], read_topic: Any
) -> None:
    df = spark.sql(
        "select concat('b', id) as `the.body`, map(id, named_struct('x', array(id))) as other "
        "from range(6)"
    )

    summary = publish_dataframe(df, {**nsq_options, "body_column": "the.body"})

    assert summary["messages"] == 6
    assert sorted(read_topic(nsq_options["topic"], 6)) == sorted(f"b{i}".encode() for i in range(6))


def test_a_bad_option_fails_before_spark_runs_anything(
    spark: Any, nsqd: Any, nsq_options: dict[str, str]
) -> None:
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(NSQOptionError, match="nsq data source option 'batch_size'"):
        publish_dataframe(df, nsq_options, batch_size=0)
    with pytest.raises(NSQOptionError, match="option 'topic': expected a string, got NoneType"):
        publish_dataframe(df, {**nsq_options, "topic": None})
    assert nsqd.topic_stats(nsq_options["topic"]) is None


def test_a_failed_job_reports_what_the_finished_partitions_published(
    spark: Any, nsq_options: dict[str, str], read_topic: Any, tmp_path: Path
) -> None:
    # Partition 2 ends with a null body; partitions 0 and 1 are fine.
    df = spark.range(300, numPartitions=3).selectExpr(
        "if(id = 299, null, concat(spark_partition_id(), ':', id)) as value"
    )
    summary_file = tmp_path / "summary.json"

    with pytest.raises(Exception, match="row 99 of partition 2 has a null 'value'"):
        publish_dataframe(df, nsq_options, summary_file=str(summary_file))

    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "aborted"
    assert summary["failed_partitions"] >= 1 and summary["partitions"] == 3
    finished = {p["partition"]: p["messages"] for p in summary["per_partition"]}
    assert 2 not in finished and all(count == 100 for count in finished.values())
    assert summary["messages"] == 100 * len(finished)
    # What it reports as published is on the topic (at-least-once: the failed partition's
    # accepted batches may be there too).
    got = {b.decode() for b in read_topic(nsq_options["topic"], summary["messages"])}
    for partition in finished:
        assert {f"{partition}:{i}" for i in range(partition * 100, partition * 100 + 100)} <= got


def test_json_rows_keep_column_names_with_dots(
    spark: Any, nsq_options: dict[str, str], read_topic: Any
) -> None:
    df = spark.sql("select id as `event.id`, concat('n', id) as `a.b` from range(3)")

    publish_dataframe(df, nsq_options, format="json")

    got = sorted(json.loads(b)["event.id"] for b in read_topic(nsq_options["topic"], 3))
    assert got == [0, 1, 2]
