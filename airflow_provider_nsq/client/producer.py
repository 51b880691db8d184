"""Publishing over an ordered failover list of nsqds: :class:`NSQProducer` (blocking) and
:class:`AsyncNSQProducer` (asyncio), with one failover policy.

Publishers write to a nearby nsqd and fail over when it is down. The line that must
never be crossed is a silent double publish: once any byte of a PUB/DPUB/MPUB may have
reached an nsqd, only its OK tells whether it was taken. So:

- a failure before anything of the command was written (the connection could not be
  opened, or the kept one was found closed and could not be reopened) moves on to the
  next nsqd in the list;
- a failure after the command was written (no OK seen: reset, close, timeout) raises
  :class:`NSQConnectionError` saying the outcome is unknown, and tries no other nsqd:
  the task's retry gives at-least-once, with a possible duplicate the caller knows of;
- an error frame (``E_BAD_TOPIC``, ``E_PUB_FAILED`` ...) is nsqd's answer: raised as is.

The connection in use is kept while it lives (or can be reopened to the same nsqd);
when it cannot, the list is tried again from the top, so publishing returns to the
first nsqd once it is back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Generic, TypeVar

from ..protocol.errors import NSQConnectionError, NSQError, NSQTimeoutError, NSQValueError
from .drivers.asyncio_driver import AsyncNSQConnection
from .drivers.base import with_context
from .drivers.blocking_driver import NSQConnection
from .settings.address import nsqd_tcp_addresses
from .settings.client_config import ClientConfig

log = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C", NSQConnection, AsyncNSQConnection)

#: Failures of a connection attempt: the next nsqd is tried.
_UNREACHABLE = (NSQConnectionError, NSQTimeoutError)


def nsqd_addresses(config: ClientConfig, extra: Sequence[str] | str = ()) -> list[str]:
    """A connection's nsqds in order: ``config``'s host:port first, then ``extra``
    (``nsqd_tcp_addresses``), without duplicates, each as ``host:port``."""
    return list(dict.fromkeys([config.address, *nsqd_tcp_addresses(extra)]))


class _FailoverList(Generic[C]):
    """The policy both producers share: the list, what moves on to the next nsqd, and
    what a failure says. Subclasses only open, check and write their connections."""

    def __init__(self, addresses: Sequence[str] | str, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self.addresses: list[str] = nsqd_tcp_addresses(addresses)
        if not self.addresses:
            raise NSQValueError(f"{type(self).__name__} needs at least one nsqd TCP address")
        own = self.config
        # The usual single nsqd needs no copy of the config.
        self._configs: dict[str, ClientConfig] = {
            a: own if a == own.address else own.for_nsqd(a) for a in self.addresses
        }
        self._conn: C | None = None
        self._past_connects = 0  # of connections dropped already

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {', '.join(self.addresses)} using "
            f"{self.address or 'none yet'}>"
        )

    @property
    def connects(self) -> int:
        """TCP connections opened so far (reopens included)."""
        return self._past_connects + (self._conn.connects if self._conn is not None else 0)

    @property
    def address(self) -> str | None:
        """The nsqd publishes go to now (None before the first)."""
        return self._conn.config.address if self._conn is not None else None

    def _unusable(self, exc: NSQError) -> C | None:
        """The kept connection could not be made ready: forget it, fail over."""
        if self._conn is not None:
            log.warning("nsqd at %s is unusable (%s): failing over", self._conn.config.address, exc)
        return self._forget()

    def _forget(self) -> C | None:
        """Stop using the kept connection; it is returned for the caller to close."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._past_connects += conn.connects
        return conn

    def _skipped(self, failures: list[tuple[str, NSQError]], address: str, exc: NSQError) -> None:
        failures.append((address, exc))
        if len(self.addresses) > 1:
            log.warning("nsqd at %s skipped for publishing: %s", address, exc)

    def _none_accepted(self, failures: list[tuple[str, NSQError]]) -> NSQError:
        if len(failures) == 1:
            return failures[0][1]  # one nsqd: its own error, as a plain connection raises it
        return NSQConnectionError(
            "no nsqd accepted a connection: " + "; ".join(f"{a} ({e})" for a, e in failures)
        )

    def _written_and_lost(self, command: str, conn: C, exc: NSQError) -> NSQError | None:
        """The error for a command written with no OK back (None: raise ``exc`` as is,
        there is no other nsqd to have tried)."""
        if len(self.addresses) == 1:
            return None  # nowhere to fail over to: the driver's error says it all
        suffix = (
            f"({command} was written to nsqd at {conn.config.address} and no OK came "
            "back: the outcome is unknown, so it was not sent to another nsqd; a retry "
            "may publish it twice)"
        )
        if isinstance(exc, NSQConnectionError):
            return with_context(exc, suffix)
        return NSQConnectionError(f"{exc} {suffix}")


class NSQProducer(_FailoverList[NSQConnection]):
    """A blocking publisher over an ordered failover list of nsqds.

    :param addresses: the nsqds' TCP addresses (``host:port``), in order of preference.
    :param config: settings shared by every connection (host and port are replaced).
    """

    def __enter__(self) -> NSQProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def connection(self) -> NSQConnection:
        """A live connection: the one in use, or the first nsqd that accepts one."""
        conn = self._conn
        if conn is not None:
            try:
                conn.prepare_publish()  # reads heartbeats; reopens it if nsqd closed it
                return conn
            except _UNREACHABLE as exc:
                dropped = self._unusable(exc)
                if dropped is not None:
                    dropped.close()
        failures: list[tuple[str, NSQError]] = []
        for address in self.addresses:
            conn = NSQConnection(self._configs[address])
            try:
                conn.connect()
            except _UNREACHABLE as exc:
                self._skipped(failures, address, exc)
                continue
            self._conn = conn
            return conn
        raise self._none_accepted(failures)

    def close(self) -> None:
        conn = self._forget()
        if conn is not None:
            conn.close()

    def _send(self, command: str, write: Callable[[NSQConnection], T]) -> T:
        conn = self.connection()
        try:
            return write(conn)
        except _UNREACHABLE as exc:
            lost = self._written_and_lost(command, conn, exc)
            if lost is None:
                raise
            self.close()
            raise lost from exc

    def publish(self, topic: str, body: bytes) -> None:
        """PUB one message; returns after nsqd's OK."""
        self._send("PUB", lambda conn: conn.publish(topic, body))

    def defer_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        """DPUB: delivered ``delay_ms`` after it is published."""
        self._send("DPUB", lambda conn: conn.defer_publish(topic, body, delay_ms))

    def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> int:
        """MPUB in as few frames as fit nsqd's limits (all to one nsqd); the frame count."""
        batch = list(bodies)
        return self._send("MPUB", lambda conn: conn.multi_publish(topic, batch))


class AsyncNSQProducer(_FailoverList[AsyncNSQConnection]):
    """:class:`NSQProducer` on the asyncio event loop (no thread): the same list, the
    same failover policy, for code that runs in the triggerer.

    :param addresses: the nsqds' TCP addresses (``host:port``), in order of preference.
    :param config: settings shared by every connection (host and port are replaced).
    """

    async def __aenter__(self) -> AsyncNSQProducer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connection(self) -> AsyncNSQConnection:
        """A live connection: the one in use, or the first nsqd that accepts one."""
        conn = self._conn
        if conn is not None:
            try:
                await conn.prepare_publish()  # reopens it if nsqd closed it
                return conn
            except _UNREACHABLE as exc:
                dropped = self._unusable(exc)
                if dropped is not None:
                    await dropped.close()
        failures: list[tuple[str, NSQError]] = []
        for address in self.addresses:
            conn = AsyncNSQConnection(self._configs[address])
            try:
                await conn.connect()
            except _UNREACHABLE as exc:
                await conn.close()
                self._skipped(failures, address, exc)
                continue
            self._conn = conn
            return conn
        raise self._none_accepted(failures)

    async def close(self) -> None:
        conn = self._forget()
        if conn is not None:
            await conn.close()

    async def _send(self, command: str, write: Callable[[AsyncNSQConnection], Awaitable[T]]) -> T:
        conn = await self.connection()
        try:
            return await write(conn)
        except _UNREACHABLE as exc:
            lost = self._written_and_lost(command, conn, exc)
            if lost is None:
                raise
            await self.close()
            raise lost from exc

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB one message; returns after nsqd's OK."""
        await self._send("PUB", lambda conn: conn.publish(topic, body))

    async def defer_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        """DPUB: delivered ``delay_ms`` after it is published."""
        await self._send("DPUB", lambda conn: conn.defer_publish(topic, body, delay_ms))

    async def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> int:
        """MPUB in as few frames as fit nsqd's limits (all to one nsqd); the frame count."""
        batch = list(bodies)
        return await self._send("MPUB", lambda conn: conn.multi_publish(topic, batch))
