"""How a test names a daemon's listeners: ``host:port`` from a host and a port.

The embedded daemons and the handles the pytest fixtures give (which may stand for real
daemons) share :class:`DaemonAddresses`, so ``tcp_address`` and ``http_address`` read the
same everywhere.
"""

from __future__ import annotations

from typing import Protocol

from airflow_provider_nsq.client.settings.address import format_address


class _Listening(Protocol):
    @property
    def host(self) -> str: ...

    @property
    def tcp_port(self) -> int: ...

    @property
    def http_host(self) -> str: ...

    @property
    def http_port(self) -> int: ...


class DaemonAddresses:
    """``tcp_address`` and ``http_address`` of a daemon with a TCP and an HTTP listener,
    for classes that have ``host``, ``tcp_port``, ``http_host`` and ``http_port``."""

    @property
    def tcp_address(self: _Listening) -> str:
        """``host:port`` of the TCP listener (where clients and nsqds connect)."""
        return format_address(self.host, self.tcp_port)

    @property
    def http_address(self: _Listening) -> str:
        """``host:port`` of the HTTP API."""
        return format_address(self.http_host, self.http_port)
