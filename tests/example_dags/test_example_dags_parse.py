"""Every example DAG (and every DAG of ``tests/support/dags``) imports as the DAG processor
imports it, with no connection defined and no network: top-level code reads no
connection (Airflow's best practices) and opens no socket. And a DAG folder holding every
example imports on a quick-start install, without PySpark or Airflow's Spark provider.

The files are parsed by ``DagBag`` in a fresh process, with a fresh ``AIRFLOW_HOME`` and
no ``AIRFLOW_CONN_*`` variable: no ``nsq_default`` anywhere. Every socket connect is
refused and recorded there, so a parse that reaches for nsqd (or anything else) fails
here even where something listens (``dag_parsing.py``).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.airflow_runs import EXAMPLE_DAGS, ROOT, TEST_DAGS
from tests.support.dag_parsing import parse_dag_folders

#: What a DAG file needs to import besides Airflow and the provider (an extra), by file
#: name. The Spark examples import without the [apache-spark] extra: their Spark parts
#: skip, saying what to install.
_NEEDS = {
    "nsq_event_driven.py": ("airflow.providers.common.messaging", "messaging"),
}


def _dag_files() -> list[Path]:
    return sorted([*EXAMPLE_DAGS.glob("*.py"), *TEST_DAGS.glob("*.py")])


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``DagBag`` made of the example DAGs and ``tests/support/dags``, in a process with no
    connection and no network."""
    home = tmp_path_factory.mktemp("no-connections-home")
    return parse_dag_folders([EXAMPLE_DAGS, TEST_DAGS], home, pythonpath=[ROOT])


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing (airflow.providers.apache)
        return False


def test_parsing_opens_no_socket(parsed: dict[str, Any]) -> None:
    assert parsed["connect_attempts"] == []


@pytest.mark.parametrize("path", _dag_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_dag_file_imports_with_no_connection_and_no_network(
    path: Path, parsed: dict[str, Any]
) -> None:
    module, extra = _NEEDS.get(path.name, (None, None))
    if module is not None and not _installed(module):
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


#: What the quick start's ``pip install ".[messaging]" "apache-airflow==3.3.2"`` lacks:
#: modules, and the distributions that bring them.
QUICK_START_LACKS = ("pyspark", "airflow.providers.apache")
QUICK_START_LACKS_DISTRIBUTIONS = (
    "pyspark",
    "pyspark-client",
    "apache-airflow-providers-apache-spark",
)


@pytest.mark.parametrize("copy", ["the folder", "its contents"])
def test_a_dag_folder_of_every_example_imports_without_spark(copy: str, tmp_path: Path) -> None:
    """``cp -r example_dags dags`` or ``cp -r example_dags/* dags/``: either way, with no
    PySpark and no Spark provider, no file fails to import (``jobs/`` carries its own
    ``.airflowignore``), and the Spark DAGs are there, their Spark parts skipping."""
    dags = tmp_path / "dags"
    if copy == "the folder":
        shutil.copytree(EXAMPLE_DAGS, dags, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        dags.mkdir()
        for entry in EXAMPLE_DAGS.iterdir():
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue  # a shell's * leaves dotfiles out
            if entry.is_dir():
                shutil.copytree(entry, dags / entry.name)
            else:
                shutil.copy2(entry, dags / entry.name)
    result = parse_dag_folders(
        [dags],
        tmp_path / "home",
        hide=QUICK_START_LACKS,
        hide_distributions=QUICK_START_LACKS_DISTRIBUTIONS,
        pythonpath=[ROOT],
    )
    assert result["import_errors"] == {}
    assert result["connect_attempts"] == []
    examples = sorted(p.name for p in EXAMPLE_DAGS.glob("*.py"))
    assert sorted(Path(f).name for f in result["dags"]) == examples
    assert not [f for f in result["files"] if "/jobs/" in f]
    spark_dags = {d for f, ids in result["dags"].items() if "spark" in f for d in ids}
    assert spark_dags >= {"nsq_gate_spark_job", "nsq_stream_gate_spark_job"}
