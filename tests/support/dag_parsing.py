"""DAG folders parsed as Airflow's DAG processor parses them: ``DagBag`` in a fresh
process, with a fresh ``AIRFLOW_HOME``, no ``AIRFLOW_CONN_*`` variable (no
``nsq_default`` anywhere) and no network: every socket connect is refused and recorded,
so a parse that reaches for nsqd (or anything else) shows. Modules can be hidden, as if
not installed (``pyspark``, Airflow's Spark provider): a quick-start install without a
virtualenv of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_PARSE = r"""
import importlib.abc, json, os, socket, sys

hidden = tuple(filter(None, os.environ.get("NSQ_TEST_HIDE_MODULES", "").split(",")))


class Hide(importlib.abc.MetaPathFinder):
    # What a quick-start install lacks: importing it fails as it would there.
    def find_spec(self, name, path=None, target=None):
        if any(name == h or name.startswith(h + ".") for h in hidden):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if hidden:
    sys.meta_path.insert(0, Hide())

# Their distributions too: Airflow finds providers by their entry points.
gone = set(filter(None, os.environ.get("NSQ_TEST_HIDE_DISTRIBUTIONS", "").split(",")))


def without_hidden(distributions):
    def listed(**kwargs):
        for dist in distributions(**kwargs):
            name = (dist.metadata["Name"] or "").lower().replace("_", "-")
            if name not in gone:
                yield dist

    return listed


if gone:
    import importlib.metadata

    importlib.metadata.distributions = without_hidden(importlib.metadata.distributions)
    try:
        import importlib_metadata
    except ImportError:
        pass
    else:
        importlib_metadata.distributions = without_hidden(importlib_metadata.distributions)

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

result = {"import_errors": {}, "dags": {}, "warnings": {}, "files": []}
for folder in sys.argv[1:]:
    bag = DagBag(dag_folder=folder)
    result["import_errors"].update(bag.import_errors)
    result["warnings"].update({path: list(found) for path, found in bag.captured_warnings.items()})
    result["files"].extend(sorted(getattr(bag, "file_last_changed", {})))
    for dag in bag.dags.values():
        result["dags"].setdefault(dag.fileloc, []).append(dag.dag_id)
result["connect_attempts"] = attempts
print("PARSED " + json.dumps(result))
"""


def parse_dag_folders(
    folders: Sequence[Path],
    home: Path,
    *,
    python: str = sys.executable,
    hide: Sequence[str] = (),
    hide_distributions: Sequence[str] = (),
    pythonpath: Sequence[Path] = (),
    environment: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What ``DagBag`` makes of ``folders`` under ``python``: ``import_errors`` and
    ``warnings`` by file, ``dags`` (file -> DAG ids), ``files`` (every file parsed) and
    ``connect_attempts`` (none expected).

    :param home: a fresh folder for ``AIRFLOW_HOME``.
    :param hide: modules (with their submodules) that fail to import, as if not installed.
    :param hide_distributions: distributions (``pip`` names) left out of what
        ``importlib.metadata`` lists, so Airflow does not find their entry points.
    :param pythonpath: folders put first on ``PYTHONPATH`` (this checkout, when ``python``
        does not have the provider installed).
    :param environment: the variables to start from (default this process's).
    """
    base = os.environ if environment is None else environment
    env = {k: v for k, v in base.items() if not k.startswith("AIRFLOW_CONN_")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            # The secrets backend of the environment, if any, is not asked either.
            "AIRFLOW__SECRETS__BACKEND": "",
            "NSQ_TEST_HIDE_MODULES": ",".join(hide),
            "NSQ_TEST_HIDE_DISTRIBUTIONS": ",".join(hide_distributions),
            "PYTHONPATH": os.pathsep.join(
                [*map(str, pythonpath), *filter(None, [env.get("PYTHONPATH")])]
            ),
        }
    )
    done = subprocess.run(
        [python, "-c", _PARSE, *map(str, folders)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("PARSED "))
    return json.loads(line.removeprefix("PARSED "))
