"""Run the lookupd in a background thread with its own event loop (for tests)."""

from __future__ import annotations

from typing import Any

from ..servers.embedded_daemon import EmbeddedDaemon
from ..servers.http_api import APIError
from . import api
from .options import LookupdOptions
from .server import Lookupd


class EmbeddedNSQLookupd(EmbeddedDaemon[LookupdOptions, Lookupd]):
    """An nsqlookupd-compatible server on free 127.0.0.1 ports, in a background thread.

    ::

        with EmbeddedNSQLookupd() as lookupd:
            EmbeddedNSQD(lookupd_tcp_addresses=[lookupd.tcp_address])  # nsqds register
            urlopen(f"http://{lookupd.http_address}/lookup?topic=events")  # consumers ask

    Keyword arguments are :class:`LookupdOptions` fields (nsqlookupd's flag names with
    underscores, durations in milliseconds). ``tcp_address`` is where nsqds register
    (``--lookupd-tcp-address``), ``http_address`` where consumers look topics up
    (``lookupd_http_addresses``).
    """

    thread_name = "embedded-nsqlookupd"

    def __init__(self, options: LookupdOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options or LookupdOptions(), kwargs, Lookupd)

    @property
    def lookupd(self) -> Lookupd | None:
        """The running lookupd (None when stopped): use it on its loop only, via :meth:`call`."""
        return self.daemon

    # -- thread-safe access ------------------------------------------------------------

    def producers(self, topic: str) -> list[dict[str, Any]]:
        """``/lookup``'s producers of ``topic`` (``[]`` if unknown), read without HTTP."""

        def read(lookupd: Lookupd) -> list[dict[str, Any]]:
            try:
                return list(api.lookup(lookupd, {"topic": [topic]})["producers"])
            except APIError:
                return []

        return self.call(read)
