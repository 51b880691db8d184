"""Run the broker in a background thread with its own event loop (for tests)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from .options import BrokerOptions
from .server import Broker

T = TypeVar("T")


class EmbeddedNSQD:
    """An nsqd-compatible broker on free 127.0.0.1 ports, in a background thread.

    ::

        with EmbeddedNSQD(max_msg_size=1024) as nsqd:
            connect_to(nsqd.tcp_address)          # "127.0.0.1:PORT"
            urlopen(f"http://{nsqd.http_address}/ping")

    Keyword arguments are :class:`BrokerOptions` fields (nsqd's flag names with
    underscores). For tests and demos only: in memory, no disk persistence.
    """

    def __init__(self, options: BrokerOptions | None = None, **kwargs: Any) -> None:
        base = options if options is not None else BrokerOptions()
        self.options = base.replace(**kwargs) if kwargs else base
        self.broker: Broker | None = None
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
    def https_port(self) -> int | None:
        return self._started().https_port

    @property
    def tcp_address(self) -> str:
        return f"{self.host}:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def https_address(self) -> str | None:
        port = self.https_port
        return f"{self.host}:{port}" if port else None

    def _started(self) -> Broker:
        if self.broker is None or self._thread is None:
            raise RuntimeError("the embedded nsqd is not running; call start() first")
        return self.broker

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> EmbeddedNSQD:
        if self._thread is not None:
            raise RuntimeError("already started")
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="embedded-nsqd", daemon=True
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
        broker = Broker(self.options)
        try:
            await broker.start()
        except BaseException as exc:
            await broker.stop()
            ready.set_exception(exc)
            return
        self.broker = broker
        ready.set_result(None)
        await self._stopped.wait()
        await broker.stop()

    def stop(self) -> None:
        """Stop the broker, close every connection and join the thread."""
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

    def __enter__(self) -> EmbeddedNSQD:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- thread-safe access ------------------------------------------------------------

    def call(self, fn: Callable[[Broker], T], timeout: float = 10.0) -> T:
        """Run ``fn(broker)`` on the broker's loop and return its result."""
        broker = self._started()
        assert self._loop is not None

        async def run() -> T:
            return fn(broker)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def stats(self, topic: str | None = None, channel: str | None = None) -> dict[str, Any]:
        """The ``/stats?format=json`` document, read without HTTP."""
        return self.call(lambda b: b.stats(topic, channel))

    def publish(self, topic: str, *bodies: bytes, defer_ms: int = 0) -> None:
        """Publish directly (no TCP), e.g. to prepare a test."""
        self.call(lambda b: b.get_topic(topic).publish(list(bodies), defer_ms))

    def __repr__(self) -> str:
        if self.broker is None:
            return "EmbeddedNSQD(stopped)"
        return f"EmbeddedNSQD(tcp={self.tcp_address}, http={self.http_address})"
