"""README.md's troubleshooting, as a DAG author meets it: a DAG file whose topic name
nsqd would refuse, run with ``airflow dags test``. Airflow's last line is its own ("could
not be found"); the line the README quotes, the provider's error with every rule nsqd
applies, is in the output, and ``airflow dags list-import-errors`` lists it too.

Real Airflow commands in a fresh ``AIRFLOW_HOME`` (SQLite): about fifteen seconds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: Marks the output the troubleshooting section quotes.
MARKER = "<!-- the troubleshooting test: tests/docs/test_troubleshooting.py -->"
_SECTION = re.compile(r"^## Troubleshooting\n(.*?)(?=^## )", re.MULTILINE | re.DOTALL)
_QUOTED = re.compile(rf"{re.escape(MARKER)}\n\s*```text\n(.*?)\n\s*```", re.DOTALL)
_LAST_LINE = re.compile(r"ends with `(Dag 'my_dag' could not be found;[^`]*)`", re.DOTALL)

DAG = textwrap.dedent(
    """\
    from airflow.sdk import dag
    from airflow_provider_nsq.operators.nsq import NSQPublishOperator


    @dag(schedule=None)
    def hello_space():
        NSQPublishOperator(task_id="hello", topic="hello space", message="hi")


    hello_space()
    """
)


def _airflow(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }
    )
    return subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_reason_of_a_dag_that_failed_to_parse_is_where_the_readme_says(
    tmp_path: Path,
) -> None:
    section = _SECTION.search(README.read_text(encoding="utf-8"))
    assert section, "README.md has no '## Troubleshooting' section"
    (quoted,) = _QUOTED.findall(section.group(1))
    last_line = " ".join(_LAST_LINE.search(section.group(1))[1].split())
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "hello_space.py").write_text(DAG)
    migrated = _airflow(tmp_path, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]

    run = _airflow(tmp_path, "dags", "test", "hello_space")
    output = run.stdout + run.stderr

    assert run.returncode != 0
    assert last_line.replace("my_dag", "hello_space") in output, output[-3000:]
    assert quoted.strip() in output, output[-6000:]
    listed = _airflow(tmp_path, "dags", "list-import-errors", "-o", "plain")
    assert "invalid topic name 'hello space'" in listed.stdout, listed.stdout[-3000:]
