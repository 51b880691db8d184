"""Airflow run in the test's own process: the DAG folders (the repository's
``example_dags`` and the tests' own, :data:`TEST_DAGS`), a DAG file parsed as Airflow
parses it (:func:`load_dag`), a ``dag.test()`` run and what it left (:func:`run_dag`,
:class:`RunResult`: task states and XCom values), and the ``airflow`` CLI's JSON
(:func:`airflow_cli_json`). Airflow is imported only when one of them is called."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The tests' own DAGs: the dags folder and a DAG bundle (tests/conftest.py), importable
#: as ``tests.support.dags``.
TEST_DAGS = ROOT / "tests" / "support" / "dags"
EXAMPLE_DAGS = ROOT / "example_dags"


_bags: dict[Path, Any] = {}


def load_dag(path: Path, dag_id: str):
    """Parse a DAG file the way Airflow does (once per file) and return one of its DAGs."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.0
        from airflow.models.dagbag import DagBag

    if path not in _bags:
        bag = DagBag(dag_folder=str(path))
        assert not bag.import_errors, bag.import_errors
        _bags[path] = bag
    dag = _bags[path].dags.get(dag_id)
    if dag is None:
        raise LookupError(f"no DAG {dag_id!r} in {path}")
    return dag


class RunResult:
    """A finished ``dag.test()`` run: its state, task states and XCom return values."""

    def __init__(self, dag_run) -> None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        self.dag_id = dag_run.dag_id
        self.run_id = dag_run.run_id
        self.state = str(dag_run.state)
        with create_session() as session:
            tis = session.scalars(
                select(TaskInstance).where(
                    TaskInstance.dag_id == self.dag_id, TaskInstance.run_id == self.run_id
                )
            ).all()
            self.task_states = {ti.task_id: str(ti.state) for ti in tis}
            rows = session.scalars(
                XComModel.get_many(run_id=self.run_id, dag_ids=self.dag_id, key="return_value")
            ).all()
            self.xcom = {row.task_id: XComModel.deserialize_value(row) for row in rows}

    def __repr__(self) -> str:
        return f"<RunResult {self.dag_id} {self.state} {self.task_states}>"


def airflow_cli_json(airflow_home: str, *args: str) -> Any:
    """The JSON that ``airflow <args> -o json`` prints (Airflow 3.0 and 3.1 print their
    log lines to stdout too, before it)."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), *args, "-o", "json"],
        env={**os.environ, "AIRFLOW_HOME": airflow_home},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    decoder = json.JSONDecoder()
    for line in done.stdout.splitlines():
        if line.startswith("[{") or line == "[]":
            return decoder.raw_decode(done.stdout[done.stdout.index(line) :])[0]
    raise AssertionError(f"no JSON list in the output of airflow {' '.join(args)}:\n{done.stdout}")


def run_dag(dag, **conf: Any) -> RunResult:
    return RunResult(dag.test(run_conf=conf))
