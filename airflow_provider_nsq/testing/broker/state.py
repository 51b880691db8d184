"""The broker's state: options, topics, connected clients and what they share.

:class:`BrokerState` is what client sessions, the HTTP API and the lookupd registration
work on; :class:`~.server.Broker` adds the listeners and the lifecycle.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from .channel import Channel
from .message import IdGenerator
from .options import NSQD_VERSION, BrokerOptions
from .topic import Topic


class Session(Protocol):
    """What the broker keeps of a connected client."""

    pub_counts: dict[str, int]

    def stats(self) -> dict[str, Any]: ...

    def close_connection(self, reset: bool = False, abort: bool = False) -> None: ...


class Registration(Protocol):
    """Told of every topic and channel made or deleted (nsqlookupd registration)."""

    def topic_created(self, topic: Topic) -> None: ...

    def topic_deleted(self, topic: Topic) -> None: ...

    def channel_created(self, channel: Channel) -> None: ...

    def channel_deleted(self, channel: Channel) -> None: ...


class BrokerState:
    """Topics, connected clients and shared resources of one broker (see Broker)."""

    def __init__(self, options: BrokerOptions | None = None, **kwargs: Any) -> None:
        base = options if options is not None else BrokerOptions()
        self.options = base.replace(**kwargs) if kwargs else base
        self.version = NSQD_VERSION
        self.topics: dict[str, Topic] = {}
        self.clients: set[Session] = set()
        self.ids = IdGenerator()
        self.start_time = int(time.time())
        self.ssl_context = self.options.server_ssl_context()
        self.auth_client_ssl_context = self._auth_client_context()
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="nsqd-auth")
        self._loop: asyncio.AbstractEventLoop | None = None
        self.host = self.options.host
        self.tcp_port = 0
        self.http_port = 0
        self.https_port: int | None = None
        self.registration: Registration | None = None  # with lookupd_tcp_addresses

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

    # -- topics -----------------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = self.topics[name] = Topic(name, self.options, self.loop, self.ids, self)
            if self.registration is not None:
                self.registration.topic_created(topic)
        return topic

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        if self.registration is not None:
            self.registration.topic_deleted(topic)
        topic.close()
        return True

    # -- what topics tell the broker (TopicListener) ----------------------------------------

    def channel_created(self, channel: Channel) -> None:
        if self.registration is not None:
            self.registration.channel_created(channel)

    def channel_deleted(self, channel: Channel) -> None:
        if self.registration is not None:
            self.registration.channel_deleted(channel)

    def last_channel_gone(self, topic: Topic) -> None:
        self.delete_topic(topic.name)

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
