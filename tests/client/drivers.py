"""Run one scenario against both drivers: the asyncio one behind a small sync facade."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from airflow_provider_nsq.client import AsyncNSQConnection, ClientConfig, NSQConnection

DRIVERS = ["blocking", "asyncio"]


class AsyncFacade:
    """Calls AsyncNSQConnection's coroutines to completion on a private loop."""

    def __init__(self, config: ClientConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn = AsyncNSQConnection(config)

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
        if not self.conn.connected:
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_driver(kind: str, config: ClientConfig) -> Any:
    return NSQConnection(config) if kind == "blocking" else AsyncFacade(config)
