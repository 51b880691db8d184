"""README.md's quick start runs as written, from nothing: its shell blocks, in page order,
in one bash process, as a first user would paste them. Only the servers' ports (free ones
instead of nsqd's 4150/4151, which a real nsqd may hold) and the scratch folder (a
temporary one instead of /tmp/nsq-quickstart) are changed.

It creates a virtualenv and installs the provider from this checkout with Airflow
(``pip``, so it needs the package index, and pip's cache makes it quick), migrates a
SQLite metadata database, starts the embedded nsqd, writes the DAG into the DAG folder
and runs ``airflow dags test``: a minute or two.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_SECTION = re.compile(r"^## Quick start\n(.*?)(?=^## )", re.MULTILINE | re.DOTALL)
_BASH = re.compile(r"^```bash\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_TEXT = re.compile(r"^```text\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def quick_start() -> tuple[list[str], list[str]]:
    """The quick start's shell blocks, and the output lines it says a user sees."""
    section = _SECTION.search(README.read_text(encoding="utf-8"))
    assert section, "README.md has no '## Quick start' section"
    blocks = _BASH.findall(section.group(1))
    shown = [line for block in _TEXT.findall(section.group(1)) for line in block.splitlines()]
    return blocks, shown


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_quick_start_names_what_it_shows() -> None:
    blocks, shown = quick_start()
    script = "\n".join(blocks)
    assert "airflow dags test orders" in script
    assert "python -m airflow_provider_nsq.testing.broker" in script
    assert shown, "the quick start shows no output"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    blocks, shown = quick_start()
    tcp, http = _free_port(), _free_port()
    script = "\n".join(blocks)
    script = script.replace("/tmp/nsq-quickstart", str(tmp_path))
    script = re.sub(r"\b4150\b", str(tcp), script)
    script = re.sub(r"\b4151\b", str(http), script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    log = tmp_path / "quickstart.log"
    with log.open("w") as out:
        # Output to a file, not a pipe: a background process the script left running
        # would hold a pipe open and the wait would never end.
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=ROOT,
            env=env,
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
    output = log.read_text(errors="replace")
    tail = output[-4000:]
    assert process.returncode == 0, tail
    lines = output.splitlines()
    for expected in shown:
        assert expected in lines, f"{expected!r} is not in the quick start's output:\n{tail}"
