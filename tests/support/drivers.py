"""Run one scenario against both drivers: the asyncio one behind a small sync facade."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from airflow_provider_nsq.client import (
    AsyncNSQConnection,
    AsyncNSQConsumer,
    ClientConfig,
    NSQConnection,
    NSQConsumer,
)

DRIVERS = ["blocking", "asyncio"]


class AsyncFacade:
    """Calls the coroutines of an asyncio object (by default an AsyncNSQConnection) to
    completion on a private loop."""

    def __init__(self, config: ClientConfig | None = None, target: Any = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn = target if target is not None else AsyncNSQConnection(config)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.conn, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if inspect.isawaitable(result):
                return self.loop.run_until_complete(result)
            return result

        return call

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.conn.close())
        finally:
            self.loop.run_until_complete(asyncio.sleep(0))
            self.loop.close()

    def __enter__(self) -> AsyncFacade:
        if isinstance(self.conn, AsyncNSQConnection) and not self.conn.connected:
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_driver(kind: str, config: ClientConfig) -> Any:
    return NSQConnection(config) if kind == "blocking" else AsyncFacade(config)


def make_consumer(kind: str, topic: str, channel: str, config: ClientConfig, **kw: Any) -> Any:
    """The consumer of ``kind`` over the nsqd of ``config``: ``NSQConsumer``, or an
    ``AsyncNSQConsumer`` behind the sync facade (use it as a context manager)."""
    if kind == "blocking":
        return NSQConsumer(topic, channel, config=config, **kw)
    return AsyncFacade(target=AsyncNSQConsumer(topic, channel, config=config, **kw))


def consume_window(kind: str, config: ClientConfig, topic: str, channel: str, **kw: Any) -> list:
    """One consume window (``max_messages=``, ``timeout=``, ``ack=``) on a consumer of
    ``kind`` that is closed afterwards: what a connection's own window did."""
    with make_consumer(kind, topic, channel, config) as consumer:
        return consumer.consume(**kw)
