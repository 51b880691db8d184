"""The lookupd: its state (:mod:`.state`) served on TCP and HTTP listeners on one loop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..servers.http_server import start_http_server
from ..servers.listeners import Listeners
from . import api
from .options import LookupdOptions
from .state import LookupdState
from .tcp import PeerConnection

log = logging.getLogger("airflow_provider_nsq.testing.lookupd")


class Lookupd(LookupdState):
    """An nsqlookupd-compatible server for tests and demos, on the running asyncio loop.

    nsqds register over TCP (``"  V1"``); consumers ask the HTTP API. Everything is in
    memory, as in nsqlookupd. Use :class:`~.embedded.EmbeddedNSQLookupd` to run it in a
    background thread, or ``python -m airflow_provider_nsq.testing.lookupd``.
    """

    def __init__(self, options: LookupdOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        self.app = api.router(self)
        self._listeners = Listeners()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        opts = self.options
        self.tcp_port = self._listeners.add(
            await loop.create_server(lambda: PeerConnection(self), opts.host, opts.tcp_port)
        )
        self.http_port = self._listeners.add(
            await start_http_server(
                self.app, opts.host, opts.http_port, connections=self._listeners.http_connections
            )
        )
        # One line per listener, in nsqlookupd's words (see the broker's start()).
        log.info("nsqlookupd-compatible lookupd %s", self.version)
        log.info("TCP: listening on %s:%d", self.host, self.tcp_port)
        log.info("HTTP: listening on %s:%d", self.host, self.http_port)

    async def stop(self) -> None:
        def drop_connections() -> None:
            for connection in list(self.connections):
                connection.abort()

        await self._listeners.close(drop_connections)
        log.info("nsqlookupd-compatible lookupd stopped")
