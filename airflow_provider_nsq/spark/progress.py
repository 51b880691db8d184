"""Progress lines in a Spark job's logs: what each write task published (on the
executor, in its stderr log, which the Spark UI shows per executor) and what each
micro-batch of the stream reader FINished once Spark committed it (on the driver).

The whole write's line is :mod:`.write_summary`'s; Spark itself counts the reader's
rows in each micro-batch's progress (``query.lastProgress["numInputRows"]``, the
Structured Streaming tab of the UI).
"""

from __future__ import annotations

import sys

from .partition_publisher import NSQPartitionSummary


def _line(text: str) -> None:
    print(f"nsq: {text}", file=sys.stderr, flush=True)


def report_partition(topic: str, summary: NSQPartitionSummary) -> None:
    """One write task's count, on the executor."""
    _line(
        f"partition {summary.partition} (attempt {summary.attempt}) published "
        f"{summary.messages} messages ({summary.bytes} bytes, {summary.frames} MPUB frames) "
        f"to topic {topic!r} on {summary.nsqd or 'no nsqd (empty partition)'} in "
        f"{summary.seconds:.2f}s"
    )


def report_batch(topic: str, channel: str, batch: int, messages: int, total: int) -> None:
    """One committed micro-batch of the stream reader, on the driver."""
    _line(
        f"batch {batch} of {topic}/{channel} committed by Spark: FIN'd its {messages} "
        f"messages ({total} in all since the query started)"
    )
