"""The shape of ``airflow_provider_nsq.testing``: usable without pytest, a cheap plugin."""

from __future__ import annotations

import json
import subprocess
import sys

PACKAGE = "airflow_provider_nsq.testing"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_every_module_but_the_plugin_imports_where_pytest_cannot_be_imported() -> None:
    # A demo, a benchmark or a DAG's own test harness runs the embedded daemons with no
    # pytest installed: only the plugin may need it.
    code = f"""
import importlib, json, pkgutil, sys
sys.modules["pytest"] = None  # "import pytest" now raises ImportError
sys.modules["_pytest"] = None
import {PACKAGE} as package
failed, imported = {{}}, []
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    try:
        importlib.import_module(info.name)
        imported.append(info.name)
    except ImportError as exc:
        failed[info.name] = str(exc)
print(json.dumps({{"failed": failed, "imported": imported}}))
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert list(report["failed"]) == [f"{PACKAGE}.pytest_plugin"], report["failed"]
    assert "pytest" in report["failed"][f"{PACKAGE}.pytest_plugin"]
    for module in ("broker", "lookupd", "handles", "topologies", "faults", "auth_server"):
        assert f"{PACKAGE}.{module}" in report["imported"]


def test_the_plugin_imports_neither_airflow_nor_the_client_nor_the_servers() -> None:
    # A conftest.py loads the plugin for its whole suite: loading it must stay cheap.
    code = f"""
import json, sys
import {PACKAGE}.pytest_plugin
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("airflow", "asyncio", "ssl")))))
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        "airflow_provider_nsq",
        f"{PACKAGE}",
        f"{PACKAGE}.pytest_plugin",
        "airflow_provider_nsq.version",
    ]
