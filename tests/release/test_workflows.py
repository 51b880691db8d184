"""The GitHub workflows run nothing that no local run ran: each step that runs project code
is a make target that ``.ci/run`` (``make test``) or ``make compat`` runs too; CI covers
every Python of the matrix; the release publishes what ``make dist`` checked, from a tag
that names the package's version, with trusted publishing. (actionlint checks the
workflows' syntax and expressions inside ``make lint``.)"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
#: A step that is not project code: the system packages, installed as .ci/run does.
SYSTEM_PACKAGES = "sudo bash .ci/system-packages"
_RULE = re.compile(r"^([a-zA-Z][\w-]*):(?!=)([^\n]*)$", re.MULTILINE)


def _workflow(name: str) -> dict[str, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def _steps() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path.name, job_name, step)
        for path in sorted(WORKFLOWS.glob("*.yml"))
        for job_name, job in _workflow(path.name)["jobs"].items()
        for step in job.get("steps", [])
    ]


def _prerequisites() -> dict[str, list[str]]:
    """Each Makefile target's prerequisites (variables and the venv stamp left out)."""
    rules = _RULE.findall((ROOT / "Makefile").read_text())
    return {target: [p for p in deps.split() if not p.startswith("$")] for target, deps in rules}


def _closure(targets: list[str], rules: dict[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    while targets:
        target = targets.pop()
        if target not in seen:
            seen.add(target)
            targets.extend(rules.get(target, []))
    return seen


def test_ci_run_runs_the_system_packages_then_make_test() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert "bash .ci/system-packages" in lines
    assert lines[-1] == "make test"


def test_every_step_is_a_make_target_that_a_local_run_runs_too() -> None:
    rules = _prerequisites()
    run_here = _closure(["test", "compat"], rules)
    assert {"lint", "docs", "pytest", "matrix-ci", "dist", "compat"} <= run_here
    commands = []
    for workflow, job, step in _steps():
        if "run" not in step:
            continue
        command = step["run"].strip()
        commands.append(command)
        if command == SYSTEM_PACKAGES:
            continue
        found = re.fullmatch(r"make ([\w-]+)", command)
        assert found, f"{workflow} job {job}: {command!r} is not one make target"
        assert found.group(1) in run_here, f"{workflow} job {job}: make {found.group(1)}"
    # CI runs what `make test` runs: the checks, the docs, the suite, the floors.
    ci = {step.get("run", "").strip() for _, _, step in _steps()}
    assert {"make lint", "make docs", "make pytest", "make matrix-ci"} <= ci
    assert "make compat" in commands and "make dist" in commands


def _matrix_pythons() -> list[str]:
    """noxfile.py's ``PYTHONS``, read without running the noxfile (it registers sessions)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["PYTHONS"]:
            return ast.literal_eval(node.value)
    raise LookupError("noxfile.py has no PYTHONS")


def test_ci_runs_every_python_of_the_matrix() -> None:
    first, *newer = _matrix_pythons()
    text = (WORKFLOWS / "ci.yml").read_text()
    jobs = _workflow("ci.yml")["jobs"]
    assert jobs["newer-pythons"]["strategy"]["matrix"]["python"] == newer
    assert f'python-version: "{first}"' in text
    assert "NOX_ARGS: --python ${{ matrix.python }}" in text


def test_the_release_publishes_what_make_dist_checked_with_trusted_publishing() -> None:
    release = _workflow("release.yml")
    assert release[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as True
    jobs = release["jobs"]
    assert jobs["tests"]["uses"] == "./.github/workflows/ci.yml"
    assert jobs["build"]["needs"] == "tests" and jobs["publish"]["needs"] == "build"
    build = [s.get("run") for s in jobs["build"]["steps"] if "run" in s]
    assert build == ["make dist"]
    (with_tag,) = [s for s in jobs["build"]["steps"] if s.get("run") == "make dist"]
    assert with_tag["env"]["RELEASE_TAG"] == "${{ github.ref_name }}"
    uses = [s.get("uses", "") for s in jobs["publish"]["steps"]]
    assert any(u.startswith("pypa/gh-action-pypi-publish@") for u in uses)
    assert not any("run" in s for s in jobs["publish"]["steps"])
    # Only the publishing job may ask for the OIDC token; no stored password or token.
    writers = [name for name, job in jobs.items() if "id-token" in job.get("permissions", {})]
    assert writers == ["publish"] and jobs["publish"]["permissions"]["id-token"] == "write"
    assert release["permissions"] == {"contents": "read"}
    assert "secrets." not in (WORKFLOWS / "release.yml").read_text()


def test_make_dist_hands_the_release_tag_to_the_check() -> None:
    done = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed-stamp", "dist", "RELEASE_TAG=v9.9.9"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert 'scripts/check_dist.py dist --tag "v9.9.9"' in done.stdout


def test_a_tag_must_name_the_package_version() -> None:
    spec = importlib.util.spec_from_file_location("check_dist", ROOT / "scripts" / "check_dist.py")
    check_dist = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_dist)
    assert check_dist.check_tag("v0.2.0", "0.2.0") == []
    (problem,) = check_dist.check_tag("v0.2.1", "0.2.0")
    assert "'v0.2.1'" in problem and "0.2.0" in problem
    assert check_dist.check_tag("0.2.0", "0.2.0") != []  # the "v" is part of the name
