"""Test-wide setup: a private Airflow home, configured before anything imports Airflow;
the provider's pytest plugin; the fixtures tests of several folders share.

Importing Airflow with no ``AIRFLOW_HOME`` creates ``~/airflow``; a developer's real
``AIRFLOW_HOME`` must never be touched either. So this file points Airflow at a fresh
temporary directory (always, whatever the environment says), turns the example DAGs
off and registers two DAG bundles for ``dag.test()``: ``tests/support/dags`` (the dags
folder) and the repository's ``example_dags``.

It imports nothing from Airflow itself: tests that never touch Airflow stay fast. The
metadata database is created only when a test asks for the ``airflow_db`` fixture, and
the one local[2] SparkSession (``spark``, shared by ``tests/spark`` and the docs' Spark
blocks) and the one Spark Connect server (``spark_connect_server``) only when a test asks
for them. ``nsq_default`` points Airflow's default NSQ connection at the test nsqd.

Helpers shared by several folders are modules of ``tests/support`` (imported as
``tests.support.<module>``); what one folder alone uses lives in that folder.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.airflow_runs import EXAMPLE_DAGS, TEST_DAGS

#: The provider's fixtures (``nsqd``, ``nsq_topic`` ...): installing the provider does not
#: register them (docs/testing.md), a suite loads them here, in its top-level conftest.py.
pytest_plugins = ["airflow_provider_nsq.testing.pytest_plugin"]

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="nsq-airflow-home-")
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)

_LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"
os.environ.update(
    {
        "AIRFLOW_HOME": _AIRFLOW_HOME,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # Spark's driver, and every spark-submit a test starts, listen on loopback only.
        "SPARK_LOCAL_IP": "127.0.0.1",
        "AIRFLOW__CORE__DAGS_FOLDER": str(TEST_DAGS),
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
            [
                {
                    "name": "test-dags",
                    "classpath": _LOCAL_BUNDLE,
                    "kwargs": {"path": str(TEST_DAGS)},
                },
                {
                    "name": "example-dags",
                    "classpath": _LOCAL_BUNDLE,
                    "kwargs": {"path": str(EXAMPLE_DAGS)},
                },
            ]
        ),
        # The Connection form's Test button (test_connection) is off by default.
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        "AIRFLOW__CORE__PARALLELISM": "4",
    }
)


@pytest.fixture(scope="session")
def airflow_home() -> str:
    """The temporary ``AIRFLOW_HOME`` of this test session."""
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def airflow_db(airflow_home: str) -> Iterator[None]:
    """A fresh Airflow metadata DB (SQLite in the temporary home), made once per session
    and only for the tests that need it (``dag.test()``, ProvidersManager is fine
    without)."""
    from airflow.utils import db

    db.resetdb()
    yield


@pytest.fixture
def nsq_default(nsqd, monkeypatch) -> str:
    """Point the ``nsq_default`` Airflow connection at the test nsqd (env-var URI form)."""
    uri = f"nsq://{nsqd.host}:{nsqd.tcp_port}?http_port={nsqd.http_port}"
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", uri)
    return uri


@pytest.fixture
def nsq_default_tcp_only(nsqd, monkeypatch) -> str:
    """``nsq_default`` without nsqd's HTTP port: sensors must fall back to TCP windows."""
    uri = f"nsq://{nsqd.host}:{nsqd.tcp_port}"
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", uri)
    return uri


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if shutil.which("java") or os.environ.get("JAVA_HOME"):
        return
    skip = pytest.mark.skip(reason="Spark needs Java (install a JDK 17 or set JAVA_HOME)")
    for item in items:
        if "spark" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """local[2] with the nsq data source registered (where PySpark has it); started once
    (~7 s)."""
    # Spark's Python workers run `python3` from PATH unless told otherwise: use ours, which
    # has this package installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tests.spark.pyspark_features import DATA_SOURCE_MISSING

    session = (
        SparkSession.builder.master("local[2]")
        .appName("airflow-provider-nsq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    # py4j logs at INFO from __del__ at interpreter exit, after pytest closed its streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if DATA_SOURCE_MISSING is None:
        from airflow_provider_nsq.spark import register

        register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local Spark Connect server (``tests/spark/connect_server.py``: ``local[2]`` on
    127.0.0.1, ~15 s to start), shared by ``tests/spark`` and the docs' blocks. Its Python
    workers run a Python with this package and its runtime libraries only, no Airflow: what
    docs/spark.md ("Spark Connect") says to install on the server."""
    from tests.spark.connect_server import CONNECT_MISSING, ConnectServer
    from tests.spark.python_envs import EXECUTOR_DISTRIBUTIONS, python_with

    if CONNECT_MISSING is not None:
        pytest.skip(CONNECT_MISSING)
    home = tmp_path_factory.mktemp("spark-connect")
    python = python_with(
        home / "venv", EXECUTOR_DISTRIBUTIONS, with_package=True, check_missing="airflow"
    )
    server = ConnectServer(python, home / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark_connect(spark_connect_server: Any) -> Iterator[Any]:
    """A Spark Connect client session on ``spark_connect_server``, with the nsq data
    source registered."""
    from airflow_provider_nsq.spark import register

    session = spark_connect_server.session()
    register(session)
    yield session
    session.stop()
