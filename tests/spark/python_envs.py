"""Pythons that hold only some of the test environment's packages, for Spark processes
that must not see the rest: a venv whose site-packages links the named distributions
(and what they require) from this environment, as ``pip install --no-deps`` of each
would install them, with or without this package. Building one takes about a second.

- :data:`EXECUTOR_DISTRIBUTIONS`: what Spark's Python workers need (docs/spark.md,
  "Running on a cluster"): no Airflow.
- :data:`CONNECT_CLIENT_DISTRIBUTIONS`: a Spark Connect client as Airflow's Spark
  provider installs it (``pyspark-client``: PySpark's Python files for Connect, no jars,
  no classic Spark) and the NSQ client's libraries.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

import airflow_provider_nsq

# The client's, PySpark's, and pandas, which PySpark's mapInArrow requires.
EXECUTOR_DISTRIBUTIONS = ("pyspark", "pyarrow", "pandas", "python-snappy", "h11")
CONNECT_CLIENT_DISTRIBUTIONS = ("pyspark-client", "python-snappy", "h11")


def with_dependencies(names: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``names`` and what they require (no extras; a
    requirement with an environment marker only if it is installed)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [(name, False) for name in names]
    while todo:
        raw, conditional = todo.pop()
        name = re.sub(r"[-_.]+", "-", raw).lower()
        if name in found:
            continue
        try:
            dist = found[name] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            if conditional:
                continue
            raise
        for requirement in dist.requires or ():
            if "extra ==" not in requirement:
                match = re.match(r"[A-Za-z0-9._-]+", requirement)
                assert match, requirement
                todo.append((match.group(), ";" in requirement))
    return list(found.values())


def python_with(
    venv: Path, distributions: Iterable[str], *, with_package: bool, check_missing: str
) -> Path:
    """A venv at ``venv`` holding ``distributions`` (with their requirements) and, with
    ``with_package``, this package; returns its python. ``check_missing`` is a module
    that must not be importable there (checked, so a leak from this environment fails)."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    target = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    )
    source = Path(sysconfig.get_paths()["purelib"])
    # A top-level name two distributions install into (pyspark and pyspark-client share
    # pyspark/, protobuf and googleapis-common-protos share google/) is linked file by file.
    owners = importlib.metadata.packages_distributions()
    for dist in with_dependencies(distributions):
        files = [Path(str(f)) for f in dist.files or () if not str(f).startswith("..")]
        for top in {f.parts[0] for f in files}:
            if len(owners.get(top, ())) > 1:
                for file in (f for f in files if f.parts[0] == top):
                    link = target / file
                    if (source / file).is_file() and not link.exists():
                        link.parent.mkdir(parents=True, exist_ok=True)
                        link.symlink_to(source / file)
            elif (source / top).exists() and not (target / top).exists():
                (target / top).symlink_to(source / top)
    package = Path(airflow_provider_nsq.__file__).resolve().parent
    if with_package:
        (target / package.name).symlink_to(package)
    check = subprocess.run(  # not from the checkout, whose root is on sys.path with -c
        [str(python), "-c", f"import {check_missing}"],
        cwd=venv,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode != 0 and "No module named" in check.stderr, check.stderr
    return python
