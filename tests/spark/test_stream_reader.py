"""``spark.readStream.format("nsq")`` end to end: messages -> rows, FIN only after commit.

Spark local[2] (the session shared by tests/spark), the embedded broker or the real nsqd
named by NSQD_ADDRESS. Every query gets its own topic, channel and checkpoint.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection, NSQConsumer
from airflow_provider_nsq.testing.polling import wait_for
from tests.spark.pyspark_features import needs_stream_reader

pytestmark = [pytest.mark.spark, needs_stream_reader]

CHANNEL = "spark"


def publish(nsqd: Any, topic: str, bodies: list[bytes]) -> None:
    """MPUB ``bodies`` to ``topic``, creating CHANNEL first so it keeps all of them."""
    nsqd.create_channel(topic, CHANNEL)
    with NSQConnection(ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        for start in range(0, len(bodies), 1000):
            conn.multi_publish(topic, bodies[start : start + 1000])


def read_back(nsqd: Any, topic: str, expected: int, timeout: float = 30.0) -> list[Any]:
    """What CHANNEL holds now, FIN'd: ``expected`` messages and whatever else comes."""
    got: list[Any] = []
    config = ClientConfig(host=nsqd.host, port=nsqd.tcp_port)

    def enough() -> bool:
        if len(got) < expected:
            want = min(expected - len(got), 2000)
            with NSQConsumer(topic, CHANNEL, config=config) as consumer:
                got.extend(consumer.consume(max_messages=want, timeout=2.0))
        return len(got) >= expected

    wait_for(enough, timeout, 0, message=lambda: f"{len(got)} of {expected} on {topic}")
    with NSQConsumer(topic, CHANNEL, config=config) as consumer:
        got += consumer.consume(max_messages=10, timeout=0.5)
    return got


def stream(spark: Any, nsqd: Any, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("nsq")
        .option("nsqd", nsqd.tcp_address)
        .option("topic", topic)
        .option("channel", CHANNEL)
        .option("batch_timeout", "0.5")
    )
    return reader.options(**options).load()


def drain_to_memory(df: Any, tmp_path: Path, timeout: float = 120.0) -> tuple[str, Any]:
    """Run ``df`` with trigger(availableNow=True) into a memory table; wait for the end."""
    name = f"nsq_{uuid.uuid4().hex[:8]}"
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
        .start()
    )
    try:
        assert query.awaitTermination(timeout), f"availableNow did not stop within {timeout}s"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return name, query


def assert_all_finished(nsqd: Any, topic: str) -> None:
    """Every message was FIN'd: nothing waits, nothing in flight, nothing was REQ'd."""
    stats = nsqd.channel_stats(topic, CHANNEL)
    assert (stats["depth"], stats["in_flight_count"]) == (0, 0)
    assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)


def test_rows_carry_string_and_binary_bodies_exactly(
    spark: Any, nsqd: Any, nsq_topic: str, tmp_path: Path
) -> None:
    texts = [f"event {i} · ünïcode ✓".encode() for i in range(40)]
    blobs = [bytes([i, 0, 255, 10, 13]) + b"\xc3\x28" * i for i in range(1, 41)]
    before = time.time()
    publish(nsqd, nsq_topic, texts + blobs)
    after = time.time()

    name, _ = drain_to_memory(stream(spark, nsqd, nsq_topic), tmp_path)

    rows = spark.sql(
        f"select id, body, attempts, cast(timestamp as double) as ts, topic, channel, nsqd "
        f"from {name}"
    ).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(texts + blobs)
    assert len({r.id for r in rows}) == 80 and all(len(r.id) == 16 for r in rows)
    assert {(r.attempts, r.topic, r.channel, r.nsqd) for r in rows} == {
        (1, nsq_topic, CHANNEL, nsqd.tcp_address)
    }
    assert all(before - 1 <= r.ts <= after + 1 for r in rows)
    assert_all_finished(nsqd, nsq_topic)
    assert read_back(nsqd, nsq_topic, 0) == []


def test_many_batches_lose_nothing_and_repeat_nothing(
    spark: Any, nsqd: Any, nsq_topic: str, tmp_path: Path
) -> None:
    bodies = [f"{i:06d}:".encode() + b"p" * 94 for i in range(3000)]  # 101 bytes each
    publish(nsqd, nsq_topic, bodies)
    df = stream(
        spark,
        nsqd,
        nsq_topic,
        max_messages_per_batch="400",
        max_bytes_per_batch="20200",  # 200 messages: the byte bound cuts first
        min_partitions="3",
    )

    name, query = drain_to_memory(df, tmp_path)

    got = Counter(bytes(r.body) for r in spark.sql(f"select body from {name}").collect())
    assert [body for body, n in got.items() if n > 1] == []  # no duplicates
    assert set(got) == set(bodies)  # no loss
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 3000
    assert len(sizes) >= 15 and max(sizes) <= 200
    assert_all_finished(nsqd, nsq_topic)


def test_available_now_drains_what_is_there_and_stops(
    spark: Any, nsqd: Any, nsq_topic: str, tmp_path: Path
) -> None:
    older = [b"old-%d" % i for i in range(300)]
    newer = [b"new-%d" % i for i in range(20)]
    publish(nsqd, nsq_topic, older)
    seen: list[bytes] = []

    def first_batch_publishes_more(batch: Any, batch_id: int) -> None:
        seen.extend(bytes(r.body) for r in batch.select("body").collect())
        if batch_id == 0:  # published while the query runs: not part of "available now"
            publish(nsqd, nsq_topic, newer)

    query = (
        stream(spark, nsqd, nsq_topic, max_messages_per_batch="100")
        .writeStream.foreachBatch(first_batch_publishes_more)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()

    assert query.exception() is None
    assert sorted(seen) == sorted(older)
    back = read_back(nsqd, nsq_topic, len(newer))
    assert sorted(m.body for m in back) == sorted(newer)  # left on the channel, none lost


def test_stopping_mid_batch_finishes_nothing_and_every_message_comes_back(
    spark: Any, nsqd: Any, nsq_topic: str, tmp_path: Path
) -> None:
    bodies = [b"held-%d" % i for i in range(500)]
    publish(nsqd, nsq_topic, bodies)
    started, release = tmp_path / "started", tmp_path / "release"

    def block(row: Any) -> None:  # runs on an executor, inside batch 0
        started.touch()
        wait_for(release.exists, 120, 0.05, message="the test's release")

    query = (
        stream(spark, nsqd, nsq_topic)
        .writeStream.foreach(block)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        nsqd.wait_for(started.exists, timeout=120)
        # The batch is running: every message is delivered, held, and none is FIN'd.
        stats = nsqd.channel_stats(nsq_topic, CHANNEL)
        assert (stats["in_flight_count"], stats["depth"]) == (len(bodies), 0)
        stopper = threading.Thread(target=query.stop)
        stopper.start()
        stopper.join(60)
        assert not stopper.is_alive(), "query.stop() hung"
    finally:
        release.touch()
        query.stop()

    nsqd.wait_for(
        lambda: nsqd.channel_stats(nsq_topic, CHANNEL)["requeue_count"] == len(bodies),
        timeout=30,
    )
    back = read_back(nsqd, nsq_topic, len(bodies))
    redelivered = Counter(m.body for m in back)
    lost = set(bodies) - set(redelivered)
    duplicated = sum(n - 1 for n in redelivered.values())
    print(f"stop mid-batch: {len(bodies)} held, {len(lost)} lost, {duplicated} duplicated")
    assert (len(lost), duplicated) == (0, 0)
    assert {m.attempts for m in back} == {2}  # delivered once to Spark, REQ'd, delivered again


def test_a_batch_longer_than_msg_timeout_and_heartbeats_keeps_its_messages(
    spark: Any, nsqd: Any, nsq_topic: str, tmp_path: Path
) -> None:
    bodies = [b"slow-%d" % i for i in range(50)]
    publish(nsqd, nsq_topic, bodies)
    # nsqd drops a connection silent for 2 heartbeats (2 s here) and redelivers a message
    # not FIN'd or TOUCHed within msg_timeout (1 s): the batch below takes 4 s.
    df = stream(spark, nsqd, nsq_topic, heartbeat_interval_ms="1000", msg_timeout_ms="1000")
    seen: list[Any] = []

    def slow_sink(batch: Any, batch_id: int) -> None:
        seen.extend(batch.select("body", "attempts").collect())
        time.sleep(4)  # a long batch (the workload, not a timing check)

    query = (
        df.writeStream.foreachBatch(slow_sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()

    assert query.exception() is None
    assert sorted(bytes(r.body) for r in seen) == sorted(bodies)
    assert {r.attempts for r in seen} == {1}
    assert_all_finished(nsqd, nsq_topic)


def test_nsqlookupd_finds_every_nsqd_and_each_row_names_its_nsqd(
    spark: Any, nsq_topology: Any, nsq_topic: str, tmp_path: Path
) -> None:
    topology = nsq_topology(n=2)
    sent: dict[str, list[bytes]] = {}
    for i, server in enumerate(topology.nsqds):
        sent[server.tcp_address] = [b"nsqd%d-%03d" % (i, j) for j in range(150 + 50 * i)]
        publish(server, nsq_topic, sent[server.tcp_address])
    topology.wait_for_producers(nsq_topic)
    df = (
        spark.readStream.format("nsq")
        .option("lookupd_http_addresses", ",".join(topology.lookupd_http_addresses))
        .option("topic", nsq_topic)
        .option("channel", CHANNEL)
        .option("batch_timeout", "0.5")
        .option("max_messages_per_batch", "120")
        .load()
    )

    name, _ = drain_to_memory(df, tmp_path)

    rows = spark.sql(f"select body, nsqd from {name}").collect()
    got: dict[str, list[bytes]] = {}
    for r in rows:
        got.setdefault(r.nsqd, []).append(bytes(r.body))
    assert {nsqd: sorted(bodies) for nsqd, bodies in got.items()} == sent  # all, once each
    for server in topology.nsqds:
        assert_all_finished(server, nsq_topic)


@pytest.mark.parametrize(
    ("options", "option_named"),
    [
        ({"channel": None}, "'channel'"),
        ({"topic": "bad topic!"}, "'topic'"),
        ({"nsqd": "127.0.0.1:http"}, "'nsqd'"),
        ({"max_messages_per_batch": "0"}, "'max_messages_per_batch'"),
        ({"max_bytes_per_batch": "lots"}, "'max_bytes_per_batch'"),
        ({"max_in_flight": "1"}, "'max_in_flight'"),
        ({"compression": "gzip"}, "'compression'"),
        ({"batch_size": "10"}, "'batch_size'"),
        ({"maxOffsetsPerTrigger": "10"}, "'maxoffsetspertrigger'"),
    ],
)
def test_bad_options_fail_on_the_driver_before_reading(
    spark: Any, nsqd: Any, nsq_topic: str, options: dict[str, str | None], option_named: str
) -> None:
    given = {
        k: v
        for k, v in {
            "nsqd": nsqd.tcp_address,
            "topic": nsq_topic,
            "channel": CHANNEL,
            **options,
        }.items()
        if v is not None
    }
    with pytest.raises(Exception, match=f"nsq data source option {option_named}"):
        spark.readStream.format("nsq").options(**given).load()
    assert nsqd.topic_stats(nsq_topic) is None  # no connection ever subscribed


def test_trigger_once_is_refused_and_leaves_the_messages(
    spark: Any, nsqd: Any, nsq_topic: str, tmp_path: Path
) -> None:
    publish(nsqd, nsq_topic, [b"once"])
    query = (
        stream(spark, nsqd, nsq_topic)
        .writeStream.format("noop")
        .trigger(once=True)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(Exception, match="availableNow"):
        query.awaitTermination(120)
    stats = nsqd.channel_stats(nsq_topic, CHANNEL)
    assert (stats["depth"], stats["in_flight_count"], stats["requeue_count"]) == (1, 0, 0)
