"""One run of a coroutine that several asyncio callers share.

The asyncio driver's (re)connect: the first publisher that finds the connection missing,
dropped or idle starts it as a task of its own, the others wait for that task, so a
client never holds two connections at once; a caller that is cancelled stops waiting
without cancelling the run for the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class SharedTask:
    """Runs ``start()`` once for every caller of :meth:`join` until the run ends.

    :param start: makes the coroutine to run.
    :param stopped: the error a caller gets when :meth:`stop` ended the run.
    """

    def __init__(
        self,
        start: Callable[[], Coroutine[Any, Any, None]],
        stopped: Callable[[], BaseException],
    ) -> None:
        self._start = start
        self._stopped = stopped
        self._task: asyncio.Task[None] | None = None
        #: A run is under way (an attribute, not a property: publishers read it per call).
        self.running = False

    async def join(self) -> None:
        """Start the run, or join the one under way, and wait for it to end; raises what
        it raised."""
        task = self._task
        if task is None:
            task = self._task = asyncio.ensure_future(self._start())
            task.add_done_callback(self._done)
            self.running = True
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            cancelling = getattr(current, "cancelling", lambda: 0)()
            if task.cancelled() and not cancelling:  # stop() ended it, not our caller
                raise self._stopped() from None
            raise

    async def stop(self) -> None:
        """Cancel the run under way, if any, and wait until it has ended."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    def _done(self, task: asyncio.Task[None]) -> None:
        if self._task is task:
            self._task = None
            self.running = False
        if not task.cancelled():
            task.exception()  # every waiter got it; do not log it as never retrieved
