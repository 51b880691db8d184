"""The ``nsq`` PySpark data source: ``df.write.format("nsq")`` publishes rows to a topic;
``spark.readStream.format("nsq")`` reads a channel (the stream reader is in :mod:`.reader`).

Where each piece of the writer runs:

- ``NSQDataSource.writer()`` runs on the driver (in a Python worker Spark starts there)
  before any task is scheduled: every option and the body column are checked here, so a
  mistake is one error from ``save()`` and nothing is published.
- ``NSQWriter.write()`` runs once per partition on an executor: one connection to nsqd,
  rows sent in MPUB batches of ``batch_size`` messages (the client splits a batch further
  into frames within nsqd's ``max_body_size``). It returns a per-partition summary.
- ``NSQWriter.commit()`` / ``abort()`` run on the driver with those summaries.

Delivery is at-least-once: a publish returns after nsqd's OK, but if a task fails after
some batches were accepted and Spark retries it (or a stage is recomputed), the retry
publishes the whole partition again. Consumers must tolerate duplicates.

Only the NSQ client is imported here, never Airflow: executors need this package and
pyarrow, nothing else.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..client.producer import NSQProducer
from ..protocol.errors import NSQError, NSQValueError
from .options import DEFAULT_BODY_COLUMNS, NSQOptionError, NSQWriteOptions
from .reader import READ_SCHEMA, NSQStreamReader
from .reader_options import NSQReadOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession


class NSQWriteError(NSQError):
    """Publishing a partition failed; says how far it got (at-least-once: see module doc)."""


@dataclass(frozen=True)
class NSQPartitionSummary(WriterCommitMessage):
    """What one write task published (returned to the driver as its commit message)."""

    partition: int
    attempt: int
    messages: int
    bytes: int  # message bodies only, without NSQ framing
    frames: int  # MPUB frames nsqd accepted
    mpub_calls: int  # multi_publish calls (batches of up to batch_size messages)
    connects: int  # TCP connections opened (1, or 0 for an empty partition)
    seconds: float
    nsqd: str = ""  # where the partition was published ("" for an empty one)


def summarize(
    options: NSQWriteOptions, parts: Sequence[NSQPartitionSummary | None], *, aborted: bool
) -> dict[str, Any]:
    """The job-level summary ``commit``/``abort`` log and write to ``summary_file``."""
    done = sorted((p for p in parts if p is not None), key=lambda p: p.partition)
    return {
        "status": "aborted" if aborted else "committed",
        "topic": options.topic,
        "nsqd": f"{options.host}:{options.port}",
        "nsqds": options.nsqds,
        "format": options.format,
        "messages": sum(p.messages for p in done),
        "bytes": sum(p.bytes for p in done),
        "frames": sum(p.frames for p in done),
        "partitions": len(parts),
        "failed_partitions": sum(1 for p in parts if p is None),
        "per_partition": [asdict(p) for p in done],
    }


class NSQDataSource(DataSource):
    """``df.write.format("nsq").option("nsqd", "host:port").option("topic", "t")`` and
    ``spark.readStream.format("nsq").option("topic", "t").option("channel", "c")``.

    Writes (batch) and reads (stream, :mod:`.reader`): see ``docs/spark.md`` for the
    options. Use ``mode("append")`` to write:
    ``overwrite`` is refused here (a topic cannot be overwritten), and PySpark 4 itself
    refuses ``errorifexists`` (the default) and ``ignore`` for Python data sources.
    """

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        # Spark asks for it in .load(), on the driver: check the reader's options there,
        # so a mistake fails at once instead of when the query runs.
        NSQReadOptions.parse(self.options)
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        raise NSQValueError(_NO_BATCH_READ)

    def streamReader(self, schema: StructType) -> NSQStreamReader:
        """``spark.readStream.format("nsq")``: checks every option here, on the driver."""
        if schema != READ_SCHEMA:
            raise NSQValueError(
                f"the nsq stream reader's schema is fixed: {READ_SCHEMA.simpleString()}; "
                f"got {schema.simpleString()} (do not call .schema() on the reader)"
            )
        return NSQStreamReader(NSQReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> NSQWriter:
        if overwrite:
            raise NSQValueError(
                "the nsq data source cannot overwrite: NSQ topics are append-only; "
                "use .mode('append')"
            )
        return NSQWriter(NSQWriteOptions.parse(self.options), schema)


_NO_BATCH_READ = (
    "the nsq data source reads as a stream only: spark.readStream.format('nsq') (NSQ "
    "cannot replay a range of messages; use trigger(availableNow=True) for a batch job)"
)


def _choose_body_column(options: NSQWriteOptions, schema: StructType) -> int:
    """Index of the body column (raw format); raises naming the option or column."""
    names = schema.fieldNames()
    wanted = [options.body_column] if options.body_column else list(DEFAULT_BODY_COLUMNS)
    for want in wanted:
        # Spark resolves column names case-insensitively by default; do the same, but an
        # exact match wins.
        exact = [i for i, n in enumerate(names) if n == want]
        loose = [i for i, n in enumerate(names) if n.lower() == want.lower()]
        found = exact or loose
        if len(found) > 1:
            raise NSQOptionError("body_column", f"column {want!r} is ambiguous in {names}")
        if found:
            index = found[0]
            dtype = schema.fields[index].dataType
            if not isinstance(dtype, (StringType, BinaryType)):
                raise NSQOptionError(
                    "body_column",
                    f"column {names[index]!r} is {dtype.simpleString()}; the body must be "
                    "string or binary: cast it, or use format=json to send whole rows",
                )
            return index
    if options.body_column:
        raise NSQOptionError(
            "body_column", f"no column {options.body_column!r} in the DataFrame {names}"
        )
    raise NSQOptionError(
        "body_column",
        f"the DataFrame {names} has no 'value' or 'body' column: name the body column "
        "with .option('body_column', ...), or use format=json to send whole rows",
    )


class NSQWriter(DataSourceArrowWriter):
    """Publishes each partition over one connection; pickled from the driver to executors."""

    def __init__(self, options: NSQWriteOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.body_index = _choose_body_column(options, schema) if options.format == "raw" else None

    # -- executor side ---------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NSQPartitionSummary:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
        opts = self.options
        encode = self._encoder(partition)
        started = time.monotonic()
        # Partitions spread over the nsqds; each fails over along the rest (never after
        # an MPUB was written: see client/producer.py).
        producer = NSQProducer(opts.nsqds_for(partition), opts.client_config())
        messages = size = frames = calls = 0
        pending: list[bytes] = []

        def flush(bodies: list[bytes]) -> None:
            nonlocal messages, size, frames, calls
            # Connected on the first batch, so an empty partition costs no connection.
            frames += producer.multi_publish(opts.topic, bodies)
            calls += 1
            messages += len(bodies)
            size += sum(map(len, bodies))

        try:
            for batch in iterator:
                pending.extend(encode(batch))
                if len(pending) >= opts.batch_size:
                    full = len(pending) - len(pending) % opts.batch_size
                    for start in range(0, full, opts.batch_size):
                        flush(pending[start : start + opts.batch_size])
                    del pending[:full]
            if pending:
                flush(pending)
        except NSQError as exc:
            raise NSQWriteError(
                f"partition {partition} (attempt {attempt}): publishing to topic "
                f"{opts.topic!r} at nsqd {producer.address or producer.addresses[0]} failed "
                f"after {messages} "
                f"messages were accepted; a retry publishes the partition again "
                f"(at-least-once): {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            nsqd = producer.address or ""
            producer.close()
            connects = producer.connects
        return NSQPartitionSummary(
            partition=partition,
            attempt=attempt,
            messages=messages,
            bytes=size,
            frames=frames,
            mpub_calls=calls,
            connects=connects,
            seconds=round(time.monotonic() - started, 6),
            nsqd=nsqd,
        )

    def _encoder(self, partition: int) -> Callable[[pa.RecordBatch], list[bytes]]:
        """Turn an Arrow batch into message bodies (built on the executor: closures do
        not need to be picklable)."""
        if self.body_index is None:
            return _json_encoder(self.schema)
        return _raw_encoder(self.body_index, self.schema.fieldNames()[self.body_index], partition)

    # -- driver side -----------------------------------------------------------------

    def commit(self, messages: list[NSQPartitionSummary | None]) -> None:  # type: ignore[override]
        self._report(messages, aborted=False)

    def abort(self, messages: list[NSQPartitionSummary | None]) -> None:  # type: ignore[override]
        self._report(messages, aborted=True)

    def _report(self, parts: Sequence[NSQPartitionSummary | None], *, aborted: bool) -> None:
        summary = summarize(self.options, parts, aborted=aborted)
        if aborted:
            line = (
                f"nsq: write to topic {summary['topic']!r} aborted; "
                f"{summary['messages']} messages from "
                f"{summary['partitions'] - summary['failed_partitions']} finished partitions "
                "were already published and stay published"
            )
        else:
            line = (
                f"nsq: published {summary['messages']} messages ({summary['bytes']} bytes, "
                f"{summary['frames']} MPUB frames) to topic {summary['topic']!r} from "
                f"{summary['partitions']} partitions"
            )
        print(line, file=sys.stderr, flush=True)
        if self.options.summary_file:
            _write_json_atomically(self.options.summary_file, summary)


def _write_json_atomically(path: str, data: dict[str, Any]) -> None:
    # A reader polling for the file never sees half of it.
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".nsq-summary-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
        os.replace(tmp, path)
    except BaseException:
        with _suppress_oserror():
            os.unlink(tmp)
        raise


class _suppress_oserror:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        return isinstance(exc, OSError)


# -- body encoders --------------------------------------------------------------------


def _raw_encoder(
    index: int, column: str, partition: int
) -> Callable[[pa.RecordBatch], list[bytes]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    seen = 0  # rows before this batch, for error messages

    def encode(batch: pa.RecordBatch) -> list[bytes]:
        nonlocal seen
        array = batch.column(index)
        if array.null_count:
            row = seen + array.is_null().index(True).as_py()
            raise NSQValueError(
                f"row {row} of partition {partition} has a null {column!r}: an NSQ message "
                "needs a body; filter or coalesce nulls first"
            )
        # UTF-8 strings and binaries share Arrow's layout: a view, not a copy per row.
        if pa.types.is_string(array.type):
            array = array.view(pa.binary())
        elif pa.types.is_large_string(array.type):
            array = array.view(pa.large_binary())
        if len(array) and pc.min(pc.binary_length(array)).as_py() == 0:
            row = seen + pc.equal(pc.binary_length(array), 0).index(True).as_py()
            raise NSQValueError(
                f"row {row} of partition {partition} has an empty {column!r}: nsqd rejects "
                "empty messages"
            )
        seen += len(array)
        bodies = array.to_pylist()
        if bodies and not isinstance(bodies[0], bytes):  # e.g. a string_view column
            bodies = [b if isinstance(b, bytes) else str(b).encode() for b in bodies]
        return bodies

    return encode


def _json_encoder(schema: StructType) -> Callable[[pa.RecordBatch], list[bytes]]:
    names = schema.fieldNames()
    converters = [_json_converter(f.dataType) for f in schema.fields]
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

    def encode(batch: pa.RecordBatch) -> list[bytes]:
        columns: list[list[Any]] = []
        for i, conv in enumerate(converters):
            values = batch.column(i).to_pylist()
            if conv is not None:
                values = [None if v is None else conv(v) for v in values]
            columns.append(values)
        return [
            dumps(dict(zip(names, row, strict=True))).encode() for row in zip(*columns, strict=True)
        ]

    return encode


def _float(value: float) -> Any:
    # Spark's to_json writes these as strings too; bare NaN is not JSON.
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _json_converter(dtype: DataType) -> Callable[[Any], Any] | None:
    """How an Arrow-converted value of ``dtype`` becomes JSON; None when it already is."""
    if isinstance(dtype, BinaryType):
        return lambda v: base64.b64encode(v).decode("ascii")
    if isinstance(dtype, DecimalType):
        return str  # exact: a float would round silently
    if isinstance(dtype, (FloatType, DoubleType)):
        return _float
    if isinstance(dtype, TimestampType):
        # Arrow hands these over in the session time zone; one zone for every message.
        return lambda v: (v.astimezone(datetime.timezone.utc) if v.tzinfo else v).isoformat()
    if isinstance(dtype, (DateType, TimestampNTZType)):
        return lambda v: v.isoformat()
    if isinstance(dtype, DayTimeIntervalType):
        return lambda v: v.total_seconds()
    if isinstance(dtype, ArrayType):
        elem = _json_converter(dtype.elementType)
        if elem is None:
            return None
        return lambda v: [None if x is None else elem(x) for x in v]
    if isinstance(dtype, StructType):
        convs = [(f.name, _json_converter(f.dataType)) for f in dtype.fields]
        if all(c is None for _, c in convs):
            return None
        return lambda v: {
            name: (v[name] if c is None or v[name] is None else c(v[name])) for name, c in convs
        }
    if isinstance(dtype, MapType):
        key = _json_converter(dtype.keyType) or (lambda k: k)
        val = _json_converter(dtype.valueType) or (lambda x: x)
        # Arrow gives a map as a list of (key, value) pairs; JSON wants an object.
        return lambda v: {_json_key(key(k)): (None if x is None else val(x)) for k, x in v}
    return None


def _json_key(key: Any) -> Any:
    return key if isinstance(key, (str, int, float, bool)) else str(key)


def register(spark: SparkSession) -> None:
    """Make ``format("nsq")`` available in ``spark`` (safe to call more than once)."""
    spark.dataSource.register(NSQDataSource)
