"""What pyproject.toml declares is what the version matrix (noxfile.py) runs, in names
PyPI accepts. The artifacts themselves are checked by ``make dist`` (twine, license files)
and installed by the matrix."""

from __future__ import annotations

import importlib.util
import re
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


def test_classifiers_are_known_to_pypi_and_name_the_declared_pythons():
    trove = pytest.importorskip("trove_classifiers", reason="comes with the dev extra")
    classifiers = PROJECT["classifiers"]
    assert not [c for c in classifiers if c not in trove.classifiers]
    assert "Framework :: Apache Airflow :: Provider" in classifiers
    pythons = [
        Version(c.rsplit(" :: ", 1)[1])
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    requires = SpecifierSet(PROJECT["requires-python"])
    assert pythons and all(p in requires for p in pythons)
    assert min(pythons) == Version("3.11")  # the oldest declared is the one the matrix runs


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
