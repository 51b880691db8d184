"""The ``nsq`` data source's options: parsed and checked on the driver, used on executors.

Spark hands a data source its options as strings (keys lower-cased). Everything here is
plain Python with no Spark or Airflow import, so a wrong option fails with one message
naming it before a single row moves, and the parsed result is a small picklable value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from ..client.address import DEFAULT_NSQD_TCP_PORT, format_address, parse_address
from ..client.config import COMPRESSIONS, ClientConfig
from ..client.setting_values import parse_bool, parse_int, parse_seconds
from ..protocol.errors import NSQError, NSQValueError
from ..protocol.names import validate_topic_name

FORMATS: tuple[str, ...] = ("raw", "json")
# Tried in order when ``body_column`` is not given (Kafka's sink calls it "value").
DEFAULT_BODY_COLUMNS: tuple[str, ...] = ("value", "body")
DEFAULT_BATCH_SIZE = 1000

_T = TypeVar("_T")


class NSQOptionError(NSQValueError):
    """An ``nsq`` data source option is missing, unknown or has a bad value."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"nsq data source option {option!r}: {message}")


def _text(raw: str) -> str:
    if not raw.strip():
        raise NSQValueError("must not be empty")
    return raw


def _compression(raw: str) -> str:
    text = raw.strip().lower()
    if text not in COMPRESSIONS:
        raise NSQValueError(f"expected one of {', '.join(COMPRESSIONS)}, got {raw!r}")
    return text


def _option(name: str, parse: Callable[[str], _T], raw: str) -> _T:
    """``parse(raw)``, its error naming the option."""
    try:
        return parse(raw)
    except NSQValueError as exc:
        raise NSQOptionError(name, str(exc)) from None


def parse_nsqd_address(raw: str, option: str = "nsqd") -> tuple[str, int]:
    """``host:port`` (``[::1]:4150`` for IPv6; a bare host means port 4150)."""
    try:
        return parse_address(raw, DEFAULT_NSQD_TCP_PORT, "nsqd's TCP address")
    except NSQValueError as exc:
        raise NSQOptionError(option, str(exc)) from None


# Options that become ClientConfig fields: option name -> parser. The names are the
# connection extras' names (docs/connections.md), so a connection maps one to one.
_CLIENT_OPTIONS: dict[str, Callable[[str], Any]] = {
    "tls": parse_bool,
    "tls_verify": parse_bool,
    "tls_ca_file": _text,
    "tls_cert_file": _text,
    "tls_key_file": _text,
    "tls_server_name": _text,
    "auth_secret": _text,
    "compression": _compression,
    "deflate_level": parse_int,
    "connect_timeout": parse_seconds,
    "read_timeout": parse_seconds,
    "client_id": _text,
    "heartbeat_interval_ms": parse_int,
    "max_msg_size": parse_int,
    "max_body_size": parse_int,
}

# Options of the data source itself.
_WRITER_OPTIONS = (
    "nsqd",
    "nsqd_tcp_addresses",
    "topic",
    "format",
    "body_column",
    "batch_size",
    "summary_file",
)

KNOWN_OPTIONS: tuple[str, ...] = (*_WRITER_OPTIONS, *_CLIENT_OPTIONS)

# Connection extras that only matter to consumers or to Airflow; named so the error says
# why instead of "unknown".
_NOT_FOR_WRITING = {
    "msg_timeout_ms": "it only applies to consumers; the nsq data source only publishes",
    "lookupd_http_addresses": "the writer publishes to nsqds, not through nsqlookupd: set "
    "option 'nsqd' (and 'nsqd_tcp_addresses' to spread partitions over more nsqds)",
    "http_port": "the data source speaks nsqd's TCP protocol only",
    "max_req_timeout_ms": "it only limits DPUB and REQ delays; the data source uses MPUB",
    "path": "the nsq data source takes no path: call .option('topic', ...).save()",
}


@dataclass(frozen=True)
class NSQWriteOptions:
    """Checked options of one ``df.write.format("nsq")`` call.

    ``client`` holds only the ClientConfig fields the user set; the rest keep the
    client's defaults, evaluated where the connection is opened (so ``client_id``
    defaults to the executor's host name, not the driver's).
    """

    host: str
    port: int
    topic: str
    format: str = "raw"
    body_column: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    summary_file: str | None = None
    client: Mapping[str, Any] = field(default_factory=dict)
    #: More nsqds after ``nsqd`` (option ``nsqd_tcp_addresses``), as ``host:port``.
    more_nsqds: tuple[str, ...] = ()

    @property
    def nsqds(self) -> list[str]:
        """Every nsqd written to: ``nsqd`` first, then ``nsqd_tcp_addresses``."""
        return [format_address(self.host, self.port), *self.more_nsqds]

    def nsqds_for(self, partition: int) -> list[str]:
        """Partition ``partition``'s nsqds in order: its own (partitions spread round
        robin over :attr:`nsqds`), then the others as failover."""
        nsqds = self.nsqds
        first = partition % len(nsqds)
        return nsqds[first:] + nsqds[:first]

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> NSQWriteOptions:
        """Parse Spark's option strings; raises :class:`NSQOptionError` naming the option."""
        given = {str(k).lower(): v for k, v in options.items()}
        for key in sorted(given):
            if key in _NOT_FOR_WRITING:
                raise NSQOptionError(key, f"not supported: {_NOT_FOR_WRITING[key]}")
            if key not in KNOWN_OPTIONS:
                raise NSQOptionError(
                    key, f"unknown option; known options: {', '.join(sorted(KNOWN_OPTIONS))}"
                )
            if not isinstance(given[key], str):
                raise NSQOptionError(key, f"expected a string, got {type(given[key]).__name__}")
        more: list[str] = []
        for raw in given.get("nsqd_tcp_addresses", "").split(","):
            if raw.strip():
                address = format_address(*parse_nsqd_address(raw, "nsqd_tcp_addresses"))
                if address not in more:
                    more.append(address)
        if "nsqd" not in given and not more:
            raise NSQOptionError("nsqd", "required: nsqd's TCP address as host:port")
        if "topic" not in given:
            raise NSQOptionError("topic", "required: the topic to publish to")
        if "nsqd" in given:
            host, port = parse_nsqd_address(given["nsqd"])
        else:
            host, port = parse_nsqd_address(more.pop(0), "nsqd_tcp_addresses")
        more = [a for a in more if a != format_address(host, port)]
        topic = given["topic"].strip()
        try:
            validate_topic_name(topic)
        except NSQValueError as exc:
            raise NSQOptionError("topic", str(exc)) from None
        fmt = given.get("format", "raw").strip().lower()
        if fmt not in FORMATS:
            raise NSQOptionError("format", f"expected one of {', '.join(FORMATS)}, got {fmt!r}")
        body_column = given.get("body_column")
        if body_column is not None:
            body_column = _option("body_column", _text, body_column)
            if fmt == "json":
                raise NSQOptionError(
                    "body_column", "not used with format=json, which sends the whole row"
                )
        batch_size = DEFAULT_BATCH_SIZE
        if "batch_size" in given:
            batch_size = _option("batch_size", parse_int, given["batch_size"])
            if batch_size < 1:
                raise NSQOptionError("batch_size", f"must be >= 1, got {batch_size}")
        summary_file = given.get("summary_file")
        if summary_file is not None:
            summary_file = _option("summary_file", _text, summary_file)

        client: dict[str, Any] = {}
        for key, parse in _CLIENT_OPTIONS.items():
            if key in given:
                client[key] = _option(key, parse, given[key])
        parsed = cls(
            host=host,
            port=port,
            topic=topic,
            format=fmt,
            body_column=body_column,
            batch_size=batch_size,
            summary_file=summary_file,
            client=client,
            more_nsqds=tuple(more),
        )
        parsed.client_config()  # ClientConfig checks ranges and combinations; name the key
        return parsed

    def client_config(self) -> ClientConfig:
        """The connection settings, built where they are used."""
        try:
            return ClientConfig(host=self.host, port=self.port, **self.client)
        except NSQError as exc:
            text = str(exc)
            # ClientConfig names its field ("ClientConfig.deflate_level=0 is invalid: ..."):
            # point at the option of the same name instead.
            named = [w for w in re.findall(r"\w+", text) if w in self.client]
            option = named[0] if named else "nsqd"
            raise NSQOptionError(option, text.removeprefix("ClientConfig.")) from None

    def __repr__(self) -> str:
        # Never print the AUTH secret (Spark logs plans and errors).
        client = {k: ("***" if k == "auth_secret" else v) for k, v in self.client.items()}
        names = [f.name for f in fields(self) if f.name != "client"]
        parts = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"NSQWriteOptions({parts}, client={client!r})"


def options_from_client_config(config: ClientConfig) -> dict[str, str]:
    """Data source options equivalent to ``config`` (string values, as Spark takes them).

    Settings left at the client's defaults are omitted, so executors apply their own
    defaults (their host name as ``client_id``, for one).
    """
    default = ClientConfig(host=config.host, port=config.port)
    out: dict[str, str] = {"nsqd": format_address(config.host, config.port)}
    for key in _CLIENT_OPTIONS:
        value = getattr(config, key)
        if value is None or value == getattr(default, key):
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out
