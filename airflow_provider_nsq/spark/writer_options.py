"""Options of ``df.write.format("nsq")`` (and ``publish_dataframe``): parsed and checked
on the driver, used on executors.

The writer's own options are described on :class:`NSQWriteOptions`' fields; with
``nsqd`` and the connection settings the writer takes, they make the option set
(:mod:`.option_sets`). A mistake is one :class:`NSQOptionError` naming the option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..client.settings.address import DEFAULT_NSQD_TCP_PORT, format_address, parse_address
from ..client.settings.client_config import ClientConfig
from ..client.settings.fields import setting
from .option_sets import WRITE, NSQOptionError, OptionSet, options_repr, topic_option

FORMATS: tuple[str, ...] = ("raw", "json")
# Tried in order when ``body_column`` is not given (Kafka's sink calls it "value").
DEFAULT_BODY_COLUMNS: tuple[str, ...] = ("value", "body")
DEFAULT_BATCH_SIZE = 1000


@dataclass(frozen=True)
class NSQWriteOptions:
    """Checked options of one ``df.write.format("nsq")`` call.

    ``client`` holds only the ClientConfig fields the user set; the rest keep the
    client's defaults, evaluated where the connection is opened (so ``client_id``
    defaults to the executor's host name, not the driver's).
    """

    host: str
    port: int
    topic: str = field(metadata=topic_option("Topic to publish to."))
    format: str = field(
        default="raw",
        metadata=setting(
            "format",
            "raw: the body column is the message; json: the whole row, as a JSON object.",
            choices=FORMATS,
        ),
    )
    body_column: str | None = field(
        default=None,
        metadata=setting("body column", "The body column for format=raw."),
    )
    batch_size: int = field(
        default=DEFAULT_BATCH_SIZE,
        metadata=setting("batch size", "Messages per MPUB call.", kind="integer", minimum=1),
    )
    summary_file: str | None = field(
        default=None,
        metadata=setting(
            "summary file",
            "Where commit and abort write the JSON summary, on the driver.",
        ),
    )
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
        values = WRITE_OPTIONS.read(options)
        nsqds = [values["nsqd"]] if "nsqd" in values else []
        nsqds += [a for a in values.get("nsqd_tcp_addresses", ()) if a not in nsqds]
        if not nsqds:
            raise NSQOptionError("nsqd", "required: nsqd's TCP address as host:port")
        WRITE_OPTIONS.required(values, "topic", "the topic to publish to")
        if "body_column" in values and values.get("format") == "json":
            raise NSQOptionError(
                "body_column", "not used with format=json, which sends the whole row"
            )
        host, port = parse_address(nsqds[0], DEFAULT_NSQD_TCP_PORT)
        parsed = cls(
            host=host,
            port=port,
            client=WRITE_OPTIONS.client_values(values),
            more_nsqds=tuple(nsqds[1:]),
            **WRITE_OPTIONS.own_values(values),
        )
        parsed.client_config()  # ClientConfig checks ranges and combinations; name the key
        return parsed

    def client_config(self) -> ClientConfig:
        """The connection settings, built where they are used."""
        return OptionSet.client_config({"host": self.host, "port": self.port}, self.client)

    def __repr__(self) -> str:
        return options_repr(self)  # never the AUTH secret


#: The writer's options: its own, ``nsqd``, and the connection settings it takes.
WRITE_OPTIONS = OptionSet(NSQWriteOptions, WRITE)
#: The options the writer takes.
KNOWN_OPTIONS: tuple[str, ...] = WRITE_OPTIONS.known
