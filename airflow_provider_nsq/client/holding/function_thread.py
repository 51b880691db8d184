"""``FunctionThread``: run a user's function off the thread that owns a consumer.

The blocking consumer is not thread-safe, and it must keep doing its I/O while a slow
function runs (answer nsqd's heartbeats, TOUCH what it holds). So the function runs
here, on one daemon thread, one call at a time, and the consumer's thread waits on the
call's :class:`~concurrent.futures.Future` in short slices, doing that I/O in between.

The thread is a daemon and is never joined: a call still running when its owner gives up
(an Airflow task's ``execution_timeout``, a kill) does not keep the process alive. Each
call runs in a copy of the submitting thread's :mod:`contextvars` context, as the call
would have run on that thread.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_Call = tuple[Future, contextvars.Context, Callable[..., Any], tuple[Any, ...]]


class FunctionThread:
    """One daemon thread that runs the calls given to :meth:`submit`, in order.

    :param name: the thread's name (shown in thread dumps and logs).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, function: Callable[..., Any], *args: Any) -> Future:
        """Run ``function(*args)`` on the thread (started on first use); its result, or
        the exception it raised, comes back in the returned future."""
        future: Future = Future()
        self._calls.put((future, contextvars.copy_context(), function, args))
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()
        return future

    def stop(self) -> None:
        """The thread ends after the call it runs (if any). Does not wait."""
        self._calls.put(None)

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                break
            future, context, function, args = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = context.run(function, *args)
            except BaseException as exc:  # the caller decides what any failure means
                future.set_exception(exc)
            else:
                future.set_result(result)
