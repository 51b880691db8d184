"""CONTRIBUTING.md as a new contributor uses it.

- Every path it names exists, and every ``make`` target: its map of the package goes
  stale loudly when modules or test folders move.
- Its set-up and its checks run as written, in a throw-away copy of this checkout made a
  git repository of its own (the files git tracks or would add, as they are on disk):
  ``make install`` (already done for this virtualenv: the copy's ``.venv`` is this one,
  so it installs nothing), ``make hooks``, ``make lint`` and ``pre-commit run
  --all-files``. Then the git hook that ``make hooks`` installed takes a clean commit
  and refuses one that breaks the formatter or an import contract.

No network: every check is a local tool of the virtualenv. About half a minute (mypy
over the whole package in the copy, from the checkout's cache when it has one).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "CONTRIBUTING.md"
PACKAGE = "airflow_provider_nsq"
_BASH = re.compile(r"^```bash\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_MAP = re.compile(r"<!-- package map: begin.*?-->(.*?)<!-- package map: end -->", re.DOTALL)
_TICKED = re.compile(r"`([^`\s]+)`")
_PATH_LIKE = re.compile(r"^[\w.-]+(/[\w.-]*)*$")
_TARGET = re.compile(r"^([a-zA-Z][\w-]*):(?!=)", re.MULTILINE)
_MAKE = re.compile(r"\bmake ([a-z][\w-]*)")
# What a path is named by: a file or folder of the repository, or of the package.
_ROOTS = ("airflow_provider_nsq/", "tests/", "benchmarks/", "scripts/", "docs/", ".github/")


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The text of ``## title`` up to the next ``## ``."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", _page(), re.M | re.S)
    assert found, f"CONTRIBUTING.md has no '## {title}' section"
    return found.group(1)


def _exists(name: str) -> bool:
    name = name.rstrip(",")
    return (ROOT / name).exists() or (ROOT / PACKAGE / name).exists()


def _named_paths() -> set[str]:
    """The paths the page names: in backticks anywhere, and in the left column of the
    package map's pictures (``client/producer.py    NSQProducer: ...``)."""
    page = _page()
    names = {
        name
        for name in _TICKED.findall(page)
        if _PATH_LIKE.match(name)
        and ("/" in name or name.endswith((".py", ".md", ".toml")))
        and not name.startswith(".venv/")  # made by `make install`
    }
    package_map = _MAP.search(page)
    assert package_map, "CONTRIBUTING.md has no package map between its begin/end comments"
    for block in _BLOCK.findall(package_map.group(1)):
        for line in block.splitlines():
            left = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            names |= {
                word.rstrip(",")
                for word in left.split()
                if word.rstrip(",").endswith(("/", ".py")) and _PATH_LIKE.match(word.rstrip(","))
            }
    return names


def test_every_path_it_names_exists() -> None:
    names = _named_paths()
    assert {f"{PACKAGE}/operators/", "tests/conformance/transcripts/"} <= names | {
        n.rstrip("/") + "/" for n in names
    }
    missing = sorted(name for name in names if not _exists(name))
    assert not missing, (
        f"CONTRIBUTING.md names paths that do not exist (refresh its package map): {missing}"
    )


def test_every_make_target_it_names_exists() -> None:
    targets = set(_TARGET.findall((ROOT / "Makefile").read_text()))
    named = set(_MAKE.findall(_page()))
    assert {"install", "hooks", "lint", "bench-check"} <= named
    assert not named - targets, f"not Makefile targets: {sorted(named - targets)}"


def test_the_set_up_is_two_commands_and_the_checks_are_the_hooks() -> None:
    (set_up,) = _BASH.findall(_section("Set-up"))
    commands = [line.split("#")[0].strip() for line in set_up.splitlines()]
    assert [c for c in commands if c] == ["make install", "make hooks"]
    checks = _BASH.findall(_section("The checks before a commit"))[0]
    assert "make lint" in checks and "pre-commit run --all-files" in checks


# -- The commands, run ----------------------------------------------------------------


@dataclass(frozen=True)
class Clone:
    """A throw-away copy of the checkout, a git repository of its own."""

    path: Path
    env: dict[str, str]

    def run(self, *args: str, script: str | None = None) -> subprocess.CompletedProcess[str]:
        command = ["bash", "-euo", "pipefail", "-c", script] if script else list(args)
        return subprocess.run(
            command,
            cwd=self.path,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
        )

    def commits(self) -> int:
        return int(self.run("git", "rev-list", "--count", "HEAD").stdout)

    @contextmanager
    def probe(self, name: str, text: str) -> Iterator[None]:
        """``name`` written for the time of the block, then gone from disk and index (the
        whole-package checks, mypy and the contracts, read every file on disk)."""
        (self.path / name).write_text(text)
        try:
            yield
        finally:
            self.run("git", "rm", "-q", "--cached", "--ignore-unmatch", "--", name)
            (self.path / name).unlink()

    def commit(self, *files: str) -> subprocess.CompletedProcess[str]:
        added = self.run("git", "add", "--", *files)
        assert added.returncode == 0, added.stderr
        return self.run("git", "commit", "-q", "-m", "Probe the pre-commit hook")


def _checkout_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _git_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.update(
        {
            # No user or system git settings (a core.hooksPath would stop `make hooks`).
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "Contributor",
            "GIT_AUTHOR_EMAIL": "contributor@example.com",
            "GIT_COMMITTER_NAME": "Contributor",
            "GIT_COMMITTER_EMAIL": "contributor@example.com",
            "PRE_COMMIT_HOME": str(tmp / "pre-commit-home"),
            "PRE_COMMIT_COLOR": "never",
        }
    )
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Clone:
    venv = Path(sys.prefix)
    stamp = venv / ".installed-stamp"
    if not stamp.is_file():
        pytest.skip(f"runs in the virtualenv `make install` made ({venv} has no stamp)")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    tmp = tmp_path_factory.mktemp("contributor")
    path = tmp / "airflow-provider-nsq"
    for name in _checkout_files():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # a file another test just removed
            shutil.copy2(ROOT / name, path / name, follow_symlinks=False)
    if (ROOT / ".mypy_cache").is_dir():  # mypy checks the copy's files against it
        shutil.copytree(ROOT / ".mypy_cache", path / ".mypy_cache", symlinks=True)
    env = _git_env(tmp)
    # The copy's package, as a clone's editable install would give it.
    env["PYTHONPATH"] = str(path)
    made = Clone(path, env)
    for step in (("git", "init", "-q"), ("git", "add", "-A"), ("git", "commit", "-q", "-m", "A")):
        done = made.run(*step)
        assert done.returncode == 0, done.stderr
    # `.venv` is this virtualenv, made by `make install` from a pyproject.toml no newer
    # than its stamp: `make install` finds it up to date and installs nothing.
    (path / ".venv").symlink_to(venv, target_is_directory=True)
    with (path / ".git" / "info" / "exclude").open("a") as exclude:
        exclude.write(".venv\n")
    before = stamp.stat().st_mtime - 60
    os.utime(path / "pyproject.toml", (before, before))
    assert made.run("make", "-q", "install").returncode == 0, "make install would install"
    return made


@pytest.fixture(scope="module")
def set_up(clone: Clone) -> subprocess.CompletedProcess[str]:
    (script,) = _BASH.findall(_section("Set-up"))
    return clone.run(script=script)


@pytest.mark.slow
def test_the_set_up_runs_as_written_and_installs_the_hook(
    clone: Clone, set_up: subprocess.CompletedProcess[str]
) -> None:
    assert set_up.returncode == 0, set_up.stdout + set_up.stderr
    hook = clone.path / ".git" / "hooks" / "pre-commit"
    assert hook.is_file() and "pre-commit" in hook.read_text()


@pytest.mark.slow
def test_the_checks_run_as_written_and_pass(
    clone: Clone, set_up: subprocess.CompletedProcess[str]
) -> None:
    script = _BASH.findall(_section("The checks before a commit"))[0]
    done = clone.run(script=script)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    for check in ("ruff (lint)", "ruff (format)", "mypy", "import contracts", "GitHub workflows"):
        assert re.search(rf"^{re.escape(check)}.*Passed$", output, re.M), output[-6000:]


@pytest.mark.slow
def test_the_hook_takes_a_clean_commit(
    clone: Clone, set_up: subprocess.CompletedProcess[str]
) -> None:
    assert set_up.returncode == 0, set_up.stdout + set_up.stderr
    probe = clone.path / "tests" / "hook_probe_clean.py"
    probe.write_text('"""A clean file."""\n\nVALUE = (1, 2)\n')
    before = clone.commits()
    done = clone.commit("tests/hook_probe_clean.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert clone.commits() == before + 1


@pytest.mark.slow
def test_the_hook_refuses_a_commit_that_breaks_the_format(
    clone: Clone, set_up: subprocess.CompletedProcess[str]
) -> None:
    assert set_up.returncode == 0, set_up.stdout + set_up.stderr
    name = "tests/hook_probe_format.py"
    with clone.probe(name, '"""Not formatted."""\n\nVALUE=( 1,2 )\n'):
        before = clone.commits()
        done = clone.commit(name)
        output = done.stdout + done.stderr
        assert done.returncode != 0, output
        assert re.search(r"^ruff \(format\).*Failed$", output, re.M), output
        assert clone.commits() == before


@pytest.mark.slow
def test_the_hook_refuses_a_commit_that_breaks_an_import_contract(
    clone: Clone, set_up: subprocess.CompletedProcess[str]
) -> None:
    assert set_up.returncode == 0, set_up.stdout + set_up.stderr
    # protocol/ is the bottom layer: importing the hook from it breaks the layers (and
    # brings Airflow into it). Lint-clean and formatted: only the contracts object.
    name = f"{PACKAGE}/protocol/hook_probe_upward.py"
    upward = '"""Imports upward."""\n\nimport airflow_provider_nsq.hooks.nsq  # noqa: F401\n'
    with clone.probe(name, upward):
        before = clone.commits()
        done = clone.commit(name)
        output = done.stdout + done.stderr
        assert done.returncode != 0, output
        assert re.search(r"^import contracts \(lint-imports\).*Failed$", output, re.M), output
        assert re.search(r"^ruff \(format\).*Passed$", output, re.M), output
        assert "BROKEN" in output, output
        assert clone.commits() == before
