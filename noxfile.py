"""The version matrix: ``make compat`` runs every session, ``make test`` (CI) those tagged
``ci``: the Airflow floor, the oldest and the newest PySpark, all on Python 3.11.

Python 3.11 runs every session; 3.12 and 3.13 run the newest Airflow, the newest PySpark
and the library's own tests (protocol, client, embedded nsqd and nsqlookupd) against the
wheel. The interpreters are found on PATH (``python3.12``) or, where pyenv installed them
without making them active, in pyenv's versions; a missing one fails its sessions, and
the noxfile says how to get it when it loads.

Each Airflow session makes a clean environment (uv) as that Airflow's users had it:
Airflow and everything it pulls in resolved as of a date after its last patch and before
the next minor (``--exclude-newer``; Airflow's constraint files would be the other way).
Into it goes the provider's built wheel (``make dist``), not the checkout, with the
``messaging`` and ``openlineage`` extras and the test tools; then the Airflow-layer tests
(``AIRFLOW_TESTS``: hooks, operators, sensors, triggers ... and the real-Airflow runs) run
from a copy of ``tests/``, so that they import the installed wheel. A test that needs
a newer Airflow skips, naming the version it needs.

The provider's own requirements may be newer than an old Airflow's date (a user who
installs the provider today gets today's common-compat); the floor session pins
common-compat to the provider's declared minimum instead, so both floors are run.

    nox -l                      # the sessions
    nox -t ci                   # what CI adds to the main suite (the floors, the newest)
    nox -t spark                # every PySpark session
    nox -s "airflow(3.2.2)"     # one version
    nox -p 3.13                 # every session on one Python
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nox
import nox.virtualenv
from packaging.requirements import Requirement
from packaging.version import Version

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
# The Pythons this machine has, not ones nox would download (uv's builds): a missing one
# fails, saying so, rather than being run on an interpreter nobody chose.
nox.options.download_python = "never"

ROOT = Path(__file__).resolve().parent
#: The Pythons the matrix runs, the classifiers in pyproject.toml (a test checks it). The
#: first runs every session and the main suite; the others the sessions named below.
PYTHONS = ["3.11", "3.12", "3.13"]
PYTHON = PYTHONS[0]
NEWER_PYTHONS = PYTHONS[1:]


def _runs(executable: Path) -> bool:
    """Whether ``executable`` starts (a pyenv shim of a version that is not active exits 127)."""
    try:
        return (
            subprocess.run([executable, "-c", ""], capture_output=True, timeout=30).returncode == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _on_path(minor: str) -> Path | None:
    """The first ``pythonX.Y`` on PATH that starts."""
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder, f"python{minor}")
        if folder and candidate.is_file() and _runs(candidate):
            return candidate
    return None


def _pyenv_versions() -> Path:
    """Where pyenv installs its Pythons."""
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"


def _in_pyenv(minor: str) -> Path | None:
    """pyenv's newest CPython ``X.Y.Z`` of ``minor``, active or not."""
    found = [
        folder
        for folder in _pyenv_versions().glob(f"{minor}.*")
        if re.fullmatch(rf"{re.escape(minor)}\.\d+", folder.name)
        and (folder / "bin" / f"python{minor}").is_file()
    ]
    if not found:
        return None
    return max(found, key=lambda folder: Version(folder.name)) / "bin" / f"python{minor}"


def _find_interpreters() -> None:
    """Let nox find each of ``PYTHONS``: PATH's first, else pyenv's (its folder goes at the
    end of PATH: pyenv's shims start only the versions made active, ``pyenv global``, and
    nox skips the others); name the missing ones and how to get them."""
    for minor in PYTHONS:
        if _on_path(minor):
            continue
        if pyenv := _in_pyenv(minor):
            os.environ["PATH"] = os.pathsep.join([os.environ.get("PATH", ""), str(pyenv.parent)])
            continue
        print(
            f"noxfile.py: no Python {minor} here (no python{minor} on PATH that starts, none "
            f"in {_pyenv_versions()}/{minor}.*): its sessions will fail. Install it "
            f"(`pyenv install {minor}`, or `uv python install {minor}`), or let nox "
            f"download one: `nox --download-python auto`.",
            file=sys.stderr,
        )


_find_interpreters()

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
    """A copy of the tests (the example DAGs they run, the docs some of them read) outside
    the checkout, so that ``airflow_provider_nsq`` is imported from the installed wheel,
    not from the tree. ``tests/conftest.py`` loads the wheel's pytest plugin."""
    tmp = Path(session.create_tmp())
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")
    for name in ("tests", "example_dags", "docs"):
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


#: The Airflow-layer tests, which each Airflow session runs: the folders of the Airflow
#: classes, the provider-level modules' tests, the real-Airflow runs (e2e) and the
#: installed-wheel check.
AIRFLOW_TESTS = [
    "tests/hooks",
    "tests/operators",
    "tests/sensors",
    "tests/triggers",
    "tests/queues",
    "tests/notifications",
    "tests/transfers",
    "tests/plugins",
    "tests/e2e",
    "tests/example_dags",
    "tests/test_assets_and_lineage.py",
    "tests/test_links.py",
    "tests/test_metrics.py",
    "tests/test_provider_info.py",
    "tests/release/test_installed_provider.py",
]

#: The newest Airflow, the one the newer Pythons run.
AIRFLOW_NEWEST = max(AIRFLOW_MATRIX, key=Version)


def _python_id(version: str, python: str) -> str:
    """A session's id: the version it runs, and the Python where that is not 3.11."""
    return version if python == PYTHON else f"{version}, python{python}"


@nox.session
@nox.parametrize(
    ("python", "minor"),
    [
        nox.param(
            PYTHON,
            minor,
            id=_python_id(AIRFLOW_MATRIX[minor][0], PYTHON),
            tags=["ci"] if minor == AIRFLOW_FLOOR else [],
        )
        for minor in AIRFLOW_MATRIX
    ]
    + [
        nox.param(python, AIRFLOW_NEWEST, id=_python_id(AIRFLOW_MATRIX[AIRFLOW_NEWEST][0], python))
        for python in NEWER_PYTHONS
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
            *AIRFLOW_TESTS,
            "-p",
            "no:cacheprovider",
            "-rs",  # each skip with its reason (the version a feature needs)
            "--durations=5",
            # Several test files at once, as `make test` runs the main suite: they mostly
            # wait on sockets, daemons and Airflow (8 min on one worker, see Makefile).
            "-n",
            os.environ.get("PYTEST_WORKERS", "3"),
            "--dist",
            "loadfile",
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


def _libraries() -> list[str]:
    """The project's requirements other than Airflow: what its client and broker need."""
    return [r for r in _project()["dependencies"] if not r.startswith("apache-airflow")]


def spark_runtime(pyspark: str) -> list[str]:
    """The project's requirements for a Spark runtime, with ``pyspark`` pinned."""
    needed = _libraries()
    spark = _project()["optional-dependencies"]["spark"]
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


@nox.session(tags=["spark"])
@nox.parametrize(
    ("python", "pyspark"),
    [nox.param(PYTHON, v, id=v, tags=["ci"] if v in PYSPARK_CI else []) for v in PYSPARK_VERSIONS]
    + [
        nox.param(python, PYSPARK_VERSIONS[-1], id=_python_id(PYSPARK_VERSIONS[-1], python))
        for python in NEWER_PYTHONS
    ],
)
def spark(session: nox.Session, pyspark: str) -> None:
    """tests/spark on one PySpark, without Airflow."""
    # The wheel `make dist` built, not the tree: no build in the checkout, which may run
    # beside the main suite (`make test`).
    session.install("--no-deps", str(_wheel(session)))
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


# -- The library on the newer Pythons ----------------------------------------------------

#: The library's own tests: the wire protocol, the client, the embedded nsqd and
#: nsqlookupd (tests/testing), and the replays of real daemons' recordings against all
#: of them. On 3.11 the main suite runs them; the Airflow-layer tests (the triggers
#: among them) and the Spark tests have their own sessions.
LIBRARY_TESTS = ["tests/protocol", "tests/client", "tests/testing", "tests/conformance"]


@nox.session(python=NEWER_PYTHONS)
def library(session: nox.Session) -> None:
    """The protocol, client and embedded-broker tests on one Python, against the wheel
    installed without Airflow (none of them needs it). About 4 min on 2 cores."""
    wheel = _wheel(session)
    session.install("--no-deps", str(wheel))
    _install(
        session,
        *_libraries(),
        *_project()["optional-dependencies"]["test"],
        as_of=PROVIDER_DEPS_AS_OF,
    )
    session.run("python", "-VV")
    tree = _test_tree(session)
    with session.chdir(tree):
        session.run(
            "python",
            "-m",
            "pytest",
            *LIBRARY_TESTS,
            "-p",
            "no:cacheprovider",
            "-rs",
            "--durations=5",
            *session.posargs,
        )
