"""The lookupd: its registration DB and the TCP / HTTP listeners on one asyncio loop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..servers.http_server import start_http_server
from . import api
from .options import NSQLOOKUPD_VERSION, LookupdOptions
from .registry import RegistrationDB
from .tcp import PeerConnection

log = logging.getLogger("airflow_provider_nsq.testing.lookupd")


class Lookupd:
    """An nsqlookupd-compatible server for tests and demos, on the running asyncio loop.

    nsqds register over TCP (``"  V1"``); consumers ask the HTTP API. Everything is in
    memory, as in nsqlookupd. Use :class:`~.embedded.EmbeddedNSQLookupd` to run it in a
    background thread, or ``python -m airflow_provider_nsq.testing.lookupd``.
    """

    def __init__(self, options: LookupdOptions | None = None, **kwargs: Any) -> None:
        base = options if options is not None else LookupdOptions()
        self.options = base.replace(**kwargs) if kwargs else base
        self.version = NSQLOOKUPD_VERSION
        self.db = RegistrationDB()
        self.connections: set[PeerConnection] = set()
        self.host = self.options.host
        self.tcp_port = 0
        self.http_port = 0
        self._servers: list[asyncio.Server] = []
        self.app = api.router(self)

    @property
    def inactive_producer_timeout_s(self) -> float:
        return self.options.inactive_producer_timeout / 1000.0

    @property
    def tombstone_lifetime_s(self) -> float:
        return self.options.tombstone_lifetime / 1000.0

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        opts = self.options
        tcp = await loop.create_server(lambda: PeerConnection(self), opts.host, opts.tcp_port)
        self._servers.append(tcp)
        self.tcp_port = tcp.sockets[0].getsockname()[1]
        http = await start_http_server(self.app, opts.host, opts.http_port)
        self._servers.append(http)
        self.http_port = http.sockets[0].getsockname()[1]
        log.info(
            "nsqlookupd-compatible lookupd %s listening: TCP %s:%d, HTTP %s:%d",
            self.version,
            self.host,
            self.tcp_port,
            self.host,
            self.http_port,
        )

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        # Let the transports run their connection_lost callbacks and close sockets.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        log.info("nsqlookupd-compatible lookupd stopped")
