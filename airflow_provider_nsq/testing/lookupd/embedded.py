"""Run the lookupd in a background thread with its own event loop (for tests)."""

from __future__ import annotations

from typing import Any, TypeVar

from ..servers.http_api import APIError
from ..servers.loop_thread import ServiceOnLoop
from . import api
from .options import LookupdOptions
from .server import Lookupd

T = TypeVar("T")


class EmbeddedNSQLookupd(ServiceOnLoop[Lookupd]):
    """An nsqlookupd-compatible server on free 127.0.0.1 ports, in a background thread.

    ::

        with EmbeddedNSQLookupd() as lookupd:
            EmbeddedNSQD(lookupd_tcp_addresses=[lookupd.tcp_address])  # nsqds register
            urlopen(f"http://{lookupd.http_address}/lookup?topic=events")  # consumers ask

    Keyword arguments are :class:`LookupdOptions` fields (nsqlookupd's flag names with
    underscores, durations in milliseconds).
    """

    thread_name = "embedded-nsqlookupd"

    def __init__(self, options: LookupdOptions | None = None, **kwargs: Any) -> None:
        base = options if options is not None else LookupdOptions()
        self.options = base.replace(**kwargs) if kwargs else base
        super().__init__()

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

    # -- lifecycle ------------------------------------------------------------------------

    async def _close(self, lookupd: Lookupd) -> None:
        await lookupd.stop()

    async def _open(self) -> Lookupd:
        lookupd = Lookupd(self.options)
        try:
            await lookupd.start()
        except BaseException:
            await lookupd.stop()
            raise
        return lookupd

    # -- thread-safe access ------------------------------------------------------------

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
