"""The embedded lookupd's settings, under nsqlookupd 1.3.0's flag names.

Python keyword arguments use underscores (``inactive_producer_timeout``); durations are
int milliseconds (nsqlookupd's flags take Go durations, the CLI accepts both).
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass, field
from typing import Any

#: The version the lookupd reports (IDENTIFY reply, ``/info``): the nsqlookupd it imitates.
NSQLOOKUPD_VERSION = "1.3.0"

DEFAULT_INACTIVE_PRODUCER_TIMEOUT_MS = 300_000  # --inactive-producer-timeout
DEFAULT_TOMBSTONE_LIFETIME_MS = 45_000  # --tombstone-lifetime


@dataclass
class LookupdOptions:
    """Every setting of the embedded lookupd; defaults are nsqlookupd 1.3.0's, except
    the addresses: it binds 127.0.0.1 on free ports and broadcasts ``127.0.0.1``
    (nsqlookupd: ``0.0.0.0:4160``/``4161``, broadcast address = the OS hostname).

    ``broadcast_address`` is what nsqds are told in the IDENTIFY reply; with the HTTP
    port it is where they ask ``/channels`` when they create a topic, so it must be
    reachable from every nsqd.
    """

    host: str = "127.0.0.1"
    tcp_port: int = 0  # 0: a free port
    http_port: int = 0
    broadcast_address: str = "127.0.0.1"
    inactive_producer_timeout: int = DEFAULT_INACTIVE_PRODUCER_TIMEOUT_MS
    tombstone_lifetime: int = DEFAULT_TOMBSTONE_LIFETIME_MS
    #: The ``hostname`` in IDENTIFY replies (nsqlookupd: ``os.Hostname()``).
    hostname: str = field(default_factory=socket.gethostname)

    def __post_init__(self) -> None:
        for name in ("inactive_producer_timeout", "tombstone_lifetime"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        for name in ("tcp_port", "http_port"):
            if not 0 <= getattr(self, name) < 65536:
                raise ValueError(f"{name} must be 0-65535, got {getattr(self, name)}")
        if not self.broadcast_address:
            raise ValueError("broadcast_address must not be empty")

    def replace(self, **changes: Any) -> LookupdOptions:
        return dataclasses.replace(self, **changes)
