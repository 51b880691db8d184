"""``publish_dataframe(df, options)``: publish a DataFrame's rows to NSQ with ``mapInArrow``,
for PySpark 3.5 (which has no Python data source API) and as a plain alternative on 4.x,
on classic Spark and on Spark Connect.

It takes the ``nsq`` data source writer's options, checked by the same parser, and runs
the same code on the executors (:func:`~.partition_publisher.publish_partition`: one
connection per partition, MPUB batches of ``batch_size``, failover along
``nsqd_tcp_addresses``), so messages, guarantees (at-least-once: a retried task publishes
its partition again) and the summary are the data source's.

Where each piece runs:

- on the driver (the client, on Spark Connect), before anything runs: the options and
  the body column are checked; on Spark Connect, the server is checked once per session
  for this package (:func:`~.connect_session.check_connect_server`);
- one task per partition (``mapInArrow``): publishes the partition and returns its
  summary as one row;
- on the driver: the summaries are gathered, one line is printed, ``summary_file`` is
  written and the summary returned.

If the job fails, Spark returns no rows, and the partitions whose tasks finished are
reported as an aborted write before Spark's error is raised. Classic Spark counts them
exactly: each finished task also adds its summary to an accumulator. Spark Connect has no
accumulators (nor ``sparkContext``): there the rows are read as Spark sends them, in
partition order, so the report holds the partitions up to the first one that had not
finished, and says that more may have published (``partitions`` unknown).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from pyspark.accumulators import AccumulatorParam
from pyspark.sql.types import StructType

from .connect_session import check_connect_server, is_spark_connect
from .message_bodies import choose_body_column
from .option_sets import option_text
from .partition_publisher import NSQPartitionSummary, publish_partition
from .write_summary import report_write
from .writer_options import NSQWriteOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.accumulators import Accumulator
    from pyspark.sql import DataFrame

# The row each task returns: an NSQPartitionSummary's fields and their Spark types.
_SUMMARY_COLUMNS = (
    ("partition", "integer"),
    ("attempt", "integer"),
    ("messages", "long"),
    ("bytes", "long"),
    ("frames", "long"),
    ("mpub_calls", "long"),
    ("connects", "integer"),
    ("seconds", "double"),
    ("nsqd", "string"),
)
SUMMARY_SCHEMA = StructType.fromJson(
    {
        "type": "struct",
        "fields": [
            {"name": name, "type": kind, "nullable": False, "metadata": {}}
            for name, kind in _SUMMARY_COLUMNS
        ],
    }
)


def publish_dataframe(
    df: DataFrame, options: Mapping[str, Any] | None = None, **more: Any
) -> dict[str, Any]:
    """Publish every row of ``df`` to an NSQ topic from the executors; returns the summary.

    ``publish_dataframe(df, {"nsqd": "host:4150", "topic": "results"})`` sends what
    ``df.write.format("nsq").mode("append").options(...).save()`` sends.

    :param df: the rows; a ``value`` (or ``body``, or ``body_column``) string or binary
        column is the message (``format=raw``), or each whole row as JSON (``format=json``).
    :param options: the data source writer's options (``nsqd``, ``topic``, ``batch_size``,
        ``nsqd_tcp_addresses``, TLS, AUTH ...), as strings or values Spark's ``.option()``
        takes (``True`` becomes ``"true"``, numbers their text).
    :param more: more options, as keyword arguments.
    :return: the summary the data source writes to ``summary_file``: ``status``
        ``"committed"``, ``messages``, ``bytes``, ``frames``, ``partitions``,
        ``per_partition`` ...
    :raises NSQOptionError: a missing, unknown or bad option, or no usable body column,
        before anything is published.
    :raises NSQConnectServerError: on Spark Connect, a server whose Python workers lack
        this package (or have another version), before anything is published.
    """
    given = {**(options or {}), **more}
    parsed = NSQWriteOptions.parse({key: option_text(value) for key, value in given.items()})
    schema = df.schema
    # Columns renamed by position: mapInArrow resolves each column by its name, which
    # fails for names with dots (PySpark reads `a.b` as a field of `a`). The encoder
    # takes the names (JSON keys, errors) from ``schema``.
    df = df.toDF(*(f"_{i}" for i in range(len(schema.fields))))
    body_index: int | None = None
    if parsed.format == "raw":
        # Only the body column travels to Python (and is converted to Arrow).
        index = choose_body_column(parsed, schema)
        df = df.select(f"_{index}")
        schema = StructType([schema.fields[index]])
        body_index = 0
    if is_spark_connect(df.sparkSession):
        return _publish_on_spark_connect(df, parsed, schema, body_index)
    finished = df.sparkSession.sparkContext.accumulator([], _SummaryList())
    publish = _PublishTask(parsed, schema, body_index, finished)
    try:
        rows = df.mapInArrow(publish, SUMMARY_SCHEMA).collect()
    except Exception:
        done: list[NSQPartitionSummary | None] = list(finished.value)
        failed = max(1, df.rdd.getNumPartitions() - len(done))
        report_write(parsed, done + [None] * failed, aborted=True)
        raise
    return report_write(parsed, [NSQPartitionSummary(**r.asDict()) for r in rows], aborted=False)


def _publish_on_spark_connect(
    df: DataFrame, options: NSQWriteOptions, schema: StructType, body_index: int | None
) -> dict[str, Any]:
    """The same job without an accumulator: the summary rows as Spark sends them."""
    check_connect_server(df.sparkSession)
    publish = _PublishTask(options, schema, body_index, finished=None)
    received: list[NSQPartitionSummary] = []
    try:
        for row in df.mapInArrow(publish, SUMMARY_SCHEMA).toLocalIterator():
            received.append(NSQPartitionSummary(**row.asDict()))
    except Exception:
        report_write(options, received, aborted=True, partitions_known=False)
        raise
    return report_write(options, received, aborted=False)


class _SummaryList(AccumulatorParam):
    """Accumulates the summaries of the tasks that finished."""

    def zero(self, value: list[NSQPartitionSummary]) -> list[NSQPartitionSummary]:
        return []

    def addInPlace(
        self, value1: list[NSQPartitionSummary], value2: list[NSQPartitionSummary]
    ) -> list[NSQPartitionSummary]:
        value1.extend(value2)
        return value1


class _PublishTask:
    """The ``mapInArrow`` function: publishes its partition, yields its summary row (and,
    on classic Spark, adds it to ``finished``)."""

    def __init__(
        self,
        options: NSQWriteOptions,
        schema: StructType,
        body_index: int | None,
        finished: Accumulator[list[NSQPartitionSummary]] | None,
    ) -> None:
        self.options = options
        self.schema = schema
        self.body_index = body_index
        self.finished = finished

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        summary = publish_partition(
            self.options, self.schema, self.body_index, batches, NSQPartitionSummary
        )
        if self.finished is not None:  # classic Spark (Spark Connect has no accumulators)
            self.finished.add([summary])
        row = asdict(summary)
        yield pa.RecordBatch.from_pylist([row], schema=_arrow_summary_schema())


def _arrow_summary_schema() -> pa.Schema:
    import pyarrow as pa

    kinds = {"integer": pa.int32(), "long": pa.int64(), "double": pa.float64()}
    return pa.schema(
        [
            pa.field(name, kinds.get(kind, pa.string()), nullable=False)
            for name, kind in _SUMMARY_COLUMNS
        ]
    )
