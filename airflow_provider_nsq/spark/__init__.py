"""NSQ for PySpark: the ``nsq`` data source (publish a DataFrame's rows to a topic from
the executors; read a topic/channel as a stream, FIN only after Spark committed the
batch) and :func:`publish_dataframe` for PySpark versions without the data source API.

    from airflow_provider_nsq.spark import register
    register(spark)
    df.write.format("nsq").mode("append") \\
        .option("nsqd", "127.0.0.1:4150").option("topic", "results").save()
    spark.readStream.format("nsq").option("nsqd", "127.0.0.1:4150") \\
        .option("topic", "events").option("channel", "spark").load()

    from airflow_provider_nsq.spark import publish_dataframe
    publish_dataframe(df, {"nsqd": "127.0.0.1:4150", "topic": "results"})

Which PySpark each needs (:mod:`.versions`): ``publish_dataframe`` 3.5+, the data source's
writer 4.0+, its stream reader 4.2+. Names are imported when first used, so importing
this package works on any of them (and without PySpark: the option parsers are plain
Python); a name whose PySpark is too old raises one ImportError naming the version.

Importing it checks that ``pyspark`` and ``pyspark-client`` (Airflow's Spark provider pulls
it in), when both are installed, are one version: they share the ``pyspark/`` folder, and
a mix fails jobs deep inside Spark; the ImportError names both and the fix
(:func:`.versions.check_one_pyspark`).

On Spark Connect (``SparkSession.builder.remote(...)``) all of it works the same from the
client; the server's Python workers run it, so the package is installed there too
(:mod:`.connect_session` checks, naming what to install).

Importing this package never imports Airflow (executors have only the client). On the
DAG side, options come from an Airflow connection as
``options_from_settings(NSQHook(conn_id).get_settings())`` (``source="read"`` for the
stream reader).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..client.lazy_names import lazy_names
from .connect_session import NSQConnectServerError
from .option_sets import NSQOptionError, options_from_client_config, options_from_settings
from .reader_options import KNOWN_READ_OPTIONS, NSQReadOptions
from .versions import check_one_pyspark
from .writer_options import KNOWN_OPTIONS, NSQWriteOptions

# Before any submodule imports PySpark: a mixed install fails here, saying how to fix it.
check_one_pyspark()

if TYPE_CHECKING:
    from .dataframe_publisher import publish_dataframe
    from .datasource import NSQDataSource, register
    from .partition_publisher import NSQPartitionSummary, NSQWriteError
    from .reader import READ_SCHEMA, NSQStreamReader
    from .writer import NSQWriter

# Names that need PySpark, and the module holding each (imported on first use).
_NEEDS_PYSPARK = {
    "publish_dataframe": ".dataframe_publisher",
    "NSQPartitionSummary": ".partition_publisher",
    "NSQWriteError": ".partition_publisher",
    "NSQDataSource": ".datasource",
    "register": ".datasource",
    "NSQWriter": ".writer",
    "READ_SCHEMA": ".reader",
    "NSQStreamReader": ".reader",
}

__all__ = [
    "KNOWN_OPTIONS",
    "KNOWN_READ_OPTIONS",
    "READ_SCHEMA",
    "NSQConnectServerError",
    "NSQDataSource",
    "NSQOptionError",
    "NSQPartitionSummary",
    "NSQReadOptions",
    "NSQStreamReader",
    "NSQWriteError",
    "NSQWriteOptions",
    "NSQWriter",
    "options_from_client_config",
    "options_from_settings",
    "publish_dataframe",
    "register",
]


__getattr__, __dir__ = lazy_names(globals(), _NEEDS_PYSPARK)
