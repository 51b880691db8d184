"""Message bodies from a DataFrame's Arrow batches: one column as is (``format=raw``) or
each row as a JSON object (``format=json``).

Shared by the ``nsq`` data source's writer and :func:`~.dataframe_publisher.publish_dataframe`,
so both send the same bytes for the same rows. Needs only ``pyspark.sql.types`` and
pyarrow (PySpark 3.5 and later).
"""

from __future__ import annotations

import base64
import datetime
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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

from ..protocol.errors import NSQValueError
from .option_sets import NSQOptionError
from .writer_options import DEFAULT_BODY_COLUMNS, NSQWriteOptions

if TYPE_CHECKING:
    import pyarrow as pa


def choose_body_column(options: NSQWriteOptions, schema: StructType) -> int:
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


def body_encoder(
    schema: StructType, body_index: int | None, partition: int
) -> Callable[[pa.RecordBatch], list[bytes]]:
    """Turns one Arrow batch of ``schema`` into message bodies: column ``body_index`` as
    is, or (``None``) every row as JSON. Build it where it runs (on the executor): the
    closures need not be picklable. ``partition`` only goes into error messages."""
    if body_index is None:
        return _json_encoder(schema)
    return _raw_encoder(body_index, schema.fieldNames()[body_index], partition)


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
        return lambda v: (v.astimezone(datetime.UTC) if v.tzinfo else v).isoformat()
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
