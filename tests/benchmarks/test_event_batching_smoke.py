"""``benchmarks/event_batching.py`` runs end to end: a smoke run with its two small rows,
against the embedded broker it starts itself (or NSQD_ADDRESS / NSQD_HTTP_ADDRESS)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "event_batching.py"


@pytest.mark.timeout(120)
def test_quick_run_turns_a_burst_into_one_event(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    burst, trickle = json.loads(out.read_text())["results"]
    # Every message is in exactly one event; a burst of 20 is one event.
    assert (burst["messages"], burst["events"], burst["sizes"]) == (20, 1, [20])
    assert sum(trickle["sizes"]) == trickle["messages"] == 50
    assert "burst" in done.stdout and "trickle" in done.stdout
