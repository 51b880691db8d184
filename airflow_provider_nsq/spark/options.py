"""The ``nsq`` data source's options: parsed and checked on the driver, used on executors.

Spark hands a data source its options as strings (keys lower-cased). Everything here is
plain Python with no Spark or Airflow import, so a wrong option fails with one message
naming it before a single row moves, and the parsed result is a small picklable value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..client.config import COMPRESSIONS, ClientConfig
from ..protocol.errors import NSQError, NSQValueError
from ..protocol.names import validate_topic_name

FORMATS: tuple[str, ...] = ("raw", "json")
# Tried in order when ``body_column`` is not given (Kafka's sink calls it "value").
DEFAULT_BODY_COLUMNS: tuple[str, ...] = ("value", "body")
DEFAULT_BATCH_SIZE = 1000
DEFAULT_NSQD_PORT = 4150

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


class NSQOptionError(NSQValueError):
    """An ``nsq`` data source option is missing, unknown or has a bad value."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"nsq data source option {option!r}: {message}")


def _parse_bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise NSQOptionError(name, f"expected true or false, got {raw!r}")


def _parse_int(name: str, raw: str, minimum: int | None = None) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise NSQOptionError(name, f"expected a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise NSQOptionError(name, f"expected a whole number >= {minimum}, got {raw!r}")
    return value


def _parse_seconds(name: str, raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise NSQOptionError(name, f"expected a number of seconds > 0, got {raw!r}")
    return value


def _parse_text(name: str, raw: str) -> str:
    if not raw.strip():
        raise NSQOptionError(name, "must not be empty")
    return raw


def _parse_compression(name: str, raw: str) -> str:
    text = raw.strip().lower()
    if text not in COMPRESSIONS:
        raise NSQOptionError(name, f"expected one of {', '.join(COMPRESSIONS)}, got {raw!r}")
    return text


def parse_nsqd_address(raw: str, option: str = "nsqd") -> tuple[str, int]:
    """``host:port`` (``[::1]:4150`` for IPv6; a bare host means port 4150)."""
    text = raw.strip()
    if not text:
        raise NSQOptionError(option, "expected host:port of nsqd's TCP port, e.g. 127.0.0.1:4150")
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (end + 1 < len(text) and text[end + 1] != ":"):
            raise NSQOptionError(option, f"expected [ipv6]:port, got {raw!r}")
        host, port_text = text[1:end], text[end + 2 :]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise NSQOptionError(option, f"write an IPv6 address in brackets, [::1]:4150; got {raw!r}")
    if not host or "/" in host or " " in host:
        raise NSQOptionError(option, f"expected host:port of nsqd's TCP port, got {raw!r}")
    port = DEFAULT_NSQD_PORT
    if port_text:
        try:
            port = int(port_text)
        except ValueError:
            raise NSQOptionError(option, f"port must be a number, got {raw!r}") from None
    if not 0 < port < 65536:
        raise NSQOptionError(option, f"port must be 1-65535, got {raw!r}")
    return host, port


# Options that become ClientConfig fields: option name -> parser. The names are the
# connection extras' names (DESIGN.md "Connection"), so a connection maps one to one.
_CLIENT_OPTIONS = {
    "tls": _parse_bool,
    "tls_verify": _parse_bool,
    "tls_ca_file": _parse_text,
    "tls_cert_file": _parse_text,
    "tls_key_file": _parse_text,
    "tls_server_name": _parse_text,
    "auth_secret": _parse_text,
    "compression": _parse_compression,
    "deflate_level": lambda n, r: _parse_int(n, r),
    "connect_timeout": _parse_seconds,
    "read_timeout": _parse_seconds,
    "client_id": _parse_text,
    "heartbeat_interval_ms": lambda n, r: _parse_int(n, r),
    "max_msg_size": lambda n, r: _parse_int(n, r),
    "max_body_size": lambda n, r: _parse_int(n, r),
}

# Options of the data source itself.
_WRITER_OPTIONS = ("nsqd", "topic", "format", "body_column", "batch_size", "summary_file")

KNOWN_OPTIONS: tuple[str, ...] = (*_WRITER_OPTIONS, *_CLIENT_OPTIONS)

# Connection extras that only matter to consumers or to Airflow; named so the error says
# why instead of "unknown".
_NOT_FOR_WRITING = {
    "msg_timeout_ms": "it only applies to consumers; the nsq data source only publishes",
    "lookupd_http_addresses": "the data source publishes to one nsqd: set option 'nsqd'",
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
        if "nsqd" not in given:
            raise NSQOptionError("nsqd", "required: nsqd's TCP address as host:port")
        if "topic" not in given:
            raise NSQOptionError("topic", "required: the topic to publish to")
        host, port = parse_nsqd_address(given["nsqd"])
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
            body_column = _parse_text("body_column", body_column)
            if fmt == "json":
                raise NSQOptionError(
                    "body_column", "not used with format=json, which sends the whole row"
                )
        batch_size = DEFAULT_BATCH_SIZE
        if "batch_size" in given:
            batch_size = _parse_int("batch_size", given["batch_size"], minimum=1)
        summary_file = given.get("summary_file")
        if summary_file is not None:
            summary_file = _parse_text("summary_file", summary_file)

        client: dict[str, Any] = {}
        for key, parse in _CLIENT_OPTIONS.items():
            if key in given:
                client[key] = parse(key, given[key])
        parsed = cls(
            host=host,
            port=port,
            topic=topic,
            format=fmt,
            body_column=body_column,
            batch_size=batch_size,
            summary_file=summary_file,
            client=client,
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
    host = f"[{config.host}]" if ":" in config.host else config.host
    out: dict[str, str] = {"nsqd": f"{host}:{config.port}"}
    for key in _CLIENT_OPTIONS:
        value = getattr(config, key)
        if value is None or value == getattr(default, key):
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out
