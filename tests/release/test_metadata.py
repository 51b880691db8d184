"""What pyproject.toml declares is what the version matrix (noxfile.py) runs, in names
PyPI accepts. The artifacts themselves are checked by ``make dist`` (twine, license files)
and installed by the matrix."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def noxfile():
    pytest.importorskip("nox", reason="nox comes with the dev extra (make install)")
    spec = importlib.util.spec_from_file_location("noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _requirement(name: str) -> Requirement:
    (req,) = (r for r in map(Requirement, PROJECT["dependencies"]) if r.name == name)
    return req


def test_the_airflow_range_is_exactly_the_matrix(noxfile):
    patches = sorted(Version(patch) for patch, _ in noxfile.AIRFLOW_MATRIX.values())
    newest = patches[-1]
    expected = SpecifierSet(f">={patches[0]},<{newest.major}.{newest.minor + 1}")
    assert _requirement("apache-airflow").specifier == expected
    floor_patch = noxfile.AIRFLOW_MATRIX[noxfile.AIRFLOW_FLOOR][0]
    assert Version(floor_patch) == patches[0]
    # one session per minor, each at a patch of that minor
    for minor, (patch, as_of) in noxfile.AIRFLOW_MATRIX.items():
        assert patch.startswith(minor + "."), (minor, patch)
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", as_of), as_of


def test_common_compat_has_a_lower_bound():
    (spec,) = _requirement("apache-airflow-providers-common-compat").specifier
    assert spec.operator == ">=" and Version(spec.version) >= Version("1.21.0")


def test_classifiers_are_known_to_pypi_and_name_exactly_the_pythons_the_matrix_runs(noxfile):
    trove = pytest.importorskip("trove_classifiers", reason="comes with the dev extra")
    classifiers = PROJECT["classifiers"]
    assert not [c for c in classifiers if c not in trove.classifiers]
    assert "Framework :: Apache Airflow :: Provider" in classifiers
    pythons = [
        c.rsplit(" :: ", 1)[1]
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert sorted(pythons, key=Version) == sorted(noxfile.PYTHONS, key=Version)
    # requires-python starts at the oldest the matrix runs (and admits the others)
    requires = SpecifierSet(PROJECT["requires-python"])
    assert all(Version(p) in requires for p in pythons)
    assert Version(noxfile.PYTHON) == min(map(Version, pythons))
    assert Version(f"{noxfile.PYTHON}.0") in requires
    older = Version(noxfile.PYTHON).release
    assert Version(f"{older[0]}.{older[1] - 1}") not in requires


def _sessions() -> list[dict]:
    """``nox -l --json``: every session of the matrix, as nox builds them."""
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "--list", "--json", "-f", str(ROOT / "noxfile.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(listed.stdout)


def test_every_python_runs_the_newest_airflow_and_pyspark_and_the_library(noxfile):
    sessions = _sessions()
    newest_airflow = {"minor": noxfile.AIRFLOW_NEWEST}
    newest_pyspark = {"pyspark": max(noxfile.PYSPARK_VERSIONS, key=Version)}
    for python in noxfile.PYTHONS:
        on_it = [(s["name"], s["call_spec"]) for s in sessions if s["python"] == python]
        assert ("airflow", newest_airflow) in on_it, python
        assert ("spark", newest_pyspark) in on_it, python
        if python != noxfile.PYTHON:  # the main suite runs the library's tests on it
            assert ("library", {}) in on_it, python
    # what CI runs stays on the main suite's Python
    assert {s["python"] for s in sessions if "ci" in s["tags"]} == {noxfile.PYTHON}
    assert {s["python"] for s in sessions} == set(noxfile.PYTHONS)


def test_license_files_are_declared_and_present():
    assert PROJECT["license"] == "Apache-2.0"
    for name in PROJECT["license-files"]:
        assert (ROOT / name).is_file(), name
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "END OF TERMS AND CONDITIONS" in (ROOT / "LICENSE").read_text()


def test_the_main_environment_pins_the_newest_airflow_of_the_matrix(noxfile):
    # `make test` runs the whole suite there and the floor session beside it.
    pinned = re.search(r'"apache-airflow==([\d.]+)"', (ROOT / "Makefile").read_text())
    assert pinned, "the Makefile pins no apache-airflow version"
    newest = max((patch for patch, _ in noxfile.AIRFLOW_MATRIX.values()), key=Version)
    assert pinned.group(1) == newest


def test_the_docs_name_the_pythons_the_matrix_runs(noxfile):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    versions = re.search(r"^Airflow .*, Python (3\.\d+) to (3\.\d+)$", readme, re.MULTILINE)
    assert versions, "README.md has no versions line ending 'Python 3.X to 3.Y'"
    assert list(versions.groups()) == [
        min(noxfile.PYTHONS, key=Version),
        max(noxfile.PYTHONS, key=Version),
    ]

    page = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    section = page[page.index("## Python versions") : page.index("## Running the matrix")]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if re.match(r"\| 3\.\d+", line)
    ]
    checked = {row[0].split()[0]: row[2] for row in rows if not row[2].startswith("no")}
    assert sorted(checked, key=Version) == sorted(noxfile.PYTHONS, key=Version)
    for python in noxfile.NEWER_PYTHONS:  # each names its sessions, as `nox -l` does
        assert f"python{python})" in checked[python] and f"library-{python}" in checked[python]
    declared = {row[0].split()[0] for row in rows if "classifier," in row[1]}
    assert declared == set(noxfile.PYTHONS)


def test_the_pytest_plugin_loads_only_where_a_conftest_asks_for_it():
    # Registered through a pytest11 entry point, the fixtures (nsqd, nsq_topic ...) would
    # appear in every pytest run of every project that installs the provider. The suite
    # loads them as docs/testing.md tells users to.
    assert "pytest11" not in PROJECT.get("entry-points", {})
    line = 'pytest_plugins = ["airflow_provider_nsq.testing.pytest_plugin"]'
    assert line in (ROOT / "tests" / "conftest.py").read_text()
    assert line in (ROOT / "docs" / "testing.md").read_text()


def test_the_sessions_run_test_paths_that_exist(noxfile):
    # A moved test folder must not silently drop out of the version matrix.
    for path in [*noxfile.AIRFLOW_TESTS, *noxfile.LIBRARY_TESTS, *noxfile.SPARK_EXTRAS_TESTS]:
        assert (ROOT / path).exists(), f"noxfile.py runs {path}, which does not exist"
