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

``pyspark`` and ``pyspark-client`` (which Airflow's Spark provider pulls in) install into
the same ``pyspark/`` folder: two versions of them mix one's Python files with the other's
jars, and PySpark fails deep inside a job (``publish_dataframe``: a Py4JError, a
``UserDefinedPythonFunction`` constructor that "does not exist").
:func:`check_one_pyspark` refuses that mix when this package is imported.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

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


def check_one_pyspark() -> None:
    """Raise an ImportError when ``pyspark`` and ``pyspark-client`` are both installed at
    different versions (they share one ``pyspark/`` folder), naming both and the command
    that installs one version of each. Reads only the installed distributions' metadata.
    """
    try:
        full, client = version("pyspark"), version("pyspark-client")
    except PackageNotFoundError:
        return  # one of them alone: nothing to mix
    if full == client:
        return
    # Every pyspark-client release has a pyspark release of the same number.
    raise ImportError(
        f"pyspark {full} and pyspark-client {client} are both installed: they install "
        "into the same pyspark/ folder, which now mixes the two versions' files (Spark "
        "jobs fail, publish_dataframe with a Py4JError). Install one version of both: "
        f'pip install --force-reinstall --no-deps "pyspark=={client}" "pyspark-client=={client}" '
        "(airflow-provider-nsq[spark,apache-spark] pins them together)"
    )
