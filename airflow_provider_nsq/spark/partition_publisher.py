"""Publish one partition's Arrow batches to NSQ, on an executor: the loop both writers run.

The ``nsq`` data source's writer (PySpark 4.0+) and
:func:`~.dataframe_publisher.publish_dataframe` (``mapInArrow``, PySpark 3.5+) hand each
partition's batches to :func:`publish_partition`: one connection (opened on the first
batch, so an empty partition costs none), message bodies sent in MPUB batches of
``batch_size`` (the client splits a batch further into frames within nsqd's
``max_body_size``), the partition's nsqd first and the others as failover.

Delivery is at-least-once: a publish returns after nsqd's OK, but if a task fails after
some batches were accepted and Spark retries it (or a stage is recomputed), the retry
publishes the whole partition again. Consumers must tolerate duplicates.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..client.producer import NSQProducer
from ..protocol.errors import NSQError
from .message_bodies import body_encoder
from .writer_options import NSQWriteOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType


class NSQWriteError(NSQError):
    """Publishing a partition failed; says how far it got (at-least-once: see module doc)."""


@dataclass(frozen=True)
class NSQPartitionSummary:
    """What one write task published."""

    partition: int
    attempt: int
    messages: int
    bytes: int  # message bodies only, without NSQ framing
    frames: int  # MPUB frames nsqd accepted
    mpub_calls: int  # multi_publish calls (batches of up to batch_size messages)
    connects: int  # TCP connections opened (1, or 0 for an empty partition)
    seconds: float
    nsqd: str = ""  # where the partition was published ("" for an empty one)


S = TypeVar("S", bound=NSQPartitionSummary)


@dataclass
class _Sent:
    """What a partition's producer got accepted so far."""

    messages: int = 0
    size: int = 0  # bytes of bodies
    frames: int = 0
    calls: int = 0

    def publish(self, producer: NSQProducer, topic: str, bodies: list[bytes]) -> None:
        # Connected on the first batch, so an empty partition costs no connection.
        self.frames += producer.multi_publish(topic, bodies)
        self.calls += 1
        self.messages += len(bodies)
        self.size += sum(map(len, bodies))

    def publish_all(
        self, producer: NSQProducer, topic: str, encoded: Iterable[list[bytes]], size: int
    ) -> None:
        """MPUB the bodies of every encoded batch, ``size`` at a time (the rest last)."""
        pending: list[bytes] = []
        for bodies in encoded:
            pending.extend(bodies)
            full = len(pending) - len(pending) % size
            for start in range(0, full, size):
                self.publish(producer, topic, pending[start : start + size])
            del pending[:full]
        if pending:
            self.publish(producer, topic, pending)


def publish_partition(
    options: NSQWriteOptions,
    schema: StructType,
    body_index: int | None,
    batches: Iterable[pa.RecordBatch],
    summary_type: type[S],
) -> S:
    """Publish the rows of ``batches`` (Arrow, of ``schema``) as messages; runs in a task.

    :param options: the checked options (:meth:`NSQWriteOptions.parse`, on the driver).
    :param schema: the batches' schema.
    :param body_index: the body column (``format=raw``), or ``None`` for JSON rows.
    :param batches: the partition's Arrow record batches.
    :param summary_type: :class:`NSQPartitionSummary`, or the subclass the data source's
        writer returns as Spark's commit message.
    :raises NSQWriteError: naming the partition, the attempt, the nsqd and how many
        messages this attempt had got accepted.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    encode = body_encoder(schema, body_index, partition)
    started = time.monotonic()
    # Partitions spread over the nsqds; each fails over along the rest (never after an
    # MPUB was written: see client/producer/asyncio_producer.py).
    producer = NSQProducer(options.nsqds_for(partition), options.client_config())
    sent = _Sent()
    try:
        sent.publish_all(producer, options.topic, map(encode, batches), options.batch_size)
    except NSQError as exc:
        raise NSQWriteError(
            f"partition {partition} (attempt {attempt}): publishing to topic "
            f"{options.topic!r} at nsqd {producer.address or producer.addresses[0]} failed "
            f"after {sent.messages} messages were accepted; a retry publishes the partition "
            f"again (at-least-once): {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        nsqd = producer.address or ""
        producer.close()
    return summary_type(
        partition=partition,
        attempt=attempt,
        messages=sent.messages,
        bytes=sent.size,
        frames=sent.frames,
        mpub_calls=sent.calls,
        connects=producer.connects,
        seconds=round(time.monotonic() - started, 6),
        nsqd=nsqd,
    )
