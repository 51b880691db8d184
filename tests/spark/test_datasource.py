"""Publishing DataFrames end to end: rows -> messages read back from nsqd, through both
writers, which share their options and their executor code: the ``nsq`` data source
(``df.write.format("nsq")``, PySpark 4.0+) and ``publish_dataframe`` (``mapInArrow``,
PySpark 3.5+)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import math
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.spark.pyspark_features import (
    DATA_SOURCE_MISSING,
    needs_airflow,
    needs_data_source,
    needs_stream_reader,
)

pytestmark = pytest.mark.spark

Save = Callable[..., Any]


def _save_with_data_source(df: Any, options: dict[str, str], **extra: str) -> None:
    df.write.format("nsq").mode("append").options(**options, **extra).save()


def _save_with_publish_dataframe(df: Any, options: dict[str, str], **extra: str) -> None:
    from airflow_provider_nsq.spark import publish_dataframe

    summary = publish_dataframe(df, options, **extra)
    assert summary["status"] == "committed"


@pytest.fixture(params=["data source", "publish_dataframe"])
def save(request: pytest.FixtureRequest) -> Save:
    """``save(df, options, **more)`` with each writer."""
    if request.param == "data source":
        if DATA_SOURCE_MISSING:
            pytest.skip(DATA_SOURCE_MISSING)
        return _save_with_data_source
    return _save_with_publish_dataframe


def load_summary(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_string_bodies_arrive_exactly_once_per_row(
    spark: Any, save: Save, nsq_options: dict[str, str], read_topic: Any, tmp_path: Path
) -> None:
    texts = [f"event {i} · ünïcode ✓" for i in range(50)]
    df = spark.createDataFrame([(t,) for t in texts], "value string").repartition(3)
    summary_file = tmp_path / "summary.json"

    save(df, nsq_options, batch_size="7", summary_file=str(summary_file))

    bodies = read_topic(nsq_options["topic"], len(texts))
    assert sorted(b.decode("utf-8") for b in bodies) == sorted(texts)
    summary = load_summary(summary_file)
    assert summary["status"] == "committed"
    assert summary["messages"] == 50
    assert summary["bytes"] == sum(len(t.encode()) for t in texts)
    parts = summary["per_partition"]
    assert len(parts) == 3 and sum(p["messages"] for p in parts) == 50
    for part in parts:
        assert part["connects"] == 1  # one persistent connection per partition
        assert part["mpub_calls"] == math.ceil(part["messages"] / 7)


def test_binary_bodies_are_sent_byte_for_byte(
    spark: Any, save: Save, nsq_options: dict[str, str], read_topic: Any
) -> None:
    blobs = [bytes([i, 0, 255, 10, 13]) + b"\xc3\x28" * i for i in range(1, 30)]
    df = spark.createDataFrame([(bytearray(b),) for b in blobs], "body binary").repartition(2)

    save(df, nsq_options)

    assert sorted(read_topic(nsq_options["topic"], len(blobs))) == sorted(blobs)


def test_body_column_option_picks_the_column_and_ignores_the_rest(
    spark: Any, save: Save, nsq_options: dict[str, str], read_topic: Any
) -> None:
    rows = [(i, f"payload-{i}", "value column that is not the body") for i in range(10)]
    df = spark.createDataFrame(rows, "id int, payload string, value string")

    save(df, nsq_options, body_column="payload")

    got = read_topic(nsq_options["topic"], len(rows))
    assert sorted(got) == sorted(f"payload-{i}".encode() for i in range(10))


def test_json_format_sends_whole_rows(
    spark: Any, save: Save, nsq_options: dict[str, str], read_topic: Any
) -> None:
    schema = (
        "id long, name string, score double, ratio double, amount decimal(12,2), "
        "day date, at timestamp, raw binary, tags array<string>, "
        "where struct<city:string,zip:int>, counts map<string,int>, missing string"
    )
    rows = [
        (
            i,
            f"n{i}",
            i / 4,
            math.inf if i == 1 else float(i),
            Decimal(f"{i}1234567.05"),
            dt.date(2026, 1, i + 1),
            dt.datetime(2026, 1, 2, 3, 4, 5, i, tzinfo=dt.UTC),
            bytearray(b"\x00\x01" * i),
            [f"t{i}", "x"],
            (f"c{i}", 1000 + i),
            {"a": i},
            None,
        )
        for i in range(3)
    ]
    # A session zone other than UTC: messages must not depend on it.
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        df = spark.createDataFrame(rows, schema).coalesce(1)
        save(df, nsq_options, format="json")
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)

    got = sorted(
        (json.loads(b) for b in read_topic(nsq_options["topic"], 3)), key=lambda r: r["id"]
    )
    assert [r["id"] for r in got] == [0, 1, 2]
    first, second = got[0], got[1]
    assert first["name"] == "n0" and first["score"] == 0.0 and first["missing"] is None
    assert second["ratio"] == "Infinity"  # not bare Infinity, which is not JSON
    assert second["amount"] == "11234567.05"  # decimals stay exact, as strings
    assert second["day"] == "2026-01-02"
    assert second["at"] == "2026-01-02T03:04:05.000001+00:00"  # UTC, whatever the session zone
    assert base64.b64decode(second["raw"]) == b"\x00\x01"
    assert second["tags"] == ["t1", "x"]
    assert second["where"] == {"city": "c1", "zip": 1001}
    assert second["counts"] == {"a": 1}


def test_large_partition_is_split_across_mpub_frames(
    spark: Any, save: Save, nsq_options: dict[str, str], read_topic: Any, tmp_path: Path
) -> None:
    # 64 rows x 96 KiB = 6 MiB in one partition and one MPUB call: more than nsqd's 5 MiB
    # max body, so the client must send it as several MPUB frames.
    size, count = 96 * 1024, 64
    df = spark.range(count).selectExpr(
        f"concat(cast(id as string), ':', repeat('x', {size})) as value"
    )
    summary_file = tmp_path / "summary.json"

    save(df.coalesce(1), nsq_options, batch_size="1000", summary_file=str(summary_file))

    summary = load_summary(summary_file)
    assert summary["bytes"] > 5 * 1024 * 1024
    assert summary["per_partition"][0]["mpub_calls"] == 1
    assert summary["frames"] >= 2
    bodies = read_topic(nsq_options["topic"], count)
    expected = [f"{i}:".encode() + b"x" * size for i in range(count)]
    digest = lambda items: sorted(hashlib.sha256(b).hexdigest() for b in items)  # noqa: E731
    assert len(bodies) == count
    assert digest(bodies) == digest(expected)


def test_empty_dataframe_publishes_nothing_and_opens_no_connection(
    spark: Any, save: Save, nsq_options: dict[str, str], tmp_path: Path
) -> None:
    summary_file = tmp_path / "summary.json"
    df = spark.createDataFrame([], "value string").repartition(2)

    save(df, nsq_options, summary_file=str(summary_file))

    summary = load_summary(summary_file)
    assert summary["messages"] == 0
    assert all(p["connects"] == 0 for p in summary["per_partition"])


@pytest.mark.parametrize(
    ("options", "schema", "option_named"),
    [
        ({"topic": None}, "value string", "'topic'"),
        ({"nsqd": None}, "value string", "'nsqd'"),
        ({"topic": "bad topic!"}, "value string", "'topic'"),
        ({"nsqd": "127.0.0.1:http"}, "value string", "'nsqd'"),
        ({"batchsize": "10"}, "value string", "'batchsize'"),
        ({"batch_size": "0"}, "value string", "'batch_size'"),
        ({"compression": "gzip"}, "value string", "'compression'"),
        ({"deflate_level": "12"}, "value string", "'deflate_level'"),
        ({"tls": "maybe"}, "value string", "'tls'"),
        ({"tls_cert_file": "/tmp/c.pem"}, "value string", "'tls_cert_file'"),
        ({"connect_timeout": "-1"}, "value string", "'connect_timeout'"),
        ({"format": "avro"}, "value string", "'format'"),
        ({"msg_timeout_ms": "60000"}, "value string", "'msg_timeout_ms'"),
        ({}, "id int, payload string", "'body_column'"),
        ({}, "value int", "'body_column'"),
        ({"body_column": "nope"}, "value string", "'body_column'"),
    ],
)
def test_bad_options_fail_on_the_driver_before_publishing(
    spark: Any,
    save: Save,
    nsqd: Any,
    nsq_options: dict[str, str],
    options: dict[str, str | None],
    schema: str,
    option_named: str,
) -> None:
    merged = {**nsq_options, **options}
    given = {k: v for k, v in merged.items() if v is not None}
    row = {"value string": ("a",), "value int": (1,), "id int, payload string": (1, "a")}
    df = spark.createDataFrame([row[schema]] * 3, schema)

    with pytest.raises(Exception, match=f"nsq data source option {option_named}"):
        save(df, given)

    assert nsqd.topic_stats(nsq_options["topic"]) is None  # nothing was ever published


@needs_data_source
def test_overwrite_mode_is_refused(
    spark: Any, nsq_options: dict[str, str], read_topic: Any
) -> None:
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("nsq").mode("overwrite").options(**nsq_options).save()
    assert read_topic(nsq_options["topic"], 0) == []


def test_null_body_fails_the_job_and_the_summary_says_aborted(
    spark: Any, save: Save, nsq_options: dict[str, str], tmp_path: Path
) -> None:
    summary_file = tmp_path / "summary.json"
    df = spark.createDataFrame([("a",), (None,), ("c",)], "value string").coalesce(1)

    with pytest.raises(Exception, match="null 'value'"):
        save(df, nsq_options, summary_file=str(summary_file))

    assert load_summary(summary_file)["status"] == "aborted"


SECRET = "spark-writer-secret-5c1d"


@needs_airflow
@pytest.mark.parametrize("compression", ["snappy", "deflate"])
def test_options_from_an_airflow_connection_with_tls_auth_and_compression(
    spark: Any,
    save: Save,
    nsqd_factory: Any,
    tls_files: Any,
    nsq_topic: str,
    read_topic: Any,
    monkeypatch: pytest.MonkeyPatch,
    compression: str,
) -> None:
    from airflow_provider_nsq.client import ClientConfig
    from airflow_provider_nsq.hooks.nsq import NSQHook
    from airflow_provider_nsq.spark import options_from_client_config
    from airflow_provider_nsq.testing.auth_server import StaticAuthorizer, allow_all

    server = nsqd_factory(
        tls_cert=tls_files.server_cert,
        tls_key=tls_files.server_key,
        tls_required=True,
        authorizer=StaticAuthorizer({SECRET: allow_all("spark-writer")}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_SPARK_SECURE",
        f"nsq://:{SECRET}@{server.host}:{server.tcp_port}"
        f"?tls=true&tls_ca_file={tls_files.ca_file}&compression={compression}",
    )
    config = NSQHook("nsq_spark_secure").get_client_config()
    options = {**options_from_client_config(config), "topic": nsq_topic}
    assert options["auth_secret"] == SECRET and options["compression"] == compression
    df = spark.createDataFrame([(f"secure {i}",) for i in range(20)], "value string")

    save(df.repartition(2), options)

    config = ClientConfig(
        host=server.host,
        port=server.tcp_port,
        tls=True,
        tls_ca_file=tls_files.ca_file,
        auth_secret=SECRET,
    )
    got = read_topic(nsq_topic, 20, config=config)
    assert sorted(got) == sorted(f"secure {i}".encode() for i in range(20))


@needs_stream_reader
def test_batch_reading_points_to_the_stream_reader(spark: Any) -> None:
    with pytest.raises(Exception, match="readStream"):
        options = {"nsqd": "127.0.0.1:4150", "topic": "t", "channel": "c"}
        spark.read.format("nsq").options(**options).load().collect()


def test_nsqd_tcp_addresses_spread_partitions_and_skip_a_dead_nsqd(
    spark: Any, save: Save, nsq_topology: Any, nsq_topic: str, tmp_path: Path
) -> None:
    from airflow_provider_nsq.client.consumer import NSQConsumer
    from tests.support.net import closed_port

    topology = nsq_topology(n=2)
    for nsqd in topology.nsqds:
        nsqd.create_channel(nsq_topic, "check")
    dead = f"127.0.0.1:{closed_port()}"
    texts = [f"row {i}" for i in range(60)]
    df = spark.createDataFrame([(t,) for t in texts], "value string").repartition(3)
    summary_file = tmp_path / "summary.json"
    options = {
        "nsqd": topology.nsqd_tcp_addresses[0],
        "nsqd_tcp_addresses": ",".join([dead, *topology.nsqd_tcp_addresses]),
        "topic": nsq_topic,
        "summary_file": str(summary_file),
    }

    save(df, options)

    summary = load_summary(summary_file)
    assert summary["nsqds"] == [
        topology.nsqd_tcp_addresses[0],
        dead,
        topology.nsqd_tcp_addresses[1],
    ]
    # Partition p starts at nsqd p % 3; the dead one's partition failed over to the next.
    assert {p["nsqd"] for p in summary["per_partition"]} == set(topology.nsqd_tcp_addresses)
    with NSQConsumer(nsq_topic, "check", nsqd_tcp_addresses=topology.nsqd_tcp_addresses) as c:
        got = c.consume(max_messages=100, timeout=3)
    assert sorted(m.body.decode() for m in got) == sorted(texts)
    assert {m.nsqd for m in got} == set(topology.nsqd_tcp_addresses)
