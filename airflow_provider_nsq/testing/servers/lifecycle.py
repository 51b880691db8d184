"""How the test servers live: ``with server:`` (:class:`StartStop`), and a daemon's
foreground run until a signal (:func:`serve_until_signalled`)."""

from __future__ import annotations

import asyncio
import signal
from typing import Protocol, TypeVar

_S = TypeVar("_S", bound="StartStop")


class StartStop:
    """A server or proxy for tests that is started, used, then stopped (idempotently)."""

    def start(self: _S) -> _S:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class AsyncService(Protocol):
    """A server that starts and stops on the running event loop (the broker, the lookupd)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def serve_until_signalled(service: AsyncService) -> None:
    """Start ``service`` and run it until SIGINT or SIGTERM (a daemon's foreground life)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(stop.set))
    await service.start()
    try:
        await stop.wait()
    finally:
        await service.stop()
