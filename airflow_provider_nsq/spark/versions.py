"""Which PySpark each Spark piece of this package needs, and the error when it is older.

Checked by installing each version (the ``spark`` nox sessions run the tests on them):

- :func:`~.dataframe_publisher.publish_dataframe` (``mapInArrow``): PySpark 3.5 and later;
- the ``nsq`` data source's writer (``df.write.format("nsq")``): the Python data source
  API, PySpark 4.0 and later;
- its stream reader (``spark.readStream.format("nsq")``): admission control and
  ``Trigger.AvailableNow`` for Python stream readers (``pyspark.sql.streaming.datasource``),
  PySpark 4.2 and later.

A module that needs a newer PySpark than the one installed fails to import with one
:class:`ImportError` naming both versions, not with the name PySpark lacks.
"""

from __future__ import annotations

#: The lowest PySpark of each piece, as (major, minor).
WRITER_PYSPARK = (4, 0)
STREAM_READER_PYSPARK = (4, 2)


def pyspark_version() -> str:
    """The installed PySpark's version (``pyspark`` or ``pyspark-client``)."""
    from pyspark import __version__

    return str(__version__)


def pyspark_too_old(feature: str, minimum: tuple[int, int], advice: str = "") -> ImportError:
    """The error for ``feature`` on a PySpark older than ``minimum``; raise it ``from None``."""
    needed = ".".join(map(str, minimum))
    text = f"{feature} needs PySpark >= {needed} (this is {pyspark_version()})"
    return ImportError(f"{text}; {advice}" if advice else text)


def data_source_too_old() -> ImportError:
    """The error for the ``nsq`` data source (writer) on a PySpark without its API."""
    return pyspark_too_old(
        "the nsq data source",
        WRITER_PYSPARK,
        "on older PySpark, publish with airflow_provider_nsq.spark.publish_dataframe(df, ...)",
    )


def stream_reader_too_old() -> ImportError:
    """The error for ``spark.readStream.format("nsq")`` on a PySpark without its API."""
    return pyspark_too_old(
        "the nsq stream reader",
        STREAM_READER_PYSPARK,
        "the nsq data source writes from PySpark 4.0 on, reads from 4.2 on",
    )
