"""``AsyncNSQConsumer``: the consumer core's sequences, run on the asyncio event loop.

Everything the consumer decides is in :mod:`.core`; this module only does the I/O each
step asks for, without threads: connect every nsqd at once, ask nsqlookupd, wait until a
connection wakes it (its ``on_wake`` callback: messages arrived, or it failed), CLS
every connection at once, close. Heartbeats are answered by the event loop as they
arrive, whatever the caller is doing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..aio import AsyncNSQConnection
from ..config import ClientConfig
from .core import ConsumerCore
from .steps import CloseConnections, Connect, Lookup, StartClose, Step, Steps, Wait

P = ParamSpec("P")
T = TypeVar("T")


def awaitable(
    steps: Callable[Concatenate[ConsumerCore[Any], P], Steps[T]],
) -> Callable[Concatenate[AsyncNSQConsumer, P], Coroutine[Any, Any, T]]:
    """The core's sequence ``steps`` as a coroutine method that returns its result."""

    @functools.wraps(steps)
    async def call(self: AsyncNSQConsumer, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._arun(steps(self, *args, **kwargs))

    call.__name__ = call.__qualname__ = steps.__name__.removesuffix("_steps")
    return call


class AsyncNSQConsumer(ConsumerCore[AsyncNSQConnection]):
    """The asyncio consumer: the same sequences and guarantees as
    :class:`~.blocking.NSQConsumer` (await ``consume``, ``start``, ``read`` and
    ``close``).

    Heartbeats are answered by the event loop as they arrive; re-polling nsqlookupd,
    reconnecting and re-planning RDY happen inside :meth:`read`.
    """

    def __init__(self, topic: str, channel: str, **kwargs: Any) -> None:
        super().__init__(topic, channel, **kwargs)
        self._woken: asyncio.Event | None = None

    async def __aenter__(self) -> AsyncNSQConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    consume = awaitable(ConsumerCore.consume_steps)
    read = awaitable(ConsumerCore.read_steps)
    close = awaitable(ConsumerCore.close_steps)

    async def start(self, max_in_flight: int) -> AsyncNSQConsumer:
        """See :meth:`~.blocking.NSQConsumer.start`."""
        await self._arun(self.start_steps(max_in_flight))
        return self

    # -- the runner ----------------------------------------------------------------------

    @property
    def _event(self) -> asyncio.Event:
        if self._woken is None:
            self._woken = asyncio.Event()
        return self._woken

    def _wake(self) -> None:
        """A connection's ``on_wake``: messages arrived, or it failed."""
        self._event.set()

    async def _arun(self, steps: Steps[T]) -> T:
        """Drive one of the core's sequences to its end on the loop (see
        :meth:`~.blocking.NSQConsumer._run`)."""
        outcome: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = steps.throw(error) if error is not None else steps.send(outcome)
            except StopIteration as done:
                return done.value
            error = None
            try:
                outcome = await self._do(step)
            except BaseException as exc:  # also a cancellation: the sequence cleans up
                error = exc

    async def _do(self, step: Step) -> Any:
        if isinstance(step, Wait):
            event = self._event
            event.clear()
            try:
                async with asyncio.timeout(max(step.timeout, 0.0)):
                    await event.wait()
            except TimeoutError:
                pass
            return None
        if isinstance(step, Connect):
            opening = (self._open(c, step.topic, step.channel) for c in step.configs)
            return await asyncio.gather(*opening, return_exceptions=True)
        if isinstance(step, Lookup):
            return await step.lookupd.alookup(step.topic)
        if isinstance(step, StartClose):
            closing = (conn.start_close() for conn in step.connections)
            return await asyncio.gather(*closing, return_exceptions=True)
        assert isinstance(step, CloseConnections)
        for conn in step.connections:
            await conn.close()
        return None

    async def _open(self, config: ClientConfig, topic: str, channel: str) -> AsyncNSQConnection:
        conn = AsyncNSQConnection(config)
        conn.on_wake = self._wake
        try:
            await conn.connect()
            await conn.subscribe(topic, channel)
        except BaseException:
            await conn.close()
            raise
        return conn
