"""What a runner cannot run is a type error: mypy rejects a blocking sequence given to
the asyncio runner (and the reverse), a sequence that waits given to ``run_now``, and
one that is not HTTP calls in a ``Gather`` (``step_types_misused.py``), at the lines
marked there and nowhere else. Code mypy never saw still gets a clear error."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

from airflow_provider_nsq.client.runners.asyncio_runner import AsyncRunner
from airflow_provider_nsq.client.runners.steps import Wait

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("step_types_misused.py")
MARK = re.compile(r"#\s*rejected:\s*([\w-]+)")
REPORTED = re.compile(r"^[^:]+:(\d+): error: .*\[([\w-]+)\]$")


def test_mypy_rejects_what_a_runner_cannot_run() -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]')")
    expected = {
        (number, mark.group(1))
        for number, line in enumerate(CASES.read_text().splitlines(), start=1)
        if (mark := MARK.search(line))
    }
    assert len(expected) >= 10
    # The project's own settings and cache (`make typecheck` fills it), from its root.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", str(CASES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    reported = {(int(m.group(1)), m.group(2)) for e in errors if (m := REPORTED.match(e))}
    assert len(reported) == len(errors), done.stdout
    assert reported == expected, done.stdout + done.stderr


def test_run_now_refuses_a_step_that_waits_in_code_never_type_checked() -> None:
    """The check mypy cannot make for code it never saw: ``run_now`` names the step,
    and the sequence gets the error where it yielded it (to clean up)."""
    seen: list[BaseException] = []

    def waits() -> Generator[object, object, None]:
        try:
            yield Wait(1.0, ())
        except TypeError as exc:
            seen.append(exc)
            raise

    with pytest.raises(TypeError, match="Wait cannot be done without the event loop"):
        AsyncRunner().run_now(waits())  # type: ignore[arg-type]
    assert len(seen) == 1
