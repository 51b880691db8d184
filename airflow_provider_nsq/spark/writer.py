"""The ``nsq`` data source's writer (``df.write.format("nsq")``): PySpark 4.0 and later.

Where each piece runs:

- ``NSQDataSource.writer()`` builds :class:`NSQWriter` on the driver (in a Python worker
  Spark starts there) before any task is scheduled: every option and the body column are
  checked there, so a mistake is one error from ``save()`` and nothing is published.
- ``NSQWriter.write()`` runs once per partition on an executor:
  :func:`~.partition_publisher.publish_partition` (one connection, MPUB batches,
  failover). It returns the partition's summary as Spark's commit message.
- ``NSQWriter.commit()`` / ``abort()`` run on the driver with those summaries.

Delivery is at-least-once (see :mod:`.partition_publisher`). Only the NSQ client is
imported here, never Airflow: executors need this package and pyarrow, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .message_bodies import choose_body_column
from .partition_publisher import NSQPartitionSummary, publish_partition
from .progress import report_partition
from .versions import data_source_too_old
from .write_summary import report_write
from .writer_options import NSQWriteOptions

try:
    from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
except ImportError:  # PySpark 3.5 has no Python data source API
    raise data_source_too_old() from None

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType


class _CommitMessage(NSQPartitionSummary, WriterCommitMessage):
    """A partition's summary as the commit message Spark hands to ``commit``/``abort``."""


class NSQWriter(DataSourceArrowWriter):
    """Publishes each partition over one connection; pickled from the driver to executors."""

    def __init__(self, options: NSQWriteOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.body_index = choose_body_column(options, schema) if options.format == "raw" else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _CommitMessage:
        summary = publish_partition(
            self.options, self.schema, self.body_index, iterator, summary_type=_CommitMessage
        )
        report_partition(self.options.topic, summary)
        return summary

    def commit(self, messages: Sequence[NSQPartitionSummary | None]) -> None:  # type: ignore[override]
        report_write(self.options, messages, aborted=False)

    def abort(self, messages: Sequence[NSQPartitionSummary | None]) -> None:  # type: ignore[override]
        report_write(self.options, messages, aborted=True)
