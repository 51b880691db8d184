"""The extras a user installs: none repeats a core dependency (``[snappy]`` is an empty
alias), and the Spark ones cannot mix pyspark and pyspark-client versions (the two
install into one ``pyspark/`` folder)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[Requirement]] = {
    name: [Requirement(r) for r in reqs] for name, reqs in PROJECT["optional-dependencies"].items()
}


def test_no_extra_repeats_a_core_dependency() -> None:
    core = {Requirement(r).name for r in PROJECT["dependencies"]}
    repeated = {name: [r.name for r in reqs if r.name in core] for name, reqs in EXTRAS.items()}
    assert {name: found for name, found in repeated.items() if found} == {}


def test_the_snappy_extra_is_kept_as_an_empty_alias() -> None:
    assert "python-snappy" in {Requirement(r).name for r in PROJECT["dependencies"]}
    assert EXTRAS["snappy"] == []


def _pin(reqs: list[Requirement], name: str) -> str:
    (req,) = (r for r in reqs if r.name == name)
    (spec,) = req.specifier
    assert spec.operator == "==", req
    return spec.version


def test_the_apache_spark_extra_pins_pyspark_and_pyspark_client_to_one_version() -> None:
    reqs = EXTRAS["apache-spark"]
    assert _pin(reqs, "pyspark") == _pin(reqs, "pyspark-client")
    # the spark extra's range admits that version (both extras install together)
    (spark,) = (r for r in EXTRAS["spark"] if r.name == "pyspark")
    assert spark.specifier.contains(_pin(reqs, "pyspark"))
