"""The ``nsq`` PySpark data source: ``df.write.format("nsq")`` publishes rows to a topic
(:mod:`.writer`, PySpark 4.0+); ``spark.readStream.format("nsq")`` reads a channel
(:mod:`.reader`, PySpark 4.2+).

Registering it needs PySpark 4.0 (the Python data source API). On 4.0 and 4.1 the source
writes, and a read fails with one error naming the PySpark the stream reader needs; the
reader's module is imported only when Spark asks for a read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol.errors import NSQValueError
from .connect_session import check_connect_server, is_spark_connect
from .reader_options import NSQReadOptions
from .versions import data_source_too_old
from .writer import NSQWriter
from .writer_options import NSQWriteOptions

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader
except ImportError:  # PySpark 3.5 has no Python data source API
    raise data_source_too_old() from None

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from .reader import NSQStreamReader


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
        # so a mistake fails at once instead of when the query runs. Importing the reader
        # is what fails on a PySpark without its API, naming the version it needs.
        from .reader import READ_SCHEMA

        NSQReadOptions.parse(self.options)
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        raise NSQValueError(_NO_BATCH_READ)

    def streamReader(self, schema: StructType) -> NSQStreamReader:
        """``spark.readStream.format("nsq")``: checks every option here, on the driver."""
        from .reader import READ_SCHEMA, NSQStreamReader

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


def register(spark: SparkSession) -> None:
    """Make ``format("nsq")`` available in ``spark`` (safe to call more than once).

    On Spark Connect the data source runs in the server's Python workers: the first call
    for a session checks, with a one-row job, that the server has this package at this
    version, and raises :class:`~.connect_session.NSQConnectServerError` saying what to
    install there if not.
    """
    if is_spark_connect(spark):
        check_connect_server(spark)
    spark.dataSource.register(NSQDataSource)
