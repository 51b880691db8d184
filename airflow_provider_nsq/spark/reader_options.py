"""Options of ``spark.readStream.format("nsq")``: parsed and checked on the driver.

Same rules as the writer's options (:mod:`.options`): Spark hands them over as strings
with lower-cased keys; every mistake is one :class:`NSQOptionError` naming the option,
raised before a connection is opened; the result is a small picklable value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..client.address import DEFAULT_NSQD_TCP_PORT, format_address, parse_address
from ..client.config import ClientConfig
from ..client.consumer import DEFAULT_LOOKUPD_POLL_INTERVAL_S
from ..client.lookupd import parse_lookupd_address
from ..client.setting_values import parse_int, parse_seconds
from ..protocol.errors import NSQError, NSQValueError
from ..protocol.names import validate_channel_name, validate_topic_name
from .options import _CLIENT_OPTIONS, NSQOptionError, _option

# A batch is held in flight until Spark commits it, and nsqd lets one connection have at
# most --max-rdy-count (2500) unanswered: batch size, connections per nsqd and memory go
# together. docs/spark.md ("Batch size, connections and memory") has the measurements:
# Spark's cost per micro-batch makes batches under ~40,000 small messages slow.
DEFAULT_MAX_MESSAGES_PER_BATCH = 40_000
DEFAULT_MAX_BYTES_PER_BATCH = 64 * 1024 * 1024
DEFAULT_BATCH_TIMEOUT_S = 1.0
DEFAULT_MIN_PARTITIONS = 2
#: Enough for one nsqd with the default --max-rdy-count to hold the default budget
#: (2 x 40,000 messages / 2,500 per connection).
DEFAULT_MAX_CONNECTIONS_PER_NSQD = 32

# Options of the stream reader itself (the client options are shared with the writer).
_READER_OPTIONS = (
    "topic",
    "channel",
    "nsqd",
    "nsqd_tcp_addresses",
    "lookupd_http_addresses",
    "lookupd_poll_interval",
    "max_connections_per_nsqd",
    "max_messages_per_batch",
    "max_bytes_per_batch",
    "max_in_flight",
    "batch_timeout",
    "min_partitions",
    "msg_timeout_ms",
)

KNOWN_READ_OPTIONS: tuple[str, ...] = (*_READER_OPTIONS, *_CLIENT_OPTIONS)

_NOT_FOR_READING = {
    "format": "it is a writer option; the reader's rows always have the same columns",
    "body_column": "it is a writer option; the message body is the 'body' column",
    "batch_size": "it is a writer option; use max_messages_per_batch / max_bytes_per_batch",
    "summary_file": "it is a writer option",
    "http_port": "the stream reader speaks nsqd's TCP protocol only",
    "max_req_timeout_ms": "the stream reader only REQs without delay",
    "path": "the nsq data source takes no path: set .option('topic', ...)",
}


def _int(name: str, raw: str, minimum: int) -> int:
    value = _option(name, parse_int, raw)
    if value < minimum:
        raise NSQOptionError(name, f"must be a whole number >= {minimum}, got {raw!r}")
    return value


def _addresses(name: str, raw: str, default_port: int) -> tuple[tuple[str, int], ...]:
    items = [item for item in raw.split(",") if item.strip()]
    if not items:
        raise NSQOptionError(name, "expected a comma-separated list of host:port")
    out = []
    for item in items:
        try:
            out.append(parse_address(item, default_port, "address"))
        except NSQValueError as exc:
            raise NSQOptionError(name, str(exc)) from None
    return tuple(dict.fromkeys(out))  # the same nsqd twice would double its share


def _lookupds(raw: str) -> tuple[str, ...]:
    name = "lookupd_http_addresses"
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not items:
        raise NSQOptionError(name, "expected a comma-separated list of nsqlookupd HTTP host:port")
    for item in items:
        try:
            parse_lookupd_address(item)
        except NSQValueError as exc:
            raise NSQOptionError(name, str(exc)) from None
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class NSQReadOptions:
    """Checked options of one ``spark.readStream.format("nsq")`` query.

    ``client`` holds only the ClientConfig fields the user set; the rest keep the client's
    defaults, applied where the connections are opened. With ``lookupd_http_addresses``
    the nsqds are found through nsqlookupd and ``nsqd_tcp_addresses`` is not read from
    (as for an Airflow connection: those are where the writer publishes).
    """

    topic: str
    channel: str
    nsqd_tcp_addresses: tuple[tuple[str, int], ...]
    lookupd_http_addresses: tuple[str, ...] = ()
    lookupd_poll_interval: float = DEFAULT_LOOKUPD_POLL_INTERVAL_S
    max_connections_per_nsqd: int = DEFAULT_MAX_CONNECTIONS_PER_NSQD
    max_messages_per_batch: int = DEFAULT_MAX_MESSAGES_PER_BATCH
    max_bytes_per_batch: int = DEFAULT_MAX_BYTES_PER_BATCH
    max_in_flight: int = 2 * DEFAULT_MAX_MESSAGES_PER_BATCH
    batch_timeout: float = DEFAULT_BATCH_TIMEOUT_S
    min_partitions: int = DEFAULT_MIN_PARTITIONS
    client: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> NSQReadOptions:
        """Parse Spark's option strings; raises :class:`NSQOptionError` naming the option."""
        given = {str(k).lower(): v for k, v in options.items()}
        for key in sorted(given):
            if key in _NOT_FOR_READING:
                raise NSQOptionError(
                    key, f"not supported by the stream reader: {_NOT_FOR_READING[key]}"
                )
            if key not in KNOWN_READ_OPTIONS:
                raise NSQOptionError(
                    key,
                    "unknown option; the stream reader knows: "
                    + ", ".join(sorted(KNOWN_READ_OPTIONS)),
                )
            if not isinstance(given[key], str):
                raise NSQOptionError(key, f"expected a string, got {type(given[key]).__name__}")
        for required, what in (("topic", "the topic to read"), ("channel", "the channel to read")):
            if required not in given:
                raise NSQOptionError(required, f"required: {what}")
        try:
            topic = validate_topic_name(given["topic"].strip())
        except NSQValueError as exc:
            raise NSQOptionError("topic", str(exc)) from None
        try:
            channel = validate_channel_name(given["channel"].strip())
        except NSQValueError as exc:
            raise NSQOptionError("channel", str(exc)) from None

        lookupds: tuple[str, ...] = ()
        if "lookupd_http_addresses" in given:
            lookupds = _lookupds(given["lookupd_http_addresses"])
        poll_interval = DEFAULT_LOOKUPD_POLL_INTERVAL_S
        if "lookupd_poll_interval" in given:
            poll_interval = _option(
                "lookupd_poll_interval", parse_seconds, given["lookupd_poll_interval"]
            )
        max_connections = DEFAULT_MAX_CONNECTIONS_PER_NSQD
        if "max_connections_per_nsqd" in given:
            max_connections = _int("max_connections_per_nsqd", given["max_connections_per_nsqd"], 1)
        addresses: tuple[tuple[str, int], ...] = ()
        if "nsqd" in given:
            addresses += _addresses("nsqd", given["nsqd"], DEFAULT_NSQD_TCP_PORT)
            if len(addresses) > 1:
                raise NSQOptionError("nsqd", "one address; list several in 'nsqd_tcp_addresses'")
        if "nsqd_tcp_addresses" in given:
            addresses += _addresses(
                "nsqd_tcp_addresses", given["nsqd_tcp_addresses"], DEFAULT_NSQD_TCP_PORT
            )
        if not addresses and not lookupds:
            raise NSQOptionError(
                "nsqd_tcp_addresses",
                "required: 'nsqd' (host:port), 'nsqd_tcp_addresses', or "
                "'lookupd_http_addresses' (nsqlookupd's HTTP host:port)",
            )
        addresses = tuple(dict.fromkeys(addresses))

        max_messages = DEFAULT_MAX_MESSAGES_PER_BATCH
        if "max_messages_per_batch" in given:
            max_messages = _int("max_messages_per_batch", given["max_messages_per_batch"], 1)
        max_bytes = DEFAULT_MAX_BYTES_PER_BATCH
        if "max_bytes_per_batch" in given:
            max_bytes = _int("max_bytes_per_batch", given["max_bytes_per_batch"], 1)
        max_in_flight = 2 * max_messages
        if "max_in_flight" in given:
            max_in_flight = _int("max_in_flight", given["max_in_flight"], 1)
            if max_in_flight < max_messages:
                raise NSQOptionError(
                    "max_in_flight",
                    f"{max_in_flight} is below max_messages_per_batch={max_messages}: a batch "
                    "holds its messages in flight until Spark commits it",
                )
        batch_timeout = DEFAULT_BATCH_TIMEOUT_S
        if "batch_timeout" in given:
            batch_timeout = _option("batch_timeout", parse_seconds, given["batch_timeout"])
        min_partitions = DEFAULT_MIN_PARTITIONS
        if "min_partitions" in given:
            min_partitions = _int("min_partitions", given["min_partitions"], 1)

        client: dict[str, Any] = {}
        for key, parse in _CLIENT_OPTIONS.items():
            if key in given:
                client[key] = _option(key, parse, given[key])
        if "msg_timeout_ms" in given:
            client["msg_timeout_ms"] = _int("msg_timeout_ms", given["msg_timeout_ms"], 0)
        parsed = cls(
            topic=topic,
            channel=channel,
            nsqd_tcp_addresses=addresses,
            lookupd_http_addresses=lookupds,
            lookupd_poll_interval=poll_interval,
            max_connections_per_nsqd=max_connections,
            max_messages_per_batch=max_messages,
            max_bytes_per_batch=max_bytes,
            max_in_flight=max_in_flight,
            batch_timeout=batch_timeout,
            min_partitions=min_partitions,
            client=client,
        )
        parsed.client_config()  # ClientConfig checks ranges and combinations
        return parsed

    def client_config(self) -> ClientConfig:
        """The settings of every connection (the consumer sets each nsqd's address),
        built where the connections are opened."""
        where: dict[str, Any] = {}
        if self.nsqd_tcp_addresses:
            where["host"], where["port"] = self.nsqd_tcp_addresses[0]
        try:
            return ClientConfig(**where, **self.client)
        except NSQError as exc:
            text = str(exc)
            named = [key for key in self.client if key in text]
            raise NSQOptionError(
                named[0] if named else "nsqd_tcp_addresses", text.removeprefix("ClientConfig.")
            ) from None

    def consumer_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~..client.consumer.NSQConsumer` for this query."""
        return {
            "config": self.client_config(),
            "nsqd_tcp_addresses": [format_address(h, p) for h, p in self.nsqd_tcp_addresses],
            "lookupd_http_addresses": list(self.lookupd_http_addresses),
            "lookupd_poll_interval": self.lookupd_poll_interval,
            "max_connections_per_nsqd": self.max_connections_per_nsqd,
        }

    def __repr__(self) -> str:
        # Never print the AUTH secret (Spark logs plans and errors).
        client = {k: ("***" if k == "auth_secret" else v) for k, v in self.client.items()}
        names = [f.name for f in fields(self) if f.name != "client"]
        parts = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"NSQReadOptions({parts}, client={client!r})"
