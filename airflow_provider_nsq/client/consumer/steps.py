"""The steps of a consumer's sequences: the I/O the core asks its runner to do.

Each of the core's sequences (a window, start, read, pump, close) is a generator that
yields these and is sent their outcomes (or has their error thrown in); the blocking and
asyncio runners are the only code that does the I/O, each its own way.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..config import ClientConfig
from ..lookupd import LookupdClient

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Lookup:
    """Ask every nsqlookupd which nsqds have ``topic``. Outcome: the producers (a lookup
    error is thrown into the sequence)."""

    lookupd: LookupdClient
    topic: str


@dataclass(frozen=True, slots=True)
class Connect:
    """Open one connection per config (asyncio: all at once), IDENTIFY and SUB it.
    Outcome: per config, in order, the subscribed connection or the exception that
    stopped it (the runner closed that connection). The asyncio runner sets each
    connection's ``on_wake``."""

    configs: tuple[ClientConfig, ...]
    topic: str
    channel: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait up to ``timeout`` seconds for one of ``connections`` to deliver or fail (none:
    sleep); the blocking runner reads what arrived (heartbeats are answered as it does).
    Outcome: None."""

    timeout: float
    connections: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class StartClose:
    """CLS on each connection and wait for nsqd's CLOSE_WAIT (the blocking runner then
    reads what nsqd sent before it). Outcome: per connection, None or the exception."""

    connections: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class CloseConnections:
    """Close each connection (it REQs what it still holds itself). Outcome: None."""

    connections: tuple[Any, ...]


Step = Lookup | Connect | Wait | StartClose | CloseConnections
#: A sequence written as steps: it yields steps, is sent their outcomes, returns a T.
Steps = Generator[Step, Any, T]
