"""The client package: its public names import from it, and importing it changes nothing
in the interpreter beyond loading modules (no import hook)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import airflow_provider_nsq.client as client

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str) -> subprocess.CompletedProcess[bytes]:
    """``code`` run by a fresh interpreter that imports this checkout's package."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, cwd=ROOT, env=env, timeout=60
    )


def test_every_public_name_imports_from_the_client_package() -> None:
    for name in client.__all__:
        assert getattr(client, name) is not None, name


def test_importing_the_client_leaves_the_import_system_as_it_was() -> None:
    probe = (
        "import sys\n"
        "before = list(sys.meta_path), list(sys.path_hooks)\n"
        "import airflow_provider_nsq.client as c\n"
        "[getattr(c, n) for n in c.__all__]\n"
        "assert (list(sys.meta_path), list(sys.path_hooks)) == before, sys.meta_path\n"
    )
    done = _python(probe)
    assert done.returncode == 0, done.stderr.decode()


def test_an_old_module_path_is_an_import_error() -> None:
    probe = "import airflow_provider_nsq.client.config"
    done = _python(probe)
    assert b"ModuleNotFoundError" in done.stderr
