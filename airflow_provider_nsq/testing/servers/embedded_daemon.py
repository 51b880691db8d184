"""An embedded daemon: the broker or the lookupd on free 127.0.0.1 ports, in a thread.

:class:`EmbeddedDaemon` is what :class:`~..broker.EmbeddedNSQD` and
:class:`~..lookupd.EmbeddedNSQLookupd` share: the options (the daemon's flags as keyword
arguments), the daemon opened and closed on its own loop thread (:mod:`.loop_thread`),
and its addresses once it listens. Each subclass adds what only its daemon has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from .addresses import DaemonAddresses
from .loop_thread import ServiceOnLoop


class Daemon(Protocol):
    """A server with a TCP and an HTTP listener, started and stopped on the running loop."""

    tcp_port: int
    http_port: int

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


_Self = TypeVar("_Self")


class DaemonOptions(Protocol):
    """The daemon's settings: where it listens, among others."""

    @property
    def host(self) -> str: ...

    def replace(self: _Self, **changes: Any) -> _Self: ...


OptionsT = TypeVar("OptionsT", bound=DaemonOptions)
DaemonT = TypeVar("DaemonT", bound=Daemon)


class EmbeddedDaemon(DaemonAddresses, ServiceOnLoop[DaemonT], Generic[OptionsT, DaemonT]):
    """A daemon made by ``make(options)``, run on its own event loop in a daemon thread.

    ``changes`` are options to replace (the subclass's keyword arguments). ``start()``
    returns once the daemon listens (an error while starting is raised there, after the
    daemon cleaned up); ``stop()`` closes its listeners and connections and joins the
    thread; ``with`` does both.
    """

    def __init__(
        self, options: OptionsT, changes: dict[str, Any], make: Callable[[OptionsT], DaemonT]
    ) -> None:
        self.options = options.replace(**changes) if changes else options
        self._make = make
        super().__init__()

    @property
    def daemon(self) -> DaemonT | None:
        """The running daemon (None when stopped): use it on its loop only, via
        :meth:`call`."""
        return self._runner.service

    # -- addresses ------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self.options.host

    @property
    def http_host(self) -> str:
        return self.options.host

    @property
    def tcp_port(self) -> int:
        return self._started().tcp_port

    @property
    def http_port(self) -> int:
        return self._started().http_port

    # -- lifecycle ------------------------------------------------------------------------

    async def _open(self) -> DaemonT:
        daemon = self._make(self.options)
        try:
            await daemon.start()
        except BaseException:
            await daemon.stop()
            raise
        return daemon

    async def _close(self, daemon: DaemonT) -> None:
        await daemon.stop()

    def __repr__(self) -> str:
        name = type(self).__name__
        if self._runner.service is None:
            return f"{name}(stopped)"
        return f"{name}(tcp={self.tcp_address}, http={self.http_address})"
