"""The servers a real Airflow needs beside it: the ``postgres`` server its metadata DBs
live on, and the ``redis`` server its CeleryExecutor uses as its broker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A PostgreSQL server for real Airflows' metadata DBs (one database each: see
    :mod:`.postgres_server`), started on first use and stopped at the end of the session;
    skips, naming what is missing, where PostgreSQL cannot be had."""
    from .postgres_server import PostgresServer, missing

    reason = missing()
    if reason:
        pytest.skip(reason)
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis() -> Iterator[Any]:
    """A Redis server, the broker of real Airflows' CeleryExecutor (see
    :mod:`.redis_server`), started on first use and stopped at the end of the session;
    skips, naming what is missing, where Redis (or Celery) cannot be had."""
    from .redis_server import RedisServer, missing

    reason = missing()
    if reason:
        pytest.skip(reason)
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()
