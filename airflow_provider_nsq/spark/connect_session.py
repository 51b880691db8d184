"""Spark Connect sessions: recognising one, and checking once per session that its server
can run this package.

With Spark Connect (``SparkSession.builder.remote("sc://host:15002")``) the client only
builds plans; everything of this package that runs in Spark runs in the Connect server's
Python workers: the ``nsq`` data source's planning, its write tasks, the stream reader
and :func:`~.dataframe_publisher.publish_dataframe`'s tasks. The client sends them by
reference (module and class name), so the server imports this package. Where it is not
installed, Spark fails only when a worker first needs it, with a ``ModuleNotFoundError``
deep in a Python traceback. :func:`check_connect_server` asks the server first, with a
one-row job whose function travels by value (it needs nothing of this package to run),
and raises :class:`NSQConnectServerError` saying what to install where.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..protocol.errors import NSQError
from ..version import __version__

if TYPE_CHECKING:
    import pyarrow as pa

#: What the server reports, one row: its Python, and this package's version there or
#: why it could not be imported.
_REPORT_SCHEMA = "python string, version string, error string"

#: Where the check passed (``session_id``s): once per session is enough.
_checked: set[str] = set()


class NSQConnectServerError(NSQError):
    """The Spark Connect server's Python workers cannot run this package: it is not
    installed there, or it is another version than the client's."""


def is_spark_connect(spark: Any) -> bool:
    """Whether ``spark`` (a SparkSession) is a Spark Connect client session."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def check_connect_server(spark: Any) -> None:
    """Check that the Connect server behind ``spark`` has this package, at this version.

    Runs one job of one row on the first call for a session; later calls return at once.

    :param spark: a Spark Connect session (:func:`is_spark_connect`).
    :raises NSQConnectServerError: naming the server's Python, what failed there and
        what to install.
    """
    if spark.session_id in _checked:
        return
    rows = spark.range(1, numPartitions=1).mapInArrow(_report_function(), _REPORT_SCHEMA)
    report = rows.collect()[0]
    install = (
        f"install airflow-provider-nsq {__version__} where the Spark Connect server runs "
        f"its Python workers (python {report.python}): pip install --no-deps "
        f'"airflow-provider-nsq=={__version__}" and its runtime libraries (docs/spark.md, '
        '"Spark Connect"); the client only sends plans, the server runs the nsq data '
        "source and publish_dataframe's tasks"
    )
    if report.error is not None:
        raise NSQConnectServerError(
            f"the Spark Connect server cannot import airflow_provider_nsq "
            f"({report.error}): {install}"
        )
    if report.version != __version__:
        raise NSQConnectServerError(
            f"the Spark Connect server has airflow-provider-nsq {report.version}, this "
            f"client {__version__} (the server runs what the client sends, so both must be "
            f"one version): {install}"
        )
    _checked.add(spark.session_id)


def _report_function() -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    # Defined inside a function so that Spark's pickler sends it by value: a module-level
    # function would be sent as a reference to this package, which the server may lack.
    def report(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import sys

        import pyarrow as pa

        for _ in batches:
            pass
        version: str | None = None
        error: str | None = None
        try:
            # What a write task imports: the client, the codecs, the Spark glue.
            import airflow_provider_nsq.spark.partition_publisher  # noqa: F401
            import airflow_provider_nsq.version as installed

            version = installed.__version__
        except Exception as exc:  # reported to the client, which raises
            error = f"{type(exc).__name__}: {exc}"
        row = {"python": sys.executable, "version": version, "error": error}
        schema = pa.schema([(name, pa.string()) for name in row])
        yield pa.RecordBatch.from_pylist([row], schema=schema)

    return report
