"""Waiting in a test for something that happens in another thread or process."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy (and return that); an
    ``AssertionError`` naming it after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            name = getattr(predicate, "__name__", repr(predicate))
            raise AssertionError(f"condition {name} not met within {timeout}s (last: {last!r})")
        time.sleep(interval)
