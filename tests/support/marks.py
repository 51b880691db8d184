"""pytest marks of the Airflow-layer tests: a feature of a newer Airflow
(:func:`needs_airflow`; the version matrix runs these tests on every supported Airflow),
and :data:`unraisable_is_an_error` for the modules that run triggers."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from packaging.version import Version

#: The Airflow these tests run on (read without importing Airflow).
AIRFLOW_VERSION = Version(version("apache-airflow"))


#: For the modules that run triggers: Python's report of what a closing generator could
#: not do ("async generator ignored GeneratorExit") fails the test instead of a log line.
unraisable_is_an_error = pytest.mark.filterwarnings(
    "error::pytest.PytestUnraisableExceptionWarning"
)


def needs_airflow(minimum: str, what: str) -> pytest.MarkDecorator:
    """Skip on an Airflow older than ``minimum``, saying which version ``what`` needs."""
    return pytest.mark.skipif(
        Version(minimum) > AIRFLOW_VERSION,
        reason=f"{what} needs Airflow >= {minimum}; this is Airflow {AIRFLOW_VERSION}",
    )
