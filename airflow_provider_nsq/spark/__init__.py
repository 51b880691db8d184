"""PySpark data source ``nsq``: publish a DataFrame's rows to an NSQ topic from executors.

    from airflow_provider_nsq.spark import register
    register(spark)
    df.write.format("nsq").mode("append") \\
        .option("nsqd", "127.0.0.1:4150").option("topic", "results").save()

Importing this package never imports Airflow (executors have only the client). On the
DAG side, options come from an Airflow connection as
``options_from_client_config(NSQHook(conn_id).get_client_config())``.
"""

from .datasource import (
    NSQDataSource,
    NSQPartitionSummary,
    NSQWriteError,
    NSQWriter,
    register,
)
from .options import KNOWN_OPTIONS, NSQOptionError, NSQWriteOptions, options_from_client_config

__all__ = [
    "KNOWN_OPTIONS",
    "NSQDataSource",
    "NSQOptionError",
    "NSQPartitionSummary",
    "NSQWriteError",
    "NSQWriteOptions",
    "NSQWriter",
    "options_from_client_config",
    "register",
]
