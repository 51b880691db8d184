"""One PUB and one consumed message take a short way through the provider's code: the
files they enter and the calls between those files stay within the budgets of
``benchmarks/path_length.py`` (issue 37: 21 files and 68 calls between files for a warm
PUB, 27 and 123 for a message to an asset event, before the restructuring). Counted,
not timed: the same on any machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "path_length.py"


@pytest.mark.timeout(120)
def test_a_pub_and_an_event_stay_within_their_path_budgets() -> None:
    pytest.importorskip("airflow")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = {line.split()[0]: line.split()[1:3] for line in done.stdout.splitlines()[1:]}
    assert set(rows) >= {"pub", "event"}, done.stdout
