"""Publishing over an ordered failover list of nsqds, asyncio first:
:class:`AsyncNSQProducer`. The blocking :class:`~.blocking_producer.NSQProducer` is
generated from this module (``scripts/generate_blocking.py``): the policy below is written once,
here.

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

The line between the two is the connection's ``prepare_publish``: each publish asks it
once whether the connection is usable (it answers heartbeats waiting, and reopens a
connection nsqd closed or that sat idle past nsqd's heartbeat deadline), and the
publish right after it trusts that answer (``prepared=True``). What ``prepare_publish``
raises was raised before the command was written; what the publish raises, after.

The connection in use is kept while it lives (or can be reopened to the same nsqd);
when it cannot, the list is tried again from the top, so publishing returns to the
first nsqd once it is back.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence

from ...protocol.errors import NSQConnectionError, NSQError, NSQTimeoutError, NSQValueError
from ..drivers.asyncio_driver import AsyncNSQConnection
from ..drivers.base import with_context
from ..settings.address import nsqd_tcp_addresses
from ..settings.client_config import ClientConfig

__all__ = ["AsyncNSQProducer"]

log = logging.getLogger(__name__)

#: Failures of a connection attempt: the next nsqd is tried.
_UNREACHABLE = (NSQConnectionError, NSQTimeoutError)


@functools.lru_cache(maxsize=64)
def _nsqd_list(addresses: tuple[str, ...] | str) -> tuple[str, ...]:
    """:func:`nsqd_tcp_addresses` of a list a producer was given, kept: a task makes a
    producer per run over the same few lists."""
    return tuple(nsqd_tcp_addresses(addresses))


class AsyncNSQProducer:
    """A publisher over an ordered failover list of nsqds (the policy: the module's
    docstring). Not safe to share between threads.

    :param addresses: the nsqds' TCP addresses (``host:port``), in order of preference.
    :param config: settings shared by every connection (host and port are replaced).
    """

    def __init__(self, addresses: Sequence[str] | str, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        try:
            key = addresses if isinstance(addresses, str) else tuple(addresses)
            self.addresses: list[str] = list(_nsqd_list(key))
        except TypeError:  # not hashable: not a list of strings, said by the parser
            self.addresses = nsqd_tcp_addresses(addresses)
        if not self.addresses:
            raise NSQValueError(f"{type(self).__name__} needs at least one nsqd TCP address")
        own = self.config
        # The usual single nsqd needs no copy of the config.
        self._configs: dict[str, ClientConfig] = {
            a: own if a == own.address else own.for_nsqd(a) for a in self.addresses
        }
        self._conn: AsyncNSQConnection | None = None
        self._past_connects = 0  # of connections dropped already

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {', '.join(self.addresses)} using "
            f"{self.address or 'none yet'}>"
        )

    async def __aenter__(self) -> AsyncNSQProducer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def connects(self) -> int:
        """TCP connections opened so far (reopens included)."""
        return self._past_connects + (self._conn.connects if self._conn is not None else 0)

    @property
    def address(self) -> str | None:
        """The nsqd publishes go to now (None before the first)."""
        return self._conn.config.address if self._conn is not None else None

    async def connection(self) -> AsyncNSQConnection:
        """A connection found usable just now (its ``prepare_publish``): the one in use,
        or the first nsqd of the list that accepts one."""
        conn = self._conn
        if conn is not None:
            try:
                await conn.prepare_publish()
                return conn
            except _UNREACHABLE as exc:
                log.warning("nsqd at %s is unusable (%s): failing over", conn.config.address, exc)
                await self.close()
        failures: list[tuple[str, NSQError]] = []
        for address in self.addresses:
            conn = AsyncNSQConnection(self._configs[address])
            try:
                await conn.prepare_publish()  # opens it
            except _UNREACHABLE as exc:
                await conn.close()
                failures.append((address, exc))
                if len(self.addresses) > 1:
                    log.warning("nsqd at %s skipped for publishing: %s", address, exc)
                continue
            self._conn = conn
            return conn
        if len(failures) == 1:
            raise failures[0][1]  # one nsqd: its own error, as a plain connection raises it
        raise NSQConnectionError(
            "no nsqd accepted a connection: " + "; ".join(f"{a} ({e})" for a, e in failures)
        )

    async def close(self) -> None:
        """Close the connection in use (the next publish opens one again)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._past_connects += conn.connects
            await conn.close()

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB one message; returns after nsqd's OK."""
        conn = await self.connection()
        try:
            await conn.publish(topic, body, prepared=True)
        except _UNREACHABLE as exc:
            lost = await self._written_and_lost("PUB", conn, exc)
            if lost is None:
                raise
            raise lost from exc

    async def defer_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        """DPUB: delivered ``delay_ms`` after it is published."""
        conn = await self.connection()
        try:
            await conn.defer_publish(topic, body, delay_ms, prepared=True)
        except _UNREACHABLE as exc:
            lost = await self._written_and_lost("DPUB", conn, exc)
            if lost is None:
                raise
            raise lost from exc

    async def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> int:
        """MPUB in as few frames as fit nsqd's limits (all to one nsqd); the frame count."""
        conn = await self.connection()
        try:
            return await conn.multi_publish(topic, bodies, prepared=True)
        except _UNREACHABLE as exc:
            lost = await self._written_and_lost("MPUB", conn, exc)
            if lost is None:
                raise
            raise lost from exc

    async def _written_and_lost(
        self, command: str, conn: AsyncNSQConnection, exc: NSQError
    ) -> NSQError | None:
        """The error to raise for ``exc``, which ended ``command`` after it was written:
        None with one nsqd (raise ``exc`` as is: the driver's error says it all);
        otherwise the connection is dropped and the error says that the outcome is
        unknown and that no other nsqd was tried."""
        if len(self.addresses) == 1:
            return None
        await self.close()
        suffix = (
            f"({command} was written to nsqd at {conn.config.address} and no OK came "
            "back: the outcome is unknown, so it was not sent to another nsqd; a retry "
            "may publish it twice)"
        )
        if isinstance(exc, NSQConnectionError):
            return with_context(exc, suffix)
        return NSQConnectionError(f"{exc} {suffix}")
