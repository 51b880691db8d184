"""Waiting in a test for something that happens in another thread, task or process: the
one wait of the test helpers and of the provider's own suite.

A wait polls a predicate with a bound instead of sleeping for a guessed time, so a test
is as fast as the event allows and fails, naming what it waited for, when the event
never comes. :func:`wait_for` blocks the calling thread; :func:`async_wait_for` is the
same wait inside a running event loop (the loop keeps running while it waits).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
#: What a wait says when it fails: a text, a function giving one, or None (the
#: predicate's name).
Message = str | Callable[[], str] | None

__all__ = ["async_wait_for", "wait_for"]


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 5.0,
    interval: float = 0.02,
    *,
    message: Message = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    :param predicate: called with no argument, first at once, then every ``interval``
        seconds.
    :param timeout: the bound, in seconds.
    :param message: what was awaited, said by the ``AssertionError`` raised after
        ``timeout`` seconds (default: the predicate's name), with the last value seen; or
        a function that says it then (to describe the state the wait ended in).
    """
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _not_met(predicate, timeout, message, last)
        time.sleep(interval)


async def async_wait_for(
    predicate: Callable[[], T],
    timeout: float = 5.0,
    interval: float = 0.02,
    *,
    message: Message = None,
) -> T:
    """:func:`wait_for` in a coroutine: the running event loop goes on between polls (a
    predicate that reads what the loop's own tasks do needs that)."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _not_met(predicate, timeout, message, last)
        await asyncio.sleep(interval)


def _not_met(
    predicate: Callable[[], Any], timeout: float, message: Message, last: Any
) -> AssertionError:
    if callable(message):
        message = message()
    what = message or f"condition {getattr(predicate, '__name__', repr(predicate))}"
    return AssertionError(f"{what}: not met within {timeout}s (last: {last!r})")
