"""The version matrix: ``make compat`` runs every session, ``make test`` (CI) those tagged
``ci``: the Airflow floor, the oldest and the newest PySpark.

Each Airflow session makes a clean environment (uv) as that Airflow's users had it:
Airflow and everything it pulls in resolved as of a date after its last patch and before
the next minor (``--exclude-newer``; Airflow's constraint files would be the other way).
Into it goes the provider's built wheel (``make dist``), not the checkout, with the
``messaging`` and ``openlineage`` extras and the test tools; then the Airflow-layer tests (``tests/airflow``)
run from a copy of ``tests/``, so that they import the installed wheel. A test that needs
a newer Airflow skips, naming the version it needs.

The provider's own requirements may be newer than an old Airflow's date (a user who
installs the provider today gets today's common-compat); the floor session pins
common-compat to the provider's declared minimum instead, so both floors are run.

    nox -l                      # the sessions
    nox -t ci                   # what CI adds to the main suite (the floors, the newest)
    nox -t spark                # every PySpark session
    nox -s "airflow(3.2.2)"     # one version
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

import nox
import nox.virtualenv
from packaging.requirements import Requirement

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).resolve().parent
#: The only interpreter the matrix has; pyproject declares newer ones, unchecked.
PYTHON = "3.11"

#: Airflow minor -> (its latest patch, resolve its environment as of this date).
#: pyproject's ``apache-airflow`` requirement must span exactly these (a test checks it).
AIRFLOW_MATRIX: dict[str, tuple[str, str]] = {
    "3.0": ("3.0.6", "2025-09-20"),
    "3.1": ("3.1.8", "2026-04-01"),
    "3.2": ("3.2.2", "2026-07-01"),
    "3.3": ("3.3.2", "2026-11-26"),
}
AIRFLOW_FLOOR = "3.0"
#: The date the provider's own requirements and the test tools resolve as of, in every
#: session (Airflow, its providers and what they pull in keep their Airflow's date).
PROVIDER_DEPS_AS_OF = "2026-11-26"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _minimum(name: str) -> str:
    """The lowest version the provider accepts of ``name`` (its ``>=`` in pyproject)."""
    for req in map(Requirement, _project()["dependencies"]):
        if req.name == name:
            return next(spec.version for spec in req.specifier if spec.operator == ">=")
    raise LookupError(f"pyproject.toml does not require {name}")


def _wheel(session: nox.Session) -> Path:
    """The wheel ``make dist`` built from this checkout's version."""
    sys.path.insert(0, str(ROOT))
    try:
        from airflow_provider_nsq import __version__
    finally:
        sys.path.pop(0)
    wheel = ROOT / "dist" / f"airflow_provider_nsq-{__version__}-py3-none-any.whl"
    if not wheel.is_file():
        session.error(f"{wheel.relative_to(ROOT)} is missing: run `make dist` first")
    return wheel


def _test_tree(session: nox.Session) -> Path:
    """A copy of the tests (and the example DAGs they run) outside the checkout, so that
    ``airflow_provider_nsq`` is imported from the installed wheel, not from the tree."""
    tmp = Path(session.create_tmp())
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")
    for name in ("tests", "example_dags"):
        shutil.rmtree(tmp / name, ignore_errors=True)
        shutil.copytree(ROOT / name, tmp / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", tmp / "pyproject.toml")  # pytest's settings
    return tmp


def _own_packages() -> list[str]:
    """The provider's direct requirements and test tools, Airflow itself excepted."""
    project = _project()
    names = {Requirement(r).name for r in project["dependencies"]}
    names |= {Requirement(r).name for r in project["optional-dependencies"]["test"]}
    return sorted(names - {"apache-airflow"})


def _install(session: nox.Session, *requirements: str, as_of: str) -> None:
    newer = [f"--exclude-newer-package={name}={PROVIDER_DEPS_AS_OF}" for name in _own_packages()]
    session.install(f"--exclude-newer={as_of}", *newer, *requirements)


@nox.session(python=PYTHON)
@nox.parametrize(
    "minor",
    [
        nox.param(minor, id=AIRFLOW_MATRIX[minor][0], tags=["ci"] if minor == AIRFLOW_FLOOR else [])
        for minor in AIRFLOW_MATRIX
    ],
)
def airflow(session: nox.Session, minor: str) -> None:
    """The Airflow-layer tests on one Airflow version, against the installed wheel."""
    version, as_of = AIRFLOW_MATRIX[minor]
    wheel = _wheel(session)
    test_tools = _project()["optional-dependencies"]["test"]
    pins = [f"apache-airflow=={version}"]
    if minor == AIRFLOW_FLOOR:
        compat = "apache-airflow-providers-common-compat"
        pins.append(f"{compat}=={_minimum(compat)}")
    if minor == "3.0":
        # Airflow 3.0 builds the connection form from the hook's wtforms fields only where
        # wtforms can be imported (the FAB provider brings it): as the users who see it.
        pins.append("wtforms")
    _install(session, f"{wheel}[messaging,openlineage]", *pins, *test_tools, as_of=as_of)
    tree = _test_tree(session)
    with session.chdir(tree):
        session.run(
            "python",
            "-m",
            "pytest",
            "tests/airflow",
            "-p",
            "no:cacheprovider",
            "-rs",  # each skip with its reason (the version a feature needs)
            "--durations=5",
            *session.posargs,
            env={
                "NSQ_PROVIDER_WHEEL": str(wheel),
                "NSQ_AIRFLOW_VERSION": version,
                # The end-to-end tests on PostgreSQL only (the main suite runs SQLite too):
                # about two minutes less per version.
                "NSQ_E2E_DATABASES": "postgresql",
                # The CeleryExecutor end-to-end (about two minutes) runs in the main
                # suite, on the pinned Airflow only.
                "NSQ_E2E_CELERY": "0",
            },
        )


# -- PySpark sessions ------------------------------------------------------------------
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


#: What CI runs besides the main suite's PySpark (4.2.0, the stream reader's floor): the
#: oldest supported and the newest.
PYSPARK_CI = {"3.5.9", "4.3.0"}


def _prune_uv_cache(session: nox.Session) -> None:
    """Drop what uv's cache keeps of the install but will not reuse.

    PyPI has no PySpark wheel: uv builds one from the sdist on every install and keeps
    each build, unpacked, beside the last (about 1.6 GB per install), so without this
    every matrix run grows the cache by GBs until the disk is full. ``--ci`` keeps the
    built wheels and drops unpacked sources and downloaded wheels, which download again.
    """
    found, uv, _ = nox.virtualenv.find_uv()  # the uv the sessions install with
    if found:
        session.run(uv, "cache", "prune", "--ci", external=True)


@nox.session(python=PYTHON, tags=["spark"])
@nox.parametrize(
    "pyspark",
    [nox.param(v, id=v, tags=["ci"] if v in PYSPARK_CI else []) for v in PYSPARK_VERSIONS],
)
def spark(session: nox.Session, pyspark: str) -> None:
    """tests/spark on one PySpark, without Airflow."""
    session.install("--no-deps", ".")
    try:
        session.install(*spark_runtime(pyspark), "pytest", "pytest-timeout")
    finally:
        _prune_uv_cache(session)
    session.run("python", "-c", "import pyspark; print('pyspark', pyspark.__version__)")
    # Spark's Python workers run `python3` from PATH: nox puts the session's first.
    session.run("pytest", "-p", "no:cacheprovider", "-rs", "tests/spark", *session.posargs)


#: What the spark_extras session runs: publish_dataframe (what a pyspark/pyspark-client
#: mix breaks first: mapInArrow's Python UDF) and the install check.
SPARK_EXTRAS_TESTS = [
    "tests/spark/test_publish_dataframe.py",
    "tests/spark/test_pyspark_install_mix.py",
]


@nox.session(python=PYTHON, tags=["spark"])
def spark_extras(session: nox.Session) -> None:
    """The Spark extras as a user installs them, ``pip install
    'airflow-provider-nsq[spark,apache-spark]'`` (the built wheel, nothing else pinned:
    no Makefile pins, no date), beside Airflow; then publish_dataframe against the
    embedded broker. About 3 minutes on 2 cores, and about 1 GB of uv cache (PySpark's
    wheel, built from its sdist on the first run).

    Airflow's Spark provider brings pyspark-client, which shares pyspark's folder: this
    session fails if the extras ever resolve two versions of them (docs/spark.md).
    """
    wheel = _wheel(session)
    try:
        session.install(f"{wheel}[spark,apache-spark,test]")
    finally:
        _prune_uv_cache(session)
    # The package's own check first: one version of both, whichever files landed last.
    session.run(
        "python",
        "-c",
        "import airflow_provider_nsq.spark; from importlib.metadata import version as v; "
        "print('pyspark', v('pyspark'), 'pyspark-client', v('pyspark-client'))",
    )
    tree = _test_tree(session)
    with session.chdir(tree):
        session.run(
            "pytest", "-p", "no:cacheprovider", "-rs", *SPARK_EXTRAS_TESTS, *session.posargs
        )
