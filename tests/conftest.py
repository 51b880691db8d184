"""Test-wide setup: a private Airflow home, configured before anything imports Airflow.

Importing Airflow with no ``AIRFLOW_HOME`` creates ``~/airflow``; a developer's real
``AIRFLOW_HOME`` must never be touched either. So this file points Airflow at a fresh
temporary directory (always, whatever the environment says), turns the example DAGs
off and registers two DAG bundles for ``dag.test()``: ``tests/dags`` (the dags folder)
and the repository's ``example_dags``.

It imports nothing from Airflow itself: tests that never touch Airflow stay fast. The
metadata database is created only when a test asks for the ``airflow_db`` fixture.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEST_DAGS = ROOT / "tests" / "dags"
EXAMPLE_DAGS = ROOT / "example_dags"

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
