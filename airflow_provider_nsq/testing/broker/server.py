"""The broker: topics, connected clients, and the TCP / HTTP(S) listeners on one loop."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..http_server import start_http_server
from . import api
from .client import ClientConnection
from .message import IdGenerator
from .options import NSQD_VERSION, BrokerOptions
from .topic import Topic

log = logging.getLogger("airflow_provider_nsq.testing.broker")


class Broker:
    """An nsqd-compatible broker for tests and demos, on the running asyncio loop.

    Not a production broker: everything is in memory (no disk queue, nothing survives a
    restart), and ``mem_queue_size`` is a hard bound per queue (see docs/testing.md).
    Use :class:`~airflow_provider_nsq.testing.broker.EmbeddedNSQD` to run it in a
    background thread, or ``python -m airflow_provider_nsq.testing.broker``.
    """

    def __init__(self, options: BrokerOptions | None = None, **kwargs: Any) -> None:
        base = options if options is not None else BrokerOptions()
        self.options = base.replace(**kwargs) if kwargs else base
        self.version = NSQD_VERSION
        self.topics: dict[str, Topic] = {}
        self.clients: set[ClientConnection] = set()
        self.ids = IdGenerator()
        self.start_time = int(time.time())
        self.ssl_context = self.options.server_ssl_context()
        self.auth_client_ssl_context = self._auth_client_context()
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="nsqd-auth")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[asyncio.Server] = []
        self.host = self.options.host
        self.tcp_port = 0
        self.http_port = 0
        self.https_port: int | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the broker is not started")
        return self._loop

    def _auth_client_context(self) -> ssl.SSLContext:
        # For nsqd's 403 {"https_port": N} retry against the auth server.
        ctx = ssl.create_default_context()
        if self.options.tls_root_ca_file:
            ctx.load_verify_locations(self.options.tls_root_ca_file)
        return ctx

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        opts = self.options
        tcp = await self._loop.create_server(
            lambda: ClientConnection(self), opts.host, opts.tcp_port, backlog=1024
        )
        self._servers.append(tcp)
        self.tcp_port = tcp.sockets[0].getsockname()[1]
        app = api.build_app(self)
        http_options: dict[str, Any] = {
            # Refuse what no route would accept before reading it.
            "max_body_size": opts.max_body_size + opts.max_msg_size,
            "body_too_large": api.body_too_large,
        }
        http = await start_http_server(app, opts.host, opts.http_port, **http_options)
        self._servers.append(http)
        self.http_port = http.sockets[0].getsockname()[1]
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
            self._servers.append(https)
            self.https_port = https.sockets[0].getsockname()[1]
        log.info(
            "nsqd-compatible broker %s listening: TCP %s:%d, HTTP %s:%d%s",
            self.version,
            self.host,
            self.tcp_port,
            self.host,
            self.http_port,
            f", HTTPS {self.host}:{self.https_port}" if self.https_port else "",
        )

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for client in list(self.clients):
            client.close_connection(abort=True)
        for topic in list(self.topics.values()):
            topic.close()
        self.topics.clear()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        # Let the transports run their connection_lost callbacks and close sockets.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self.executor.shutdown(wait=False, cancel_futures=True)
        log.info("nsqd-compatible broker stopped")

    # -- topics -----------------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = self.topics[name] = Topic(self, name, self.loop)
        return topic

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        topic.close()
        return True

    # -- stats --------------------------------------------------------------------------------

    def stats(
        self, topic: str | None = None, channel: str | None = None, include_clients: bool = True
    ) -> dict[str, Any]:
        """``/stats?format=json`` as nsqd 1.3 shapes it (no ``data`` wrapper)."""
        # Go's nil slices: "topics" is null when the asked topic does not exist, and
        # "producers" is null when there are none or clients were not asked for.
        if topic and topic not in self.topics:
            topics: list[dict[str, Any]] | None = None
        else:
            topics = []
        for name in sorted(self.topics):
            if topic and name != topic:
                continue
            t = self.topics[name]
            if channel and channel not in t.channels:
                continue  # nsqd leaves the topic out when the channel is missing
            topics.append(t.stats(channel or None, include_clients))  # type: ignore[union-attr]
        producers = [c.stats() for c in self.clients if c.pub_counts] if include_clients else []
        return {
            "version": self.version,
            "health": "OK",
            "start_time": self.start_time,
            "topics": topics,
            "memory": _memory_stats(),
            "producers": producers or None,
        }


def _memory_stats() -> dict[str, int]:
    # Go runtime numbers have no Python equivalent; keep nsqd's keys.
    try:
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except (ImportError, OSError):  # pragma: no cover - not on Linux
        rss = 0
    return {
        "heap_objects": 0,
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": rss,
        "heap_released_bytes": 0,
        "gc_pause_usec_100": 0,
        "gc_pause_usec_99": 0,
        "gc_pause_usec_95": 0,
        "next_gc_bytes": 0,
        "gc_total_runs": 0,
    }
