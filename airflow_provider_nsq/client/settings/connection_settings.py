"""``ConnectionSettings``: all an NSQ connection says, read from users in one place.

A connection's settings name more than one nsqd connection needs: the
:class:`~.client_config.ClientConfig` every connection shares, the nsqds a publisher fails over
along and consumers read, the nsqlookupds that find them, nsqd's HTTP API and nsqadmin.
Each of those is a described setting (:mod:`.fields`), so every place users write
them (a :class:`~.fields.SettingSource`, described by the caller that reads it)
reads, checks and lists them from the same descriptions.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ...protocol.errors import NSQSettingError
from .address import nsqd_tcp_address, parse_lookupd_address
from .client_config import ClientConfig
from .fields import Setting, SettingSource, check_fields, setting, settings_of

__all__ = ["ConnectionSettings", "lookupd_http_address"]


def _nsqd_tcp_entry(raw: str) -> str:
    """An entry of ``nsqd_tcp_addresses`` as stored: ``host:port`` (a bare host means
    port 4150)."""
    return nsqd_tcp_address(raw, "entry")


def lookupd_http_address(raw: str) -> str:
    """An nsqlookupd HTTP address, checked, as written (``host:port`` or a URL)."""
    parse_lookupd_address(raw)
    return raw.strip()


def _http_api_port(label: str, doc: str) -> dict[str, Setting]:
    """The metadata of a port of nsqd's HTTP API."""
    return setting(label, doc, kind="integer", minimum=1, maximum=65535)


@dataclass(frozen=True)
class ConnectionSettings:
    """The client's settings and where the nsqds, nsqlookupds and nsqd's HTTP API are.

    Build it with :meth:`read` from what users wrote; :meth:`described` lists every
    setting it reads (the :class:`ClientConfig` fields', then its own).
    """

    client: ClientConfig = field(default_factory=ClientConfig)
    nsqd_tcp_addresses: tuple[str, ...] = field(
        default=(),
        metadata=setting(
            "More nsqd TCP addresses",
            "Comma-separated host:port list of more nsqds, after host:port above. Publishing "
            "fails over to the next one that accepts a connection; without nsqlookupd, "
            "consumers read from all of them.",
            kind="addresses",
            convert=_nsqd_tcp_entry,
            placeholder="nsqd-2:4150,nsqd-3:4150",
        ),
    )
    lookupd_http_addresses: tuple[str, ...] = field(
        default=(),
        metadata=setting(
            "nsqlookupd HTTP addresses",
            "Comma-separated host:port list of nsqlookupd HTTP endpoints. When set, "
            "consumers (consume, the sensor, the triggers) read the topic from every nsqd "
            "they list.",
            kind="addresses",
            convert=lookupd_http_address,
            placeholder="lookupd-1:4161,lookupd-2:4161",
        ),
    )
    http_port: int | None = field(
        default=None,
        metadata=_http_api_port(
            "nsqd HTTP port",
            "nsqd's HTTP API port (4151 by default). Recommended: the sensor reads a "
            "channel's depth from /stats there and waits without taking (and redelivering) "
            "messages.",
        ),
    )
    https_port: int | None = field(
        default=None,
        metadata=_http_api_port(
            "nsqd HTTPS port",
            "nsqd's HTTPS API port (--https-address); used instead of the HTTP port when TLS "
            "is on, with the same CA and client certificate.",
        ),
    )

    nsqadmin_url: str | None = field(
        default=None,
        metadata=setting(
            "nsqadmin URL",
            "Base URL of nsqadmin (NSQ's web console), e.g. http://nsqadmin:4171. Tasks then "
            "link to the page of the topic (and channel) they used.",
            pattern=r"^https?://[^/?#\s]+",
            placeholder="http://nsqadmin:4171",
        ),
    )

    def __post_init__(self) -> None:
        check_fields(self, "ConnectionSettings.")

    @staticmethod
    @functools.cache
    def described() -> dict[str, Setting]:
        """Every setting a connection may carry, by name: the client's, then its own."""
        return {**settings_of(ClientConfig), **settings_of(ConnectionSettings)}

    @classmethod
    def read(
        cls, given: Mapping[str, object], source: SettingSource, **fixed: Any
    ) -> ConnectionSettings:
        """The settings users wrote in ``source`` (name -> value as written; blank means
        not set), on top of ``fixed`` client fields (the connection's host, port and
        password, which are not written as settings).

        :raises NSQSettingError: naming the setting that is unknown, refused, or bad
            (alone, or with another it must go with).
        """
        values = source.read(cls.described(), given)
        own = {f.name for f in fields(cls)}
        client = {k: v for k, v in values.items() if k not in own}
        try:
            config = ClientConfig(**fixed, **client)
        except NSQSettingError as exc:
            raise NSQSettingError(exc.setting, exc.reason) from None
        return cls(client=config, **{k: v for k, v in values.items() if k in own})

    @functools.cached_property
    def nsqds(self) -> list[str]:
        """Every nsqd, in order: the client's host:port, then ``nsqd_tcp_addresses``
        (each once). Publishing fails over along this list; without nsqlookupd,
        consumers read from all of them. Worked out once: do not change it."""
        return list(dict.fromkeys((self.client.address, *self.nsqd_tcp_addresses)))

    def consumer_options(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~..consumer.NSQConsumer` (and of the asyncio
        one) that read from these nsqds: through the nsqlookupds when there are any."""
        return {
            "config": self.client,
            "nsqd_tcp_addresses": self.nsqds,
            "lookupd_http_addresses": list(self.lookupd_http_addresses),
        }
