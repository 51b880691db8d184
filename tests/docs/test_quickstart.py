"""README.md's quick start runs as written, from nothing: its shell blocks, in page order,
in one bash process, as a first user would paste them. Only the servers' ports (free ones
instead of nsqd's 4150/4151, which a real nsqd may hold) and the scratch folder (a
temporary one instead of /tmp/nsq-quickstart) are changed.

It creates a virtualenv and installs the provider from this checkout with Airflow
(``pip``, so it needs the package index, and pip's cache makes it quick), migrates a
SQLite metadata database, starts the embedded nsqd, writes the DAG into the DAG folder
and runs ``airflow dags test``: a minute or two. In the same virtualenv, the quick
start's install, a second run with no new order ends as the README says (the sensor's
one-minute timeout), and a DAG folder of every example DAG imports. Neither run logs
Airflow's warning about a secret too short to mask (the quick start's connection is in
the JSON form). The UI step's ``airflow standalone`` and what the UI shows are marked
for tests/e2e/test_connection_form_ui.py, which checks them in a browser.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.dag_parsing import parse_dag_folders

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXAMPLE_DAGS = ROOT / "example_dags"
#: What the README says a second run with no new order ends with.
_SECOND_RUN = re.compile(
    r"Run it again with no new order.*?the task fails with `([^`]*)`", re.DOTALL
)
_SECTION = re.compile(r"^## Quick start\n(.*?)(?=^## )", re.MULTILINE | re.DOTALL)
#: Marks a block of the quick start that this test leaves to the browser test: the UI
#: step's ``airflow standalone`` (it serves until Ctrl-C) and what the UI then shows.
IN_A_BROWSER = "<!-- checked in a browser: tests/e2e/test_connection_form_ui.py -->"
_BLOCK = re.compile(
    rf"(?P<marker>^{re.escape(IN_A_BROWSER)}\n)?^```(?P<kind>bash|text)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
#: What Airflow's secret masker logs about a text value shorter than 5 characters (the
#: quick start's connection keeps http_port a number, in the JSON form, so it never does).
_SHORT_SECRET = "Skipping masking for a secret as it's too short"


def quick_start_blocks(*, in_a_browser: bool = False) -> tuple[list[str], list[str]]:
    """The quick start's shell blocks, and the output lines it says a user sees: those
    this test runs, or (``in_a_browser``) those marked for the browser test."""
    section = _SECTION.search(README.read_text(encoding="utf-8"))
    assert section, "README.md has no '## Quick start' section"
    chosen = [m for m in _BLOCK.finditer(section.group(1)) if bool(m["marker"]) == in_a_browser]
    blocks = [m["body"] for m in chosen if m["kind"] == "bash"]
    shown = [line for m in chosen if m["kind"] == "text" for line in m["body"].splitlines()]
    return blocks, shown


def quick_start() -> tuple[list[str], list[str]]:
    """The quick start's shell blocks this test runs, and the output lines it checks."""
    return quick_start_blocks()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_quick_start_names_what_it_shows() -> None:
    blocks, shown = quick_start()
    script = "\n".join(blocks)
    assert "airflow dags test orders" in script
    assert "python -m airflow_provider_nsq.testing.broker" in script
    assert "airflow standalone" not in script  # left to the browser test
    assert shown, "the quick start shows no output"
    ui_blocks, ui_shown = quick_start_blocks(in_a_browser=True)
    assert [block.split("#")[0].strip() for block in ui_blocks] == ["airflow standalone"]
    assert ui_shown[0] == "Test Connection Successful"


@dataclass(frozen=True)
class QuickStart:
    """The quick start, run: its scratch folder (the virtualenv in ``venv``, Airflow's
    home in ``airflow``), its exit status and its output."""

    folder: Path
    returncode: int
    output: str

    @property
    def bin(self) -> Path:
        return self.folder / "venv" / "bin"


@pytest.fixture(scope="module")
def quick_start_run(tmp_path_factory: pytest.TempPathFactory) -> QuickStart:
    blocks, _ = quick_start()
    folder = tmp_path_factory.mktemp("nsq-quickstart")
    tcp, http = _free_port(), _free_port()
    script = "\n".join(blocks)
    script = script.replace("/tmp/nsq-quickstart", str(folder))
    script = re.sub(r"\b4150\b", str(tcp), script)
    script = re.sub(r"\b4151\b", str(http), script)
    log = folder / "quickstart.log"
    with log.open("w") as out:
        # Output to a file, not a pipe: a background process the script left running
        # would hold a pipe open and the wait would never end.
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=ROOT,
            env=_clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its background nsqd goes with it, whatever happens
        )
        try:
            process.wait(timeout=840)
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
    return QuickStart(folder, process.returncode, log.read_text(errors="replace"))


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_quick_start_runs_as_written(quick_start_run: QuickStart) -> None:
    _, shown = quick_start()
    tail = quick_start_run.output[-4000:]
    assert quick_start_run.returncode == 0, tail
    lines = quick_start_run.output.splitlines()
    for expected in shown:
        assert expected in lines, f"{expected!r} is not in the quick start's output:\n{tail}"
    assert _SHORT_SECRET not in quick_start_run.output, tail


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_second_run_with_no_order_ends_as_the_readme_says(
    quick_start_run: QuickStart,
) -> None:
    """The README says what a second run with no new message does: the sensor's
    ``timeout``, then the error it quotes and a failed run (not a 7-day wait)."""
    assert quick_start_run.returncode == 0, quick_start_run.output[-4000:]
    said = _SECOND_RUN.search(README.read_text(encoding="utf-8"))
    assert said, "README.md's quick start does not say what a second run does"
    error = " ".join(said.group(1).split())
    tcp, http = _free_port(), _free_port()
    env = _clean_env()
    env.update(
        {
            "PATH": f"{quick_start_run.bin}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(quick_start_run.folder / "airflow"),
            "AIRFLOW_CONN_NSQ_DEFAULT": json.dumps(
                {"conn_type": "nsq", "host": "127.0.0.1", "port": tcp, "extra": {"http_port": http}}
            ),
        }
    )
    # A fresh nsqd: the channel holds no order.
    broker_cmd = [str(quick_start_run.bin / "python"), "-m", "airflow_provider_nsq.testing.broker"]
    broker = subprocess.Popen(
        [*broker_cmd, "--tcp-port", str(tcp), "--http-port", str(http)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        done = subprocess.run(
            ["airflow", "dags", "test", "orders"],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=540,
        )
    finally:
        broker.terminate()
        broker.wait(timeout=30)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-4000:]
    assert error in output, f"{error!r} not in:\n{output[-4000:]}"
    assert "state=failed" in output, output[-4000:]
    assert _SHORT_SECRET not in output, output[-4000:]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_example_dag_imports_on_the_quick_start_install(
    quick_start_run: QuickStart, tmp_path: Path
) -> None:
    """The quick start's install (no [apache-spark] extra, no PySpark): a DAG folder
    holding every example DAG, copied with a shell's ``*``, imports with no error."""
    assert quick_start_run.returncode == 0, quick_start_run.output[-4000:]
    dags = tmp_path / "dags"
    dags.mkdir()
    for entry in EXAMPLE_DAGS.iterdir():  # cp -r example_dags/* dags/: no top dotfiles
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        if entry.is_dir():
            shutil.copytree(entry, dags / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(entry, dags / entry.name)
    python = str(quick_start_run.bin / "python")
    for missing in ("pyspark", "airflow.providers.apache.spark"):
        found = subprocess.run(
            [python, "-c", f"import importlib.util as u; print(u.find_spec({missing!r}))"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert found.stdout.strip() == "None" or "ModuleNotFoundError" in found.stderr, found
    result = parse_dag_folders([dags], tmp_path / "home", python=python, environment=_clean_env())
    assert result["import_errors"] == {}
    assert result["connect_attempts"] == []
    examples = sorted(p.name for p in EXAMPLE_DAGS.glob("*.py"))
    assert sorted(Path(f).name for f in result["dags"]) == examples
