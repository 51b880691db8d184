# Generated from producer/asyncio_producer.py by scripts/generate_blocking.py: do not edit.
# Change the source and run `python scripts/generate_blocking.py`; `make lint`
# checks that this file is current.
"""The blocking form of :mod:`.asyncio_producer`, generated from it: what that
module says holds here, each ``await`` a call that blocks."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence

from ...protocol.errors import NSQConnectionError, NSQError, NSQTimeoutError, NSQValueError
from ..drivers.base import with_context
from ..drivers.blocking_driver import NSQConnection
from ..settings.address import nsqd_tcp_addresses
from ..settings.client_config import ClientConfig

__all__ = ["NSQProducer"]

log = logging.getLogger(__name__)

#: Failures of a connection attempt: the next nsqd is tried.
_UNREACHABLE = (NSQConnectionError, NSQTimeoutError)


@functools.lru_cache(maxsize=64)
def _nsqd_list(addresses: tuple[str, ...] | str) -> tuple[str, ...]:
    """:func:`nsqd_tcp_addresses` of a list a producer was given, kept: a task makes a
    producer per run over the same few lists."""
    return tuple(nsqd_tcp_addresses(addresses))


class NSQProducer:
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
        self._conn: NSQConnection | None = None
        self._past_connects = 0  # of connections dropped already

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {', '.join(self.addresses)} using "
            f"{self.address or 'none yet'}>"
        )

    def __enter__(self) -> NSQProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def connects(self) -> int:
        """TCP connections opened so far (reopens included)."""
        return self._past_connects + (self._conn.connects if self._conn is not None else 0)

    @property
    def address(self) -> str | None:
        """The nsqd publishes go to now (None before the first)."""
        return self._conn.config.address if self._conn is not None else None

    def connection(self) -> NSQConnection:
        """A connection found usable just now (its ``prepare_publish``): the one in use,
        or the first nsqd of the list that accepts one."""
        conn = self._conn
        if conn is not None:
            try:
                conn.prepare_publish()
                return conn
            except _UNREACHABLE as exc:
                log.warning("nsqd at %s is unusable (%s): failing over", conn.config.address, exc)
                self.close()
        failures: list[tuple[str, NSQError]] = []
        for address in self.addresses:
            conn = NSQConnection(self._configs[address])
            try:
                conn.prepare_publish()  # opens it
            except _UNREACHABLE as exc:
                conn.close()
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

    def close(self) -> None:
        """Close the connection in use (the next publish opens one again)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._past_connects += conn.connects
            conn.close()

    def publish(self, topic: str, body: bytes) -> None:
        """PUB one message; returns after nsqd's OK."""
        conn = self.connection()
        try:
            conn.publish(topic, body, prepared=True)
        except _UNREACHABLE as exc:
            lost = self._written_and_lost("PUB", conn, exc)
            if lost is None:
                raise
            raise lost from exc

    def defer_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        """DPUB: delivered ``delay_ms`` after it is published."""
        conn = self.connection()
        try:
            conn.defer_publish(topic, body, delay_ms, prepared=True)
        except _UNREACHABLE as exc:
            lost = self._written_and_lost("DPUB", conn, exc)
            if lost is None:
                raise
            raise lost from exc

    def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> int:
        """MPUB in as few frames as fit nsqd's limits (all to one nsqd); the frame count."""
        conn = self.connection()
        try:
            return conn.multi_publish(topic, bodies, prepared=True)
        except _UNREACHABLE as exc:
            lost = self._written_and_lost("MPUB", conn, exc)
            if lost is None:
                raise
            raise lost from exc

    def _written_and_lost(
        self, command: str, conn: NSQConnection, exc: NSQError
    ) -> NSQError | None:
        """The error to raise for ``exc``, which ended ``command`` after it was written:
        None with one nsqd (raise ``exc`` as is: the driver's error says it all);
        otherwise the connection is dropped and the error says that the outcome is
        unknown and that no other nsqd was tried."""
        if len(self.addresses) == 1:
            return None
        self.close()
        suffix = (
            f"({command} was written to nsqd at {conn.config.address} and no OK came "
            "back: the outcome is unknown, so it was not sent to another nsqd; a retry "
            "may publish it twice)"
        )
        if isinstance(exc, NSQConnectionError):
            return with_context(exc, suffix)
        return NSQConnectionError(f"{exc} {suffix}")
