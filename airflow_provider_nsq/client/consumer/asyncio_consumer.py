"""``AsyncNSQConsumer``: the consumer's sequences (:mod:`.sequences`), run on the asyncio
event loop by :class:`~..runners.asyncio_runner.AsyncRunner`, without threads: every nsqd connected
at once, nsqlookupd asked, a wait that ends when a connection wakes it (messages
arrived, or it failed), every connection CLS'd at once, closed. Heartbeats are answered
by the event loop as they arrive, whatever the caller is doing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..drivers.asyncio_driver import AsyncNSQConnection
from ..runners.asyncio_runner import AsyncRunner
from ..runners.steps import Runnable, Step, WriteStep
from .sequences import ConsumerSteps

P = ParamSpec("P")
T = TypeVar("T")


def awaitable(
    steps: Callable[
        Concatenate[ConsumerSteps[AsyncNSQConnection], P], Runnable[Step[AsyncNSQConnection], T]
    ],
) -> Callable[Concatenate[AsyncNSQConsumer, P], Coroutine[Any, Any, T]]:
    """The sequence ``steps`` as a coroutine method that returns its result."""

    @functools.wraps(steps)
    async def call(self: AsyncNSQConsumer, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._runner.run(steps(self, *args, **kwargs))

    call.__name__ = call.__qualname__ = steps.__name__.removesuffix("_steps")
    return call


class AsyncNSQConsumer(ConsumerSteps[AsyncNSQConnection]):
    """The asyncio consumer: the same sequences and guarantees as
    :class:`~.blocking_consumer.NSQConsumer` (await ``consume``, ``start``, ``read`` and
    ``close``; ``set_max_in_flight``, ``touch_held`` and ``contact`` are plain calls).

    Heartbeats are answered by the event loop as they arrive; re-polling nsqlookupd,
    reconnecting and re-planning RDY happen inside :meth:`read`.
    """

    def __init__(self, topic: str, channel: str, **kwargs: Any) -> None:
        super().__init__(topic, channel, **kwargs)
        self._runner = AsyncRunner()

    async def __aenter__(self) -> AsyncNSQConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    consume = awaitable(ConsumerSteps.consume_steps)
    read = awaitable(ConsumerSteps.read_steps)
    close = awaitable(ConsumerSteps.close_steps)

    def run_now(self, steps: Runnable[WriteStep, T]) -> T:
        """Run a sequence that only writes, at once (the asyncio drivers' writes never
        wait); the others are awaited (``consume``, ``start``, ``read``, ``close``)."""
        return self._runner.run_now(steps)

    async def start(self, max_in_flight: int) -> AsyncNSQConsumer:
        """See :meth:`~.blocking_consumer.NSQConsumer.start`."""
        await self._runner.run(self.start_steps(max_in_flight))
        return self
