"""``pyspark`` and ``pyspark-client`` of different versions in one environment (they share
the ``pyspark/`` folder) make importing ``airflow_provider_nsq.spark`` fail with one
error naming both versions and the command that fixes it; one version of both, or either
alone, imports.

The installed distributions are stood in for by metadata only (a ``*.dist-info`` folder
ahead of site-packages on the path), so no PySpark is installed or needed here. The
install a user makes is checked by the ``spark_extras`` nox session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _import_with(tmp_path: Path, **versions: str | None) -> subprocess.CompletedProcess[str]:
    """Import the package in a fresh Python that sees ``versions`` (distribution name ->
    version, or None: not installed). A version is a dist-info folder ahead of
    site-packages; None hides the real distribution from ``importlib.metadata``."""
    fake = tmp_path / "site"
    fake.mkdir()
    for name, found in versions.items():
        if found is None:
            continue
        info = fake / f"{name.replace('-', '_')}-{found}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {found}\n", encoding="utf-8"
        )
    hidden = [name for name, found in versions.items() if found is None]
    code = (
        "import importlib.metadata as m, sys\n"
        f"hidden = {hidden!r}\n"
        "real = m.version\n"
        "def version(name):\n"
        "    if name in hidden:\n"
        "        raise m.PackageNotFoundError(name)\n"
        "    return real(name)\n"
        "m.version = version\n"
        "import airflow_provider_nsq.spark\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_mix_fails_the_import_naming_both_versions_and_the_fix(tmp_path: Path) -> None:
    done = _import_with(tmp_path, **{"pyspark": "4.3.0", "pyspark-client": "4.2.0"})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: pyspark 4.3.0 and pyspark-client 4.2.0 are both installed")
    assert (
        'pip install --force-reinstall --no-deps "pyspark==4.2.0" "pyspark-client==4.2.0"' in last
    )


@pytest.mark.parametrize(
    "versions",
    [
        {"pyspark": "4.2.0", "pyspark-client": "4.2.0"},
        {"pyspark": "4.3.0", "pyspark-client": None},
        {"pyspark": None, "pyspark-client": "4.2.0"},
    ],
    ids=["one-version", "pyspark-alone", "client-alone"],
)
def test_one_version_or_either_alone_imports(tmp_path: Path, versions) -> None:
    done = _import_with(tmp_path, **versions)
    assert done.returncode == 0, done.stderr
