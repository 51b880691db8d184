"""The broker: its state (:mod:`.state`) served on TCP and HTTP(S) listeners on one loop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..servers.http_server import start_http_server
from ..servers.listeners import Listeners
from . import api
from .commands import HANDLERS
from .lookupd_registration import LookupdRegistration
from .options import BrokerOptions
from .session import ClientSession
from .state import BrokerState

log = logging.getLogger("airflow_provider_nsq.testing.broker")


class Broker(BrokerState):
    """An nsqd-compatible broker for tests and demos, on the running asyncio loop.

    Not a production broker: everything is in memory (no disk queue, nothing survives a
    restart), and ``mem_queue_size`` is a hard bound per queue (see docs/testing.md).
    Use :class:`~airflow_provider_nsq.testing.broker.EmbeddedNSQD` to run it in a
    background thread, or ``python -m airflow_provider_nsq.testing.broker``.
    """

    def __init__(self, options: BrokerOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        self._listeners = Listeners()
        self._lookupd: LookupdRegistration | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        opts = self.options
        self.tcp_port = self._listeners.add(
            await self._loop.create_server(
                lambda: ClientSession(self, HANDLERS), opts.host, opts.tcp_port, backlog=1024
            )
        )
        app = api.build_app(self)
        http_options: dict[str, Any] = {
            # Refuse what no route would accept before reading it.
            "max_body_size": opts.max_body_size + opts.max_msg_size,
            "body_too_large": api.body_too_large,
            "connections": self._listeners.http_connections,
        }
        self.http_port = self._listeners.add(
            await start_http_server(app, opts.host, opts.http_port, **http_options)
        )
        if self.ssl_context is not None:
            https = await start_http_server(
                app,
                opts.host,
                opts.https_port or 0,
                # nsqd asks HTTPS clients for certificates too; here HTTPS does not, so
                # the test helpers can read /stats of a require-verify broker.
                ssl_context=self.options.server_ssl_context(client_auth=False),
                **http_options,
            )
            self.https_port = self._listeners.add(https)
        if opts.lookupd_tcp_addresses:
            self.registration = self._lookupd = LookupdRegistration(self)
            await self._lookupd.start()
        # One line per listener, in nsqd's words: scripts that start nsqd read its ports
        # from them (gnsq's test harness does).
        log.info("nsqd-compatible broker %s", self.version)
        log.info("TCP: listening on %s:%d", self.host, self.tcp_port)
        log.info("HTTP: listening on %s:%d", self.host, self.http_port)
        if self.https_port:
            log.info("HTTPS: listening on %s:%d", self.host, self.https_port)

    async def stop(self) -> None:
        if self._lookupd is not None:
            await self._lookupd.stop()  # first: nsqd sends no UNREGISTER on exit
            self.registration = self._lookupd = None

        def drop_connections() -> None:
            for client in list(self.clients):
                client.close_connection(abort=True)
            for topic in list(self.topics.values()):
                topic.close()
            self.topics.clear()

        await self._listeners.close(drop_connections)
        self.executor.shutdown(wait=False, cancel_futures=True)
        log.info("nsqd-compatible broker stopped")
