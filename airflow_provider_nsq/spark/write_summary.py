"""What a whole write published, on the driver: one line on stderr and, with the
``summary_file`` option, a JSON file replaced atomically.

Both writers report the same way: the data source's ``commit``/``abort`` and
:func:`~.dataframe_publisher.publish_dataframe`. One case knows less: a failed
``publish_dataframe`` on Spark Connect learns only some of the partitions that finished
and not how many there were (``partitions_known=False``: ``partitions`` and
``failed_partitions`` are ``null``, and the line says "at least").
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from .partition_publisher import NSQPartitionSummary
from .writer_options import NSQWriteOptions


def summarize(
    options: NSQWriteOptions,
    parts: Sequence[NSQPartitionSummary | None],
    *,
    aborted: bool,
    partitions_known: bool = True,
) -> dict[str, Any]:
    """The write's summary; ``parts`` has ``None`` for each partition that failed, or,
    with ``partitions_known=False``, only some of the partitions that finished."""
    done = sorted((p for p in parts if p is not None), key=lambda p: p.partition)
    return {
        "status": "aborted" if aborted else "committed",
        "topic": options.topic,
        "nsqd": f"{options.host}:{options.port}",
        "nsqds": options.nsqds,
        "format": options.format,
        "messages": sum(p.messages for p in done),
        "bytes": sum(p.bytes for p in done),
        "frames": sum(p.frames for p in done),
        "partitions": len(parts) if partitions_known else None,
        "failed_partitions": sum(1 for p in parts if p is None) if partitions_known else None,
        "per_partition": [asdict(p) for p in done],
    }


def report_write(
    options: NSQWriteOptions,
    parts: Sequence[NSQPartitionSummary | None],
    *,
    aborted: bool,
    partitions_known: bool = True,
) -> dict[str, Any]:
    """Print the write's line to stderr, write ``summary_file`` if set; returns the summary."""
    summary = summarize(options, parts, aborted=aborted, partitions_known=partitions_known)
    if aborted and not partitions_known:
        line = (
            f"nsq: write to topic {summary['topic']!r} aborted; at least "
            f"{summary['messages']} messages from {len(summary['per_partition'])} finished "
            "partitions were already published and stay published (Spark Connect reports a "
            "failed job's partitions only up to the first one that had not finished)"
        )
    elif aborted:
        line = (
            f"nsq: write to topic {summary['topic']!r} aborted; "
            f"{summary['messages']} messages from "
            f"{summary['partitions'] - summary['failed_partitions']} finished partitions "
            "were already published and stay published"
        )
    else:
        line = (
            f"nsq: published {summary['messages']} messages ({summary['bytes']} bytes, "
            f"{summary['frames']} MPUB frames) to topic {summary['topic']!r} from "
            f"{summary['partitions']} partitions"
        )
    print(line, file=sys.stderr, flush=True)
    if options.summary_file:
        _write_json_atomically(options.summary_file, summary)
    return summary


def _write_json_atomically(path: str, data: dict[str, Any]) -> None:
    # A reader polling for the file never sees half of it.
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".nsq-summary-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
