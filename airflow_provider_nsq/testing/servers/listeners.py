"""A daemon's listening sockets on the running loop, opened one by one and closed together.

The embedded nsqd (TCP, HTTP, HTTPS) and nsqlookupd (TCP, HTTP) stop the same way: stop
listening, drop the connections still open (from Python 3.12.1 an :class:`asyncio.Server`
waits for them in ``wait_closed()``), wait for the listeners to close, then give the
transports a turn to close their sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Listeners:
    """The :class:`asyncio.Server` objects of one daemon."""

    def __init__(self) -> None:
        self._servers: list[asyncio.Server] = []
        #: The open HTTP connections, which the daemons do not track themselves: give it
        #: to ``start_http_server(connections=...)``; :meth:`close` drops them.
        self.http_connections: set[asyncio.Transport] = set()

    def add(self, server: asyncio.Server) -> int:
        """Keep ``server`` until :meth:`close`; returns the port it listens on (the free
        port picked when it was asked for port 0)."""
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def close(self, drop_connections: Callable[[], None]) -> None:
        """Stop listening, call ``drop_connections()``, drop the HTTP connections, and
        wait until every listener is closed and its sockets released."""
        for server in self._servers:
            server.close()
        drop_connections()
        for transport in list(self.http_connections):
            transport.abort()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        # Let the transports run their connection_lost callbacks and close sockets.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
