"""The ``nsq`` data source's two option sets, derived from the settings' descriptions.

Spark hands a data source its options as strings (keys lower-cased). The writer's
options (:mod:`.writer_options`) and the stream reader's (:mod:`.reader_options`) are
each the data source's own (described on their option classes), plus ``nsqd``, plus
every connection setting (:class:`~..client.settings.connection_settings.ConnectionSettings` and
the :class:`~..client.settings.client_config.ClientConfig` fields in it) the set does not refuse. A
setting added to ``ClientConfig`` therefore reaches both sets, the Airflow connection's
extras and its form, with no edit here; a setting a set refuses is refused with the
reason given here (:data:`CONNECTION_OPTIONS`, and each set's refusals of the other's
own options).

Everything here is plain Python with no Spark or Airflow import, so a wrong option fails
with one message naming it before a single row moves, and the parsed result is a small
picklable value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from ..client.settings.address import (
    DEFAULT_NSQD_TCP_PORT,
    format_address,
    nsqd_tcp_address,
    parse_address,
)
from ..client.settings.client_config import ClientConfig
from ..client.settings.connection_settings import ConnectionSettings
from ..client.settings.fields import Setting, SettingSource, setting, settings_of
from ..protocol.errors import NSQSettingError, NSQValueError
from ..protocol.names import validate_topic_name
from ..protocol.value_checks import is_bool

#: Which option set: the writer's (``df.write.format("nsq")``, ``publish_dataframe``) or
#: the stream reader's (``spark.readStream.format("nsq")``).
OptionSetName = Literal["write", "read"]
WRITE: OptionSetName = "write"
READ: OptionSetName = "read"

_TCP_ONLY = "the data source speaks nsqd's TCP protocol only"
#: Connection settings the data source never takes, and why (both sets).
_NEITHER_SET = {"http_port": _TCP_ONLY, "https_port": _TCP_ONLY}
#: An Airflow task's link to nsqadmin: no option of a data source.
_AIRFLOW_ONLY = frozenset({"nsqadmin_url"})

#: The connection settings each set takes: every one not refused here, with the reason.
CONNECTION_OPTIONS: dict[OptionSetName, SettingSource] = {
    WRITE: SettingSource(
        refused={
            **_NEITHER_SET,
            "msg_timeout_ms": "it only applies to consumers; the nsq data source only publishes",
            "max_req_timeout_ms": "it only limits DPUB and REQ delays; the data source uses MPUB",
            "lookupd_http_addresses": "the writer publishes to nsqds, not through "
            "nsqlookupd: set option 'nsqd' (and 'nsqd_tcp_addresses' to spread partitions "
            "over more nsqds)",
        },
        leaves_out=_AIRFLOW_ONLY,
    ),
    READ: SettingSource(
        refused={
            **_NEITHER_SET,
            "max_req_timeout_ms": "the stream reader only REQs without delay",
        },
        leaves_out=_AIRFLOW_ONLY,
    ),
}
#: Why each set refuses a path (``.save(path)``, ``.load(path)``).
_NO_PATH: dict[OptionSetName, str] = {
    WRITE: "the nsq data source takes no path: call .option('topic', ...).save()",
    READ: "the nsq data source takes no path: set .option('topic', ...)",
}


class NSQOptionError(NSQValueError):
    """An ``nsq`` data source option is missing, unknown or has a bad value."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"nsq data source option {option!r}: {message}")


def nsqd_address(raw: str) -> str:
    """One nsqd's TCP address as ``host:port`` (a bare host means port 4150)."""
    if "," in raw:
        raise NSQValueError("one address; list several in 'nsqd_tcp_addresses'")
    return nsqd_tcp_address(raw, "nsqd's TCP address")


def parse_nsqd_address(raw: str, option: str = "nsqd") -> tuple[str, int]:
    """``host:port`` (``[::1]:4150`` for IPv6; a bare host means port 4150)."""
    try:
        return parse_address(raw, DEFAULT_NSQD_TCP_PORT, "nsqd's TCP address")
    except NSQValueError as exc:
        raise NSQOptionError(option, str(exc)) from None


#: The option of both sets that is no field of theirs: the (first) nsqd.
NSQD_OPTION = Setting(
    "nsqd",
    "nsqd's TCP address, host:port (a bare host means port 4150).",
    convert=nsqd_address,
    name="nsqd",
)


class OptionSet:
    """One option set: what it reads (its class's own options, ``nsqd``, the connection
    settings :data:`CONNECTION_OPTIONS` gives it) and what it refuses, with the reasons.

    :param options_class: the option class whose fields describe the set's own options.
    :param name: :data:`WRITE` or :data:`READ`.
    :param refused: more options the set refuses (the other set's own), with why.
    """

    def __init__(
        self,
        options_class: type,
        name: OptionSetName,
        refused: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.own = settings_of(options_class)
        self.settings: dict[str, Setting] = {
            **ConnectionSettings.described(),
            "nsqd": NSQD_OPTION,
            **self.own,
        }
        connection = CONNECTION_OPTIONS[name]
        self.source = SettingSource(
            refused={**connection.refused, "path": _NO_PATH[name], **(refused or {})},
            leaves_out=connection.leaves_out,
        )
        #: The option names the set takes, sorted.
        self.known: tuple[str, ...] = tuple(sorted(self.source.takes(self.settings)))

    def read(self, options: Mapping[str, object]) -> dict[str, Any]:
        """Spark's option strings (keys case-insensitive) read by their settings: each
        value in its type; options left out are left out.

        :raises NSQOptionError: naming the option that is unknown, refused, not a
            string, or bad.
        """
        given = {str(key).lower(): value for key, value in options.items()}
        for key, value in given.items():
            if not isinstance(value, str):
                raise NSQOptionError(key, f"expected a string, got {type(value).__name__}")
        try:
            return self.source.read(self.settings, given)
        except NSQSettingError as exc:
            raise NSQOptionError(exc.setting, exc.reason) from None

    def own_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The option class's own options among parsed values."""
        return {key: value for key, value in values.items() if key in self.own}

    @staticmethod
    def client_values(values: Mapping[str, Any]) -> dict[str, Any]:
        """The :class:`ClientConfig` fields among parsed values."""
        fields = settings_of(ClientConfig)
        return {key: value for key, value in values.items() if key in fields}

    @staticmethod
    def client_config(where: Mapping[str, Any], client: Mapping[str, Any]) -> ClientConfig:
        """``ClientConfig(**where, **client)``; its error names the option of the field."""
        try:
            return ClientConfig(**where, **client)
        except NSQSettingError as exc:
            option = exc.setting if exc.setting in client else "nsqd"
            raise NSQOptionError(option, exc.reason) from None

    @staticmethod
    def required(values: Mapping[str, Any], option: str, what: str) -> Any:
        """The value of an option the set cannot do without."""
        if option not in values:
            raise NSQOptionError(option, f"required: {what}")
        return values[option]


def topic_option(doc: str) -> dict[str, Setting]:
    """The ``metadata`` of an option set's ``topic`` field."""
    return setting("topic", doc, convert=lambda raw: validate_topic_name(raw.strip()))


def options_repr(options: Any) -> str:
    """An option class's repr, its client settings' secrets starred (Spark logs plans and
    errors)."""
    described = settings_of(ClientConfig)
    client = {k: ("***" if described[k].secret else v) for k, v in options.client.items()}
    names = [f.name for f in dataclasses.fields(options) if f.name != "client"]
    parts = ", ".join(f"{n}={getattr(options, n)!r}" for n in names)
    return f"{type(options).__name__}({parts}, client={client!r})"


def options_from_settings(
    settings: ConnectionSettings | ClientConfig, source: OptionSetName = WRITE
) -> dict[str, str]:
    """Data source options equivalent to a connection's settings (string values, as
    Spark takes them), for the writer (``source="write"``, the default) or the stream
    reader (``"read"``): ``nsqd`` (the connection's host:port), ``nsqd_tcp_addresses``
    (its other nsqds: the writer fails over along them), for the reader
    ``lookupd_http_addresses``, and every other setting the set takes.

    Settings left at their defaults are omitted, so executors apply their own defaults
    (their host name as ``client_id``, for one); settings the set does not take (the
    HTTP ports) are left out.
    """
    if isinstance(settings, ClientConfig):
        settings = ConnectionSettings(client=settings)
    config = settings.client
    values: dict[str, Any] = {
        **{name: getattr(config, name) for name in settings_of(ClientConfig)},
        "nsqd_tcp_addresses": tuple(settings.nsqds[1:]),
        "lookupd_http_addresses": settings.lookupd_http_addresses,
    }
    out = {"nsqd": format_address(config.host, config.port)}
    defaults = ClientConfig(host=config.host, port=config.port)
    taken = CONNECTION_OPTIONS[source].takes(ConnectionSettings.described())
    for name, described in taken.items():
        value = values.get(name)
        default = getattr(defaults, name, described.default)
        if value is None or value == default or value == ():
            continue
        out[name] = ",".join(value) if isinstance(value, tuple) else option_text(value)
    return out


def options_from_client_config(config: ClientConfig) -> dict[str, str]:
    """:func:`options_from_settings` for a :class:`ClientConfig` alone (one nsqd, no
    nsqlookupd), for the writer."""
    return options_from_settings(config)


def option_text(value: Any) -> Any:
    """A value as an option's text, as ``DataFrameWriter.option()`` writes it: ``True``
    is ``"true"``, a number its text; None stays None (the parser then names the
    option)."""
    if is_bool(value):
        return "true" if value else "false"
    return value if value is None else str(value)
