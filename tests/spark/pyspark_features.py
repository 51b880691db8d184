"""What the installed PySpark (and Python environment) can run, as skip markers whose
reason names the version a test needs.

The floors come from the package (:mod:`airflow_provider_nsq.spark.versions`); the skip
depends on the version, not on whether an import fails, so a broken import on a
supported PySpark fails its tests instead of skipping them.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from airflow_provider_nsq.spark.versions import STREAM_READER_PYSPARK, WRITER_PYSPARK

PYSPARK_VERSION = (
    importlib.util.find_spec("pyspark") and importlib.import_module("pyspark").__version__
)


def _needs(feature: str, minimum: tuple[int, int]) -> str | None:
    needed = ".".join(map(str, minimum))
    if not PYSPARK_VERSION:
        return f"{feature} needs PySpark >= {needed} (not installed here)"
    if tuple(int(part) for part in PYSPARK_VERSION.split(".")[:2]) >= minimum:
        return None
    return f"{feature} needs PySpark >= {needed} (this is {PYSPARK_VERSION})"


#: Why the data source (writer) cannot run here, or None.
DATA_SOURCE_MISSING = _needs("the nsq data source", WRITER_PYSPARK)
#: Why the stream reader cannot run here, or None.
STREAM_READER_MISSING = _needs("the nsq stream reader", STREAM_READER_PYSPARK)
AIRFLOW_MISSING = (
    None if importlib.util.find_spec("airflow") else "needs Airflow (not installed here)"
)

needs_data_source = pytest.mark.skipif(
    DATA_SOURCE_MISSING is not None, reason=DATA_SOURCE_MISSING or ""
)
needs_stream_reader = pytest.mark.skipif(
    STREAM_READER_MISSING is not None, reason=STREAM_READER_MISSING or ""
)
needs_airflow = pytest.mark.skipif(AIRFLOW_MISSING is not None, reason=AIRFLOW_MISSING or "")


def skip_module_without_stream_reader() -> None:
    """Skip the calling test module (before it imports the reader's PySpark names)."""
    if STREAM_READER_MISSING is not None:
        pytest.skip(STREAM_READER_MISSING, allow_module_level=True)


def skip_module_without_airflow() -> None:
    if AIRFLOW_MISSING is not None:
        pytest.skip(AIRFLOW_MISSING, allow_module_level=True)
