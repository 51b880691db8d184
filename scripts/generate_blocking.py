"""Write the blocking forms of the client's asyncio-first modules, httpcore's way: each
pair below is one source (asyncio) and the module generated from it (blocking) with
``unasync`` (``async``/``await`` dropped, asyncio names replaced by their blocking
twins), then given a header saying so and formatted as the rest of the code.

    python scripts/generate_blocking.py           # write the generated modules
    python scripts/generate_blocking.py --check   # exit 1 if one is not what its source gives

``make lint`` runs ``--check`` (so does ``tests/client/test_generated_modules.py``):
change the asyncio source, never the generated file.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "airflow_provider_nsq" / "client"

#: (asyncio source, generated blocking module), relative to the client package.
PAIRS: tuple[tuple[str, str], ...] = (
    ("producer/asyncio_producer.py", "producer/blocking_producer.py"),
    ("holding/asyncio_dead_letters.py", "holding/blocking_dead_letters.py"),
)

#: Names replaced besides unasync's own (``__aenter__`` -> ``__enter__`` ...).
REPLACEMENTS: dict[str, str] = {
    "AsyncNSQConnection": "NSQConnection",
    "AsyncNSQProducer": "NSQProducer",
    "AsyncDeadLetterPublisher": "DeadLetterPublisher",
    "asyncio_driver": "blocking_driver",
    "asyncio_producer": "blocking_producer",
    "asyncio_dead_letters": "blocking_dead_letters",
}


def _header(source: str) -> str:
    """The generated module's opening: what it is and where it comes from (the source's
    own module docstring is not copied: it describes the asyncio form)."""
    name = Path(source).stem
    return (
        f"# Generated from {source} by scripts/generate_blocking.py: do not edit.\n"
        "# Change the source and run `python scripts/generate_blocking.py`; `make lint`\n"
        "# checks that this file is current.\n"
        f'"""The blocking form of :mod:`.{name}`, generated from it: what that\n'
        'module says holds here, each ``await`` a call that blocks."""\n'
    )


def _without_docstring(text: str) -> str:
    """``text`` from just after its module docstring on."""
    if not text.startswith('"""'):
        raise SystemExit("an asyncio source must open with its module docstring")
    return text[text.index('"""', 3) + 3 :]


def _ruff() -> str:
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        raise SystemExit("ruff is not installed (pip install -e '.[dev]')")
    return found


def _formatted(text: str, path: Path) -> str:
    """``text`` with its imports sorted and formatted by ruff, as ``path`` would be."""
    ruff = _ruff()
    for args in (["check", "--select", "I", "--fix", "--exit-zero", "--quiet"], ["format"]):
        done = subprocess.run(
            [ruff, *args, "--stdin-filename", str(path), "-"],
            input=text,
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        text = done.stdout
    return text


def generate(source: str, generated: str) -> str:
    """The text of ``generated`` as ``source`` gives it."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / Path(source).name
        shutil.copyfile(CLIENT / source, copy)
        rule = unasync.Rule(
            fromdir=Path(source).name,
            todir=Path(generated).name,
            additional_replacements=REPLACEMENTS,
        )
        unasync.unasync_files([str(copy)], [rule])
        text = (Path(tmp) / Path(generated).name).read_text(encoding="utf-8")
    text = _header(source) + _without_docstring(text)
    return _formatted(text, CLIENT / generated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a generated module is not current"
    )
    args = parser.parse_args(argv)
    stale = []
    for source, generated in PAIRS:
        text = generate(source, generated)
        target = CLIENT / generated
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(generated)
        else:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print(
            "not generated from their asyncio source (run python scripts/generate_blocking.py): "
            + ", ".join(f"airflow_provider_nsq/client/{g}" for g in stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
