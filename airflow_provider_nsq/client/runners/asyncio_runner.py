"""The asyncio runner: performs :mod:`.steps` on the event loop, without threads.

Every nsqd is connected at once (one task each), every sequence of a
:class:`~.steps.Gather` runs as a task of its own, and a :class:`~.steps.Wait` ends when
a connection wakes the runner (its ``on_wake``: messages arrived, or it failed).
Heartbeats are answered by the event loop as they arrive, whatever the caller does.

:func:`awaitable` makes a sequence a coroutine method that runs it here (the asyncio
consumer's ``consume``, ``read`` and ``close``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Concatenate, ParamSpec, TypeVar

from ...protocol.errors import NSQError
from ..drivers.asyncio_driver import AsyncNSQConnection
from ..settings.client_config import ClientConfig
from ..transport.http_request import HTTPRequest, asend_request
from .steps import (
    Abort,
    Close,
    Connect,
    Gather,
    HTTPStep,
    Now,
    Opened,
    Runnable,
    Send,
    StartClose,
    Step,
    Wait,
    WriteStep,
    drive,
    send,
)

__all__ = ["AsyncRunner", "arun", "awaitable"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class AsyncRunner:
    """Performs steps on the running event loop. A consumer keeps one (the connections
    it opens wake it); :func:`arun` is for a one-off sequence."""

    def __init__(self) -> None:
        self._woken: asyncio.Event | None = None  # made on the loop, at the first use

    async def run(self, steps: Runnable[Step[AsyncNSQConnection], T]) -> T:
        """Drive ``steps`` to its end on the loop: do each step's I/O, send back its
        outcome (or throw its error in), return what the sequence returns."""
        # Each step is answered with the outcome its class names (see steps.Runnable).
        sequence: Generator[Step[AsyncNSQConnection], object, T] = steps  # type: ignore[assignment]
        outcome: object = None
        error: BaseException | None = None
        while True:
            try:
                step = sequence.throw(error) if error is not None else sequence.send(outcome)
            except StopIteration as done:
                return done.value
            error = None
            try:
                outcome = await self.perform(step)
            except BaseException as exc:  # also a cancellation: the sequence cleans up
                error = exc

    def run_now(self, steps: Runnable[WriteStep, T]) -> T:
        """Drive a sequence that only writes (:class:`~.steps.Send`,
        :class:`~.steps.Abort`; :class:`~.steps.Now`) to its end at once, without the
        loop: the asyncio drivers' writes never wait."""
        return drive(steps, self._perform_now)

    async def perform(self, step: Step[AsyncNSQConnection]) -> object:
        """Do one step's I/O; its outcome (see :mod:`.steps`)."""
        if isinstance(step, (Now, Send)):
            return self._perform_now(step)
        if isinstance(step, Wait):
            return await self._wait(step.timeout)
        if isinstance(step, HTTPRequest):
            return await asend_request(step)
        if isinstance(step, Connect):
            return await self._open_all(step)
        if isinstance(step, Gather):
            return await self._gather(step)
        if isinstance(step, StartClose):
            closing = (conn.start_close() for conn in step.connections)
            return _carried(await asyncio.gather(*closing, return_exceptions=True))
        if isinstance(step, Abort):
            return self._perform_now(step)
        assert isinstance(step, Close), step
        for conn in step.connections:
            await conn.close()
        return None

    def _perform_now(self, step: WriteStep) -> object:
        if isinstance(step, Now):
            return time.monotonic()
        if isinstance(step, Send):
            return send(step)
        if isinstance(step, Abort):
            for conn in step.connections:
                conn.abort()
            return None
        # Kept for a sequence that was never type-checked: run_now takes WriteStep only.
        raise TypeError(f"{type(step).__name__} cannot be done without the event loop")

    async def _gather(self, step: Gather[R]) -> list[R | NSQError]:
        outcomes = await asyncio.gather(
            *(self.run(s) for s in step.sequences), return_exceptions=True
        )
        return _carried(outcomes)

    @property
    def _event(self) -> asyncio.Event:
        if self._woken is None:
            self._woken = asyncio.Event()
        return self._woken

    def _wake(self) -> None:
        """A connection's ``on_wake``: messages arrived, or it failed."""
        self._event.set()

    async def _wait(self, timeout: float) -> float:
        event = self._event
        event.clear()
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                await event.wait()
        except TimeoutError:
            pass
        return time.monotonic()

    async def _open_all(self, step: Connect) -> Opened:
        opening = (self._open(c, step.topic, step.channel) for c in step.configs)
        results = await asyncio.gather(*opening, return_exceptions=True)
        try:
            opened = _carried(results)
        except BaseException:  # as the blocking runner does: close what opened, raise
            for result in results:
                if isinstance(result, AsyncNSQConnection):
                    await result.close()
            raise
        return Opened(tuple(opened), time.monotonic())

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


async def arun(steps: Runnable[HTTPStep, T]) -> T:
    """Drive ``steps`` on the running loop (a sequence of HTTP calls: no state to keep)."""
    return await AsyncRunner().run(steps)


def awaitable(
    steps: Callable[Concatenate[Any, P], Runnable[Step[AsyncNSQConnection], T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The sequence method ``steps`` as a coroutine method that runs it on its object's
    runner (its ``_runner``, an :class:`AsyncRunner`) and returns what it returns."""

    @functools.wraps(steps)
    async def call(self: Any, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._runner.run(steps(self, *args, **kwargs))

    call.__name__ = call.__qualname__ = steps.__name__.removesuffix("_steps")
    return call


def _carried(outcomes: list[R | BaseException]) -> list[R | NSQError]:
    """``outcomes`` as a step's outcome, once the first exception among them that is not
    the peer's fault (a cancellation, a bug) is raised: only an :class:`NSQError` is
    carried as an outcome."""
    carried: list[R | NSQError] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, NSQError):
            raise outcome
        carried.append(outcome)
    return carried
