"""The stream reader's offsets protocol, called as Spark calls it, without Spark: which
batch each offset names, when its messages are FIN'd, what a replayed batch returns."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark.pyspark_features import skip_module_without_stream_reader

skip_module_without_stream_reader()  # before the imports that need PySpark 4.2

from pyspark.sql.streaming.datasource import ReadMaxRows  # noqa: E402

from airflow_provider_nsq.client import ClientConfig, NSQConnection  # noqa: E402
from airflow_provider_nsq.spark.reader import NSQStreamReader, arrow_schema  # noqa: E402
from airflow_provider_nsq.spark.reader_options import NSQReadOptions  # noqa: E402

CHANNEL = "offsets"


@pytest.fixture
def reader(nsqd: Any, nsq_topic: str) -> Iterator[NSQStreamReader]:
    nsqd.create_channel(nsq_topic, CHANNEL)
    with NSQConnection(ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        conn.multi_publish(nsq_topic, [b"m%02d" % i for i in range(30)])
    options = NSQReadOptions.parse(
        {
            "nsqd": nsqd.tcp_address,
            "topic": nsq_topic,
            "channel": CHANNEL,
            "max_messages_per_batch": "10",
            "batch_timeout": "0.5",
            "min_partitions": "3",
        }
    )
    reader = NSQStreamReader(options)
    reader.prepareForTriggerAvailableNow()
    yield reader
    reader.stop()


def rows(reader: NSQStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[bytes]:
    # Partitions travel to executors pickled, with a pickled copy of the reader.
    partitions = pickle.loads(pickle.dumps(reader.partitions(start, end)))
    on_executor = pickle.loads(pickle.dumps(reader))
    out: list[bytes] = []
    for partition in partitions:
        for batch in on_executor.read(partition):
            assert batch.schema.equals(arrow_schema())
            out += batch.column("body").to_pylist()
    return out


def finished(nsqd: Any, topic: str) -> int:
    """FINs nsqd has counted on the channel (its clients' finish_count)."""
    clients = nsqd.channel_stats(topic, CHANNEL)["clients"] or []
    return sum(int(c["finish_count"]) for c in clients)


def test_batches_are_finished_only_when_spark_moves_past_them(
    reader: NSQStreamReader, nsqd: Any, nsq_topic: str
) -> None:
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(10)
    start = reader.initialOffset()

    first = reader.latestOffset(start, limit)
    assert reader.latestOffset(start, limit) == first  # asked again: the same batch
    assert len(reader.partitions(start, first)) == 3
    got = rows(reader, start, first)
    assert len(got) == 10
    assert finished(nsqd, nsq_topic) == 0  # Spark has not committed it yet

    second = reader.latestOffset(first, limit)  # Spark plans the next: `first` committed
    nsqd.wait_for(lambda: finished(nsqd, nsq_topic) == 10)
    got += rows(reader, first, second)
    reader.commit(second)  # Spark's own commit call
    nsqd.wait_for(lambda: finished(nsqd, nsq_topic) == 20)
    third = reader.latestOffset(second, limit)
    got += rows(reader, second, third)
    assert reader.latestOffset(third, limit) == third  # drained: the query would end
    nsqd.wait_for(lambda: finished(nsqd, nsq_topic) == 30)  # the last batch too

    assert sorted(got) == sorted(b"m%02d" % i for i in range(30))
    stats = nsqd.channel_stats(nsq_topic, CHANNEL)
    assert (stats["depth"], stats["in_flight_count"], stats["requeue_count"]) == (0, 0, 0)


def test_a_batch_planned_by_an_earlier_run_replays_empty(
    reader: NSQStreamReader, nsqd: Any, nsq_topic: str
) -> None:
    earlier = {"batch": 7, "run": "0123456789ab"}  # from a checkpoint of a crashed run
    assert reader.partitions({"batch": 6, "run": "0123456789ab"}, earlier) == []
    following = reader.latestOffset(earlier, reader.getDefaultReadLimit())
    assert following["batch"] == 8 and following["run"] != earlier["run"]
    assert len(rows(reader, earlier, following)) == 10


def test_stop_requeues_the_batch_spark_did_not_commit(
    reader: NSQStreamReader, nsqd: Any, nsq_topic: str
) -> None:
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert len(rows(reader, start, end)) == 10

    reader.stop()

    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, CHANNEL)["depth"] == 30)
    stats = nsqd.channel_stats(nsq_topic, CHANNEL)
    assert stats["in_flight_count"] == 0  # all back, none FIN'd
    assert stats["requeue_count"] >= 10  # the batch, and whatever was prefetched


def test_messages_published_after_available_now_started_are_left(
    reader: NSQStreamReader, nsqd: Any, nsq_topic: str
) -> None:
    with NSQConnection(ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        conn.multi_publish(nsq_topic, [b"late-%d" % i for i in range(5)])
    offset, seen = reader.initialOffset(), []
    while True:
        end = reader.latestOffset(offset, ReadMaxRows(100))
        if end == offset:
            break
        seen += rows(reader, offset, end)
        offset = end
    reader.stop()

    assert sorted(seen) == sorted(b"m%02d" % i for i in range(30))
    nsqd.wait_for(lambda: nsqd.channel_stats(nsq_topic, CHANNEL)["depth"] == 5)
    assert nsqd.channel_stats(nsq_topic, CHANNEL)["in_flight_count"] == 0  # late ones wait
