"""An async generator that the event loop always closes, however its caller lets go.

A trigger's ``run()`` that holds a subscription releases it in a ``finally:`` that
awaits (CLS, REQ what was taken and not answered). Python runs that ``finally:`` when
the generator is closed, and how depends on the caller: ``aclose()`` and cancellation
run it in the loop; a generator dropped unfinished is handed to the loop's finalizer
(``aclose()`` in a task) only if its first step was taken inside a running loop. One
whose first step was taken outside (``asyncio.run(trigger.run().__anext__())``) is
closed by the garbage collector, where nothing can be awaited, and Python reports
"async generator ignored GeneratorExit". :class:`LoopGenerator` makes the generator
on its first ``await``, always inside the loop, so the loop owns its end.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TypeVar

T = TypeVar("T")


class LoopGenerator(AsyncIterator[T]):
    """The items of the async generator ``start()`` makes, made on the first ``await``.

    :param start: makes the generator (called once, inside the running event loop).
    """

    def __init__(self, start: Callable[[], AsyncGenerator[T, None]]) -> None:
        self._start = start
        self._generator: AsyncGenerator[T, None] | None = None
        self._closed = False

    def __aiter__(self) -> LoopGenerator[T]:
        return self

    async def __anext__(self) -> T:
        if self._generator is None:
            if self._closed:
                raise StopAsyncIteration
            self._generator = self._start()
        return await anext(self._generator)

    async def aclose(self) -> None:
        """Close the generator (its ``finally:`` runs now, in the loop)."""
        self._closed = True
        if self._generator is not None:
            await self._generator.aclose()
