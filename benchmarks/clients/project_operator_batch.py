"""``NSQConsumeOperator`` with ``apply_function_batch`` (see ``project_operator.py``)."""

from __future__ import annotations

from typing import Any

from .base import Context
from .project_operator import connect, drain, mpub, pub

__all__ = ["connect", "consume", "mpub", "pub"]


def consume(ctx: Context) -> dict[str, Any]:
    return drain(ctx, batch=True)
