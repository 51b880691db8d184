"""The lookupd's state: options, the registration DB and the open registration connections.

:class:`LookupdState` is what the TCP connections (:mod:`.tcp`) and the HTTP API
(:mod:`.api`) work on; :class:`~.server.Lookupd` adds the listeners and the lifecycle.
"""

from __future__ import annotations

from typing import Any, Protocol

from .options import NSQLOOKUPD_VERSION, LookupdOptions
from .registry import RegistrationDB


class Connection(Protocol):
    """What the lookupd keeps of an nsqd's registration connection."""

    def abort(self) -> None: ...


class LookupdState:
    """Options, registrations and connections of one lookupd (see Lookupd)."""

    def __init__(self, options: LookupdOptions | None = None, **kwargs: Any) -> None:
        base = options if options is not None else LookupdOptions()
        self.options = base.replace(**kwargs) if kwargs else base
        self.version = NSQLOOKUPD_VERSION
        self.db = RegistrationDB()
        self.connections: set[Connection] = set()
        self.host = self.options.host
        self.tcp_port = 0
        self.http_port = 0

    @property
    def inactive_producer_timeout_s(self) -> float:
        return self.options.inactive_producer_timeout / 1000.0

    @property
    def tombstone_lifetime_s(self) -> float:
        return self.options.tombstone_lifetime / 1000.0
