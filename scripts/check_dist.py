"""``make dist``'s last step: what twine does not check in the sdist and the wheel.

Both must carry LICENSE and NOTICE, be of this checkout's version, and the wheel must hold
the package, its ``py.typed`` and the entry point Airflow (``apache_airflow_provider``)
looks for, and none for pytest (``pytest11``: the fixtures load where a conftest.py asks
for them, not in every pytest run of every project that installs the provider). With
``--tag`` (the release workflow's pushed tag), the tag must name that version: ``v0.2.0``
for 0.2.0. Prints one line per artifact; exit status 1 with the reason when something is
missing.

    python scripts/check_dist.py dist [--tag v0.2.0]
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_provider_nsq import __version__  # noqa: E402

NAME = "airflow_provider_nsq"
LICENSE_FILES = ("LICENSE", "NOTICE")
ENTRY_POINTS = (
    "[apache_airflow_provider]\nprovider_info = airflow_provider_nsq:get_provider_info",
)
#: Entry points the wheel must not have.
UNWANTED_ENTRY_POINTS = ("[pytest11]",)


def check_wheel(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as whl:
        names = set(whl.namelist())
        info = f"{NAME}-{__version__}.dist-info"
        problems = [
            f"no {info}/licenses/{name}"
            for name in LICENSE_FILES
            if f"{info}/licenses/{name}" not in names
        ]
        for needed in (f"{NAME}/__init__.py", f"{NAME}/py.typed", f"{NAME}/hooks/nsq.py"):
            if needed not in names:
                problems.append(f"no {needed}")
        if f"{info}/entry_points.txt" in names:
            entry_points = whl.read(f"{info}/entry_points.txt").decode()
            problems += [f"no entry point {e!r}" for e in ENTRY_POINTS if e not in entry_points]
            problems += [f"entry point {e}" for e in UNWANTED_ENTRY_POINTS if e in entry_points]
        else:
            problems.append(f"no {info}/entry_points.txt")
    return problems


def check_sdist(path: Path) -> list[str]:
    top = f"{NAME}-{__version__}"
    with tarfile.open(path) as sdist:
        names = set(sdist.getnames())
    needed = [*LICENSE_FILES, "PKG-INFO", "pyproject.toml", f"{NAME}/__init__.py"]
    return [f"no {name}" for name in needed if f"{top}/{name}" not in names]


def check_tag(tag: str, version: str = __version__) -> list[str]:
    """What is wrong with publishing ``version`` from the git tag ``tag`` (``v`` + version)."""
    if tag == f"v{version}":
        return []
    return [f"the tag {tag!r} does not name the package's version {version} (tag it v{version})"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path, help="the folder `python -m build` wrote to")
    parser.add_argument("--tag", help="the git tag being released: it must be v<version>")
    args = parser.parse_args(argv)
    artifacts = {
        args.dist / f"{NAME}-{__version__}-py3-none-any.whl": check_wheel,
        args.dist / f"{NAME}-{__version__}.tar.gz": check_sdist,
    }
    failed = False
    for path, check in artifacts.items():
        problems = check(path) if path.is_file() else ["missing"]
        failed |= bool(problems)
        print(f"{path}: {'; '.join(problems) if problems else 'ok (LICENSE, NOTICE)'}")
    if args.tag is not None:
        problems = check_tag(args.tag)
        failed |= bool(problems)
        print(f"tag {args.tag}: {'; '.join(problems) if problems else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
