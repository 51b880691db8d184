"""Options of ``spark.readStream.format("nsq")``: parsed and checked on the driver.

Same rules as the writer's options (:mod:`.writer_options`, :mod:`.option_sets`): Spark
hands them over as strings with lower-cased keys; the reader's own options are
described on :class:`NSQReadOptions`' fields, the connection's come from the settings'
descriptions; every mistake is one :class:`NSQOptionError` naming the option, raised
before a connection is opened; the result is a small picklable value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..client.consumer import DEFAULT_LOOKUPD_POLL_INTERVAL_S
from ..client.settings.address import DEFAULT_NSQD_TCP_PORT, format_address, parse_address
from ..client.settings.client_config import ClientConfig
from ..client.settings.fields import setting
from ..protocol.names import validate_channel_name
from .option_sets import READ, NSQOptionError, OptionSet, options_repr, topic_option

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


def _count(label: str, doc: str) -> dict[str, Any]:
    """The metadata of a whole-number option >= 1."""
    return setting(label, doc, kind="integer", minimum=1)


def _seconds(label: str, doc: str) -> dict[str, Any]:
    """The metadata of an option in seconds (> 0)."""
    return setting(label, doc, kind="seconds")


@dataclass(frozen=True)
class NSQReadOptions:
    """Checked options of one ``spark.readStream.format("nsq")`` query.

    ``client`` holds only the ClientConfig fields the user set; the rest keep the client's
    defaults, applied where the connections are opened. With ``lookupd_http_addresses``
    the nsqds are found through nsqlookupd and ``nsqd_tcp_addresses`` is not read from
    (as for an Airflow connection: those are where the writer publishes).
    """

    topic: str = field(metadata=topic_option("Topic to read."))
    channel: str = field(
        metadata=setting(
            "channel",
            "Channel to read (created by the first subscription).",
            convert=lambda raw: validate_channel_name(raw.strip()),
        )
    )
    #: ``nsqd`` and ``nsqd_tcp_addresses``, as (host, port), each once.
    nsqd_tcp_addresses: tuple[tuple[str, int], ...] = ()
    lookupd_http_addresses: tuple[str, ...] = ()
    lookupd_poll_interval: float = field(
        default=DEFAULT_LOOKUPD_POLL_INTERVAL_S,
        metadata=_seconds("lookupd poll interval", "Seconds between two lookups."),
    )
    max_connections_per_nsqd: int = field(
        default=DEFAULT_MAX_CONNECTIONS_PER_NSQD,
        metadata=_count("max connections per nsqd", "Connections the reader may open to one nsqd."),
    )
    max_messages_per_batch: int = field(
        default=DEFAULT_MAX_MESSAGES_PER_BATCH,
        metadata=_count("max messages per batch", "At most this many messages in a batch."),
    )
    max_bytes_per_batch: int = field(
        default=DEFAULT_MAX_BYTES_PER_BATCH,
        metadata=_count("max bytes per batch", "At most this many bytes of bodies in a batch."),
    )
    max_in_flight: int = field(
        default=2 * DEFAULT_MAX_MESSAGES_PER_BATCH,
        metadata=_count(
            "max in flight", "Messages held at once (default 2 x max_messages_per_batch)."
        ),
    )
    batch_timeout: float = field(
        default=DEFAULT_BATCH_TIMEOUT_S,
        metadata=_seconds("batch timeout", "Seconds without a message that end a batch."),
    )
    min_partitions: int = field(
        default=DEFAULT_MIN_PARTITIONS,
        metadata=_count("min partitions", "Partitions per batch."),
    )
    client: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> NSQReadOptions:
        """Parse Spark's option strings; raises :class:`NSQOptionError` naming the option."""
        values = READ_OPTIONS.read(options)
        READ_OPTIONS.required(values, "topic", "the topic to read")
        READ_OPTIONS.required(values, "channel", "the channel to read")
        nsqds = (values["nsqd"],) if "nsqd" in values else ()
        nsqds += values.get("nsqd_tcp_addresses", ())
        if not nsqds and "lookupd_http_addresses" not in values:
            raise NSQOptionError(
                "nsqd_tcp_addresses",
                "required: 'nsqd' (host:port), 'nsqd_tcp_addresses', or "
                "'lookupd_http_addresses' (nsqlookupd's HTTP host:port)",
            )
        values.setdefault(
            "max_in_flight", 2 * values.get("max_messages_per_batch", cls.max_messages_per_batch)
        )
        if values["max_in_flight"] < values.get(
            "max_messages_per_batch", cls.max_messages_per_batch
        ):
            raise NSQOptionError(
                "max_in_flight",
                f"{values['max_in_flight']} is below max_messages_per_batch="
                f"{values.get('max_messages_per_batch', cls.max_messages_per_batch)}: a batch "
                "holds its messages in flight until Spark commits it",
            )
        own = READ_OPTIONS.own_values(values)
        own["lookupd_http_addresses"] = values.get("lookupd_http_addresses", ())
        own["nsqd_tcp_addresses"] = tuple(
            parse_address(a, DEFAULT_NSQD_TCP_PORT) for a in dict.fromkeys(nsqds)
        )
        parsed = cls(**own, client=READ_OPTIONS.client_values(values))
        parsed.client_config()  # ClientConfig checks ranges and combinations
        return parsed

    def client_config(self) -> ClientConfig:
        """The settings of every connection (the consumer sets each nsqd's address),
        built where the connections are opened."""
        where: dict[str, Any] = {}
        if self.nsqd_tcp_addresses:
            where["host"], where["port"] = self.nsqd_tcp_addresses[0]
        return OptionSet.client_config(where, self.client)

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
        return options_repr(self)  # never the AUTH secret


#: The stream reader's options: its own, ``nsqd``, the connection settings it takes; the
#: writer's own are refused.
READ_OPTIONS = OptionSet(
    NSQReadOptions,
    READ,
    refused={
        "format": "it is a writer option; the reader's rows always have the same columns",
        "body_column": "it is a writer option; the message body is the 'body' column",
        "batch_size": "it is a writer option; use max_messages_per_batch / max_bytes_per_batch",
        "summary_file": "it is a writer option",
    },
)
#: The options the stream reader takes.
KNOWN_READ_OPTIONS: tuple[str, ...] = READ_OPTIONS.known
