"""The docs and the example DAGs import each of the provider's names from one module:
a reader who copies two pages gets one import, and the API reference has one home for
it (``decode_record_body`` lives in ``airflow_provider_nsq.client.message``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from .markdown_blocks import python_blocks

ROOT = Path(__file__).resolve().parents[2]


def _sources() -> list[tuple[str, str]]:
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in python_blocks(ROOT, page):
            for snippet in (block.setup, block.code, block.check):
                if snippet is not None:
                    found.append((f"{block.page}:{snippet.line}", snippet.code))
    for path in sorted((ROOT / "example_dags").rglob("*.py")):
        found.append((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")))
    return found


def _imports() -> dict[str, dict[str, list[str]]]:
    """name -> module -> where the docs import ``name`` from ``module``."""
    imports: dict[str, dict[str, list[str]]] = {}
    for where, code in _sources():
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "airflow_provider_nsq"
            ):
                for alias in node.names:
                    imports.setdefault(alias.name, {}).setdefault(node.module, []).append(where)
    return imports


def test_each_name_is_imported_from_one_module() -> None:
    assert {name: mods for name, mods in _imports().items() if len(mods) > 1} == {}


def test_decode_record_body_is_imported_from_client_message_and_is_there() -> None:
    assert set(_imports()["decode_record_body"]) == {"airflow_provider_nsq.client.message"}
    records = importlib.import_module("airflow_provider_nsq.client.message")
    assert records.decode_record_body({"body": "aGk=", "body_encoding": "base64"}) == b"hi"
