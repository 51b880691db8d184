"""Run the lookupd in a background thread with its own event loop (for tests)."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from ..http_api import APIError
from ..loop_thread import LoopThread
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
        self._runner: LoopThread[Lookupd] = LoopThread("embedded-nsqlookupd")

    @property
    def lookupd(self) -> Lookupd | None:
        """The running lookupd (None when stopped): use it on its loop only, via :meth:`call`."""
        return self._runner.service

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
        lookupd = self._runner.service
        if lookupd is None:
            raise RuntimeError("the embedded nsqlookupd is not running; call start() first")
        return lookupd

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> EmbeddedNSQLookupd:
        self._runner.start(self._open, Lookupd.stop)
        return self

    async def _open(self) -> Lookupd:
        lookupd = Lookupd(self.options)
        try:
            await lookupd.start()
        except BaseException:
            await lookupd.stop()
            raise
        return lookupd

    def stop(self) -> None:
        """Stop the lookupd, close every connection (the nsqds see EOF) and join."""
        self._runner.stop()

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
        return self._runner.call(fn, timeout)

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
