"""Run the lookupd in a background thread with its own event loop (for tests)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from ..http_api import APIError
from . import api
from .options import LookupdOptions
from .server import Lookupd

T = TypeVar("T")


class EmbeddedNSQLookupd:
    """An nsqlookupd-compatible server on free 127.0.0.1 ports, in a background thread.

    ::

        with EmbeddedNSQLookupd() as lookupd:
            EmbeddedNSQD(lookupd_tcp_addresses=[lookupd.tcp_address])  # nsqds register
            urlopen(f"http://{lookupd.http_address}/lookup?topic=events")  # consumers ask

    Keyword arguments are :class:`LookupdOptions` fields (nsqlookupd's flag names with
    underscores, durations in milliseconds).
    """

    def __init__(self, options: LookupdOptions | None = None, **kwargs: Any) -> None:
        base = options if options is not None else LookupdOptions()
        self.options = base.replace(**kwargs) if kwargs else base
        self.lookupd: Lookupd | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    # -- addresses ------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self.options.host

    @property
    def tcp_port(self) -> int:
        return self._started().tcp_port

    @property
    def http_port(self) -> int:
        return self._started().http_port

    @property
    def tcp_address(self) -> str:
        """Where nsqds register (``--lookupd-tcp-address``)."""
        return f"{self.host}:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        """Where consumers look topics up (``lookupd_http_addresses``)."""
        return f"{self.host}:{self.http_port}"

    def _started(self) -> Lookupd:
        if self.lookupd is None or self._thread is None:
            raise RuntimeError("the embedded nsqlookupd is not running; call start() first")
        return self.lookupd

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> EmbeddedNSQLookupd:
        if self._thread is not None:
            raise RuntimeError("already started")
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="embedded-nsqlookupd", daemon=True
        )
        self._thread.start()
        try:
            ready.result(timeout=30)
        except BaseException:
            self._thread.join(5)
            self._thread = None
            raise
        return self

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(ready))
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _main(self, ready: concurrent.futures.Future[None]) -> None:
        self._stopped = asyncio.Event()
        lookupd = Lookupd(self.options)
        try:
            await lookupd.start()
        except BaseException as exc:
            await lookupd.stop()
            ready.set_exception(exc)
            return
        self.lookupd = lookupd
        ready.set_result(None)
        await self._stopped.wait()
        await lookupd.stop()

    def stop(self) -> None:
        """Stop the lookupd, close every connection (the nsqds see EOF) and join."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if self._stopped is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._stopped.set)
            except RuntimeError:  # the loop already stopped
                pass
        thread.join(30)
        self._thread = None
        self._loop = None
        self.lookupd = None

    def __enter__(self) -> EmbeddedNSQLookupd:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- thread-safe access ------------------------------------------------------------

    def call(self, fn: Callable[[Lookupd], T], timeout: float = 10.0) -> T:
        """Run ``fn(lookupd)`` on the lookupd's loop and return its result."""
        lookupd = self._started()
        assert self._loop is not None

        async def run() -> T:
            return fn(lookupd)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def producers(self, topic: str) -> list[dict[str, Any]]:
        """``/lookup``'s producers of ``topic`` (``[]`` if unknown), read without HTTP."""

        def read(lookupd: Lookupd) -> list[dict[str, Any]]:
            try:
                return list(api.lookup(lookupd, {"topic": [topic]})["producers"])
            except APIError:
                return []

        return self.call(read)

    def __repr__(self) -> str:
        if self.lookupd is None:
            return "EmbeddedNSQLookupd(stopped)"
        return f"EmbeddedNSQLookupd(tcp={self.tcp_address}, http={self.http_address})"
