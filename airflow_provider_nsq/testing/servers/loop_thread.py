"""A service that lives on its own asyncio loop in a daemon thread.

The embedded nsqd and nsqlookupd and the fault proxy are asyncio servers that tests drive
from ordinary, blocking code. Each runs on a loop of its own in a background thread:
:class:`LoopThread` is that thread, written once. It opens the service on the loop
(an error while opening is raised in the caller's thread), keeps the loop running until
:meth:`LoopThread.stop`, closes the service there, and runs calls on the loop for the
caller (:meth:`LoopThread.call`). :class:`ServiceOnLoop` is the base of the servers that use it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from .lifecycle import StartStop

S = TypeVar("S")
T = TypeVar("T")
_Self = TypeVar("_Self", bound="ServiceOnLoop[Any]")

#: How long starting or stopping may take before the caller gives up.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class LoopThread(Generic[S]):
    """One service on one event loop in one daemon thread.

    :param name: the thread's name (shows in tracebacks and ``py-spy dump``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.service: S | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    def start(
        self,
        open_service: Callable[[], Awaitable[S]],
        close_service: Callable[[S], Awaitable[None]],
    ) -> S:
        """Start the thread, await ``open_service()`` on its loop and return the service.

        ``open_service`` cleans up after itself when it fails; its exception is raised
        here. ``close_service(service)`` runs on the loop when :meth:`stop` is called.
        """
        if self._thread is not None:
            raise RuntimeError(f"{self.name} is already started")
        ready: concurrent.futures.Future[S] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready, open_service, close_service), name=self.name, daemon=True
        )
        self._thread.start()
        try:
            self.service = ready.result(timeout=START_TIMEOUT_S)
        except BaseException:
            self._thread.join(5)
            self._thread = None
            raise
        return self.service

    def _run(
        self,
        ready: concurrent.futures.Future[S],
        open_service: Callable[[], Awaitable[S]],
        close_service: Callable[[S], Awaitable[None]],
    ) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(ready, open_service, close_service))
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _main(
        self,
        ready: concurrent.futures.Future[S],
        open_service: Callable[[], Awaitable[S]],
        close_service: Callable[[S], Awaitable[None]],
    ) -> None:
        self._stopped = asyncio.Event()
        try:
            service = await open_service()
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(service)
        await self._stopped.wait()
        await close_service(service)

    def stop(self) -> None:
        """Close the service on its loop and join the thread (a no-op when not running)."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if self._stopped is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._stopped.set)
            except RuntimeError:  # the loop already stopped
                pass
        thread.join(STOP_TIMEOUT_S)
        self._thread = None
        self._loop = None
        self.service = None

    def call(self, fn: Callable[[S], T], timeout: float = 10.0) -> T:
        """Run ``fn(service)`` on the service's loop and return its result."""

        async def run(service: S) -> T:
            return fn(service)

        return self.run(run, timeout)

    def run(self, fn: Callable[[S], Awaitable[T]], timeout: float = 10.0) -> T:
        """Await ``fn(service)`` on the service's loop and return its result."""
        service, loop = self.service, self._loop
        if service is None or loop is None or self._thread is None:
            raise RuntimeError(f"{self.name} is not running; call start() first")

        async def run() -> T:
            return await fn(service)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)


class ServiceOnLoop(StartStop, Generic[S]):
    """Base of a test server that runs on its own :class:`LoopThread`: ``start()``,
    ``stop()``, ``with``, and :meth:`call` onto its loop. Subclasses say how the service
    opens (cleaning up after themselves when that fails) and closes."""

    #: the thread's name, and what error messages call the server
    thread_name = "service"

    def __init__(self) -> None:
        self._runner: LoopThread[S] = LoopThread(self.thread_name)

    async def _open(self) -> S:
        raise NotImplementedError

    async def _close(self, service: S) -> None:
        raise NotImplementedError

    def start(self: _Self) -> _Self:
        self._runner.start(self._open, self._close)
        return self

    def stop(self) -> None:
        """Close the service, its listeners and connections, and join the thread."""
        self._runner.stop()

    def _started(self) -> S:
        service = self._runner.service
        if service is None:
            raise RuntimeError(f"the {self.thread_name} is not running; call start() first")
        return service

    def call(self, fn: Callable[[S], T], timeout: float = 10.0) -> T:
        """Run ``fn(service)`` on the service's loop and return its result."""
        return self._runner.call(fn, timeout)
