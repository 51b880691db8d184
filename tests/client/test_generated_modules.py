"""The blocking producer and dead-letter publisher are generated from their asyncio
source (scripts/generate_blocking.py): the files in the tree are what it gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import airflow_provider_nsq.client

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "generate_blocking.py"


def test_the_generated_blocking_modules_are_current() -> None:
    pytest.importorskip("unasync")
    if not SCRIPT.exists():
        pytest.skip("the source tree is not beside the tests (a session against the wheel)")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_each_generated_module_says_what_it_is_generated_from() -> None:
    # The package imported: the source tree's, or the installed wheel's in a matrix session.
    client = Path(airflow_provider_nsq.client.__file__).parent
    for source, generated in [
        ("producer/asyncio_producer.py", "producer/blocking_producer.py"),
        ("holding/asyncio_dead_letters.py", "holding/blocking_dead_letters.py"),
    ]:
        head = (client / generated).read_text(encoding="utf-8").splitlines()[0]
        assert head.startswith(f"# Generated from {source} by scripts/generate_blocking.py")
