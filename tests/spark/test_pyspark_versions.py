"""What imports, registers and runs on the installed PySpark: the package everywhere,
``publish_dataframe`` from 3.5, the data source's writer from 4.0, its stream reader from
4.2; an older PySpark gets one ImportError naming the version a piece needs.

Each test asserts what this PySpark must do, so the same file checks every version of
the matrix (the ``spark`` nox sessions).
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from tests.spark.pyspark_features import (
    DATA_SOURCE_MISSING,
    PYSPARK_VERSION,
    STREAM_READER_MISSING,
)


def import_in_a_fresh_python(module: str) -> subprocess.CompletedProcess[str]:
    # A fresh interpreter: an import that fails here must fail the same way for a user.
    return subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120
    )


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_the_package_and_publish_dataframe_import_on_every_pyspark() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from airflow_provider_nsq.spark import publish_dataframe, NSQWriteOptions, "
            "options_from_client_config",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("module", "missing", "needed"),
    [
        ("airflow_provider_nsq.spark.writer", DATA_SOURCE_MISSING, "4.0"),
        ("airflow_provider_nsq.spark.datasource", DATA_SOURCE_MISSING, "4.0"),
        ("airflow_provider_nsq.spark.reader", STREAM_READER_MISSING, "4.2"),
    ],
)
def test_each_piece_imports_where_its_api_exists_and_names_the_version_elsewhere(
    module: str, missing: str | None, needed: str
) -> None:
    done = import_in_a_fresh_python(module)
    if missing is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode != 0
    error = last_line(done.stderr)
    # One error, naming the version needed and the one installed (not PySpark's names).
    assert error.startswith("ImportError: "), done.stderr
    assert f"needs PySpark >= {needed} (this is {PYSPARK_VERSION})" in error
    assert "During handling of the above exception" not in done.stderr


def test_package_names_resolve_or_name_the_version_they_need() -> None:
    import airflow_provider_nsq.spark as package

    for name in package.__all__:
        try:
            getattr(package, name)
        except ImportError as exc:
            assert re.search(r"needs PySpark >= 4\.[02] \(this is ", str(exc)), (name, exc)
        else:
            assert name in dir(package)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        package.nope  # noqa: B018


@pytest.mark.spark
def test_on_pyspark_4_0_and_4_1_the_source_writes_and_a_read_names_pyspark_4_2(
    spark: Any, nsq_options: dict[str, str], read_topic: Any
) -> None:
    if DATA_SOURCE_MISSING:
        pytest.skip(DATA_SOURCE_MISSING)
    if STREAM_READER_MISSING is None:
        pytest.skip(
            f"PySpark {PYSPARK_VERSION} has the stream reader (tests/spark/test_stream_reader.py)"
        )
    from airflow_provider_nsq.spark import register

    register(spark)  # again: registering is safe to repeat
    df = spark.createDataFrame([(f"m{i}",) for i in range(5)], "value string")
    df.write.format("nsq").mode("append").options(**nsq_options).save()
    assert sorted(read_topic(nsq_options["topic"], 5)) == [f"m{i}".encode() for i in range(5)]

    expected = re.escape(f"the nsq stream reader needs PySpark >= 4.2 (this is {PYSPARK_VERSION})")
    read = {"nsqd": nsq_options["nsqd"], "topic": nsq_options["topic"], "channel": "c"}
    with pytest.raises(Exception, match=expected):
        spark.readStream.format("nsq").options(**read).load()
    with pytest.raises(Exception, match=expected):
        spark.read.format("nsq").options(**read).load()
