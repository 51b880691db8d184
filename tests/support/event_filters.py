"""Message filters the event-trigger tests name by dotted path, as DAG authors do."""

from __future__ import annotations

from typing import Any


def not_spam(record: dict[str, Any]) -> bool:
    return not record["body"].startswith("spam")


def broken(record: dict[str, Any]) -> bool:
    raise RuntimeError("this filter has a bug")
