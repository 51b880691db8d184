"""Every example DAG (and every DAG of ``tests/dags``) imports as the DAG processor
imports it, with no connection defined and no network: top-level code reads no
connection (Airflow's best practices) and opens no socket.

The files are parsed by ``DagBag`` in a fresh process, with a fresh ``AIRFLOW_HOME`` and
no ``AIRFLOW_CONN_*`` variable: no ``nsq_default`` anywhere. Every socket connect is
refused and recorded there, so a parse that reaches for nsqd (or anything else) fails
here even where something listens.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import EXAMPLE_DAGS, ROOT, TEST_DAGS

#: What each DAG file needs besides Airflow and the provider (an extra), by file name.
_NEEDS = {
    "nsq_event_driven.py": ("airflow.providers.common.messaging", "messaging"),
    "nsq_gate_spark_job.py": ("airflow.providers.apache.spark", "apache-spark"),
    "nsq_stream_gate_spark_job.py": ("airflow.providers.apache.spark", "apache-spark"),
}

_PARSE = r"""
import json, os, socket, sys, warnings

attempts = []

def refuse(self, address, *args, **kwargs):
    attempts.append(repr(address))
    raise ConnectionRefusedError(f"no network while parsing DAG files: {address!r}")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse

try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow 3.0
    from airflow.models.dagbag import DagBag

folders = sys.argv[1:]
result = {"import_errors": {}, "dags": {}, "warnings": {}}
for folder in folders:
    bag = DagBag(dag_folder=folder)
    result["import_errors"].update(bag.import_errors)
    result["warnings"].update({path: list(found) for path, found in bag.captured_warnings.items()})
    for dag in bag.dags.values():
        result["dags"].setdefault(dag.fileloc, []).append(dag.dag_id)
result["connect_attempts"] = attempts
print("PARSED " + json.dumps(result))
"""


def _dag_files() -> list[Path]:
    return sorted([*EXAMPLE_DAGS.glob("*.py"), *TEST_DAGS.glob("*.py")])


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``DagBag`` made of the example DAGs and ``tests/dags``, in a process with no
    connection and no network."""
    home = tmp_path_factory.mktemp("no-connections-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            # The secrets backend of the environment, if any, is not asked either.
            "AIRFLOW__SECRETS__BACKEND": "",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", _PARSE, str(EXAMPLE_DAGS), str(TEST_DAGS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("PARSED "))
    return json.loads(line.removeprefix("PARSED "))


def test_parsing_opens_no_socket(parsed: dict[str, Any]) -> None:
    assert parsed["connect_attempts"] == []


@pytest.mark.parametrize("path", _dag_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_dag_file_imports_with_no_connection_and_no_network(
    path: Path, parsed: dict[str, Any]
) -> None:
    module, extra = _NEEDS.get(path.name, (None, None))
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{path.name} needs the [{extra}] extra ({module})")
    errors = {Path(p).name: e for p, e in parsed["import_errors"].items()}
    assert path.name not in errors, errors[path.name]
    assert parsed["dags"].get(str(path)), f"no DAG in {path}"
    # Nothing of the provider's deprecated either: the files show how to write a DAG today.
    warned = [
        w
        for w in parsed["warnings"].get(str(path), [])
        if w.startswith(str(path)) or "/airflow_provider_nsq/" in w.split(": ")[0]
    ]
    assert warned == []
