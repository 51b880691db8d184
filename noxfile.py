"""Version matrix: each session installs the project into a clean environment (uv) with
one version of what it is checked against, and runs the tests that apply there.

    nox -l                 # the sessions
    nox -t spark           # every PySpark session
    nox -s "spark(pyspark='4.0.5')"
"""

from __future__ import annotations

from pathlib import Path

import nox
import tomllib

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True

PYTHON = "3.11"  # the only interpreter checked here (docs/compatibility.md)
ROOT = Path(__file__).resolve().parent


# -- PySpark sessions
# Each PySpark session builds what a Spark runtime (driver and executors) holds: no
# Airflow, the project installed with --no-deps, its runtime libraries (the project's
# dependencies other than Airflow, and the `spark` extra with PySpark pinned). That is
# the install docs/spark.md ("Running on a cluster") tells users to make. It runs
# tests/spark: what needs a newer PySpark (or Airflow) skips with a reason naming it.

#: The latest 3.5 (publish_dataframe only), the writer's floor, the stream reader's
#: floor, and the newest release.
PYSPARK_VERSIONS = ["3.5.9", "4.0.5", "4.2.0", "4.3.0"]


def spark_runtime(pyspark: str) -> list[str]:
    """The project's requirements for a Spark runtime, with ``pyspark`` pinned."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = [r for r in project["dependencies"] if not r.startswith("apache-airflow")]
    spark = project["optional-dependencies"]["spark"]
    needed += [r for r in spark if not r.startswith("pyspark")]
    return [f"pyspark=={pyspark}", *needed]


@nox.session(python=PYTHON, tags=["spark"])
@nox.parametrize("pyspark", PYSPARK_VERSIONS)
def spark(session: nox.Session, pyspark: str) -> None:
    """tests/spark on one PySpark, without Airflow."""
    session.install("--no-deps", ".")
    session.install(*spark_runtime(pyspark), "pytest", "pytest-timeout")
    session.run("python", "-c", "import pyspark; print('pyspark', pyspark.__version__)")
    # Spark's Python workers run `python3` from PATH: nox puts the session's first.
    session.run("pytest", "-p", "no:cacheprovider", "-rs", "tests/spark", *session.posargs)
