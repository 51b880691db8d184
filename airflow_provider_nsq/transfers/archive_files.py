"""The files :class:`~.nsq_to_object_storage.NSQToObjectStorageOperator` writes: one
being filled on the worker's disk (:class:`ArchiveFile`), then stored under a temporary
name and renamed (:func:`store`), so that a store never shows a partial file under a
final name.

A file holds JSON lines (``jsonl``: the message's record,
:func:`~..client.message.message_record`: ``id``, ``body`` (text, or base64 when not UTF-8, ``body_encoding``
says which), ``attempts``, ``timestamp`` (ns), ``topic``, ``channel``, ``nsqd``) or the
raw bodies, one per line (``raw``, as nsq_to_file writes them: a body holding a newline
spans two lines), optionally gzip-compressed.

Names: ``<prefix><UTC start time>-<run token>-<sequence>.<jsonl|txt>[.gz]``, in the order
written. While being stored a file is ``.<final name>.<owner>.tmp``: hidden (readers,
Spark and Hive skip names starting with a dot), and named by its task instance
(``owner``), so that the task's next try deletes what a killed try left
(:func:`remove_leftovers`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import tempfile
import time
from typing import IO, Any, Literal

from airflow.providers.common.compat.sdk import ObjectStoragePath

from ..client.message import NSQMessage, message_record

FileFormat = Literal["jsonl", "raw"]
Compression = Literal["gzip"] | None
#: What a file being filled keeps in memory before it spills to the worker's disk.
SPOOL_IN_MEMORY = 8 * 1024 * 1024


class ArchiveFile:
    """One file being filled: its lines (compressed as they come) and its messages,
    held until it is stored.

    :param topic: the topic (in each JSON line).
    :param channel: the channel (in each JSON line).
    :param file_format: ``jsonl`` or ``raw``.
    :param compression: ``gzip`` or None.
    """

    def __init__(
        self, topic: str, channel: str, file_format: FileFormat, compression: Compression
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.file_format = file_format
        self.spool: IO[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - close()
            max_size=SPOOL_IN_MEMORY
        )
        self._gzip = gzip.GzipFile(fileobj=self.spool, mode="wb") if compression else None
        self.messages: list[NSQMessage] = []
        self.bytes = 0  # before compression
        self.opened_at = time.monotonic()

    def add(self, message: NSQMessage) -> None:
        """Append ``message``'s line."""
        if self.file_format == "jsonl":
            record = message_record(message, self.topic, self.channel)
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()
        else:
            line = message.body
        line += b"\n"
        (self._gzip or self.spool).write(line)
        self.bytes += len(line)
        self.messages.append(message)

    def finished(self) -> IO[bytes]:
        """The file's bytes, complete, to read from the start."""
        if self._gzip is not None:
            self._gzip.close()  # writes the trailer; the spool stays open
        self.spool.seek(0)
        return self.spool

    def close(self) -> None:
        self.spool.close()


def file_name(
    prefix: str, started: float, token: str, sequence: int, file_format: FileFormat, gz: bool
) -> str:
    """``<prefix><UTC start>-<token>-<sequence>.<jsonl|txt>[.gz]``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    extension = "jsonl" if file_format == "jsonl" else "txt"
    return f"{prefix}{stamp}-{token}-{sequence:05d}.{extension}{'.gz' if gz else ''}"


def owner_of(context: Any) -> str:
    """A short name for the task instance running (the same in each of its tries)."""
    ti = (context or {}).get("ti")
    parts = [str(getattr(ti, name, "")) for name in ("dag_id", "task_id", "run_id", "map_index")]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def temporary_name(name: str, owner: str) -> str:
    return f".{name}.{owner}.tmp"


def store(data: IO[bytes], directory: ObjectStoragePath, name: str, owner: str) -> str:
    """Write ``data`` under a temporary name in ``directory``, then rename it to
    ``name``; the final URL. On a file system the rename is atomic; on an object store
    (S3, GCS) it is a copy, and the object appears whole or not at all."""
    temporary = directory / temporary_name(name, owner)
    with temporary.open("wb") as out:
        shutil.copyfileobj(data, out, 1024 * 1024)
    final = directory / name
    temporary.rename(final)
    return str(final)


def remove_leftovers(directory: ObjectStoragePath, owner: str) -> list[str]:
    """Delete the temporary files an earlier try of this task instance left (killed
    while storing); their messages were never FINished, and come back from nsqd."""
    if not directory.exists():
        return []
    removed = []
    for path in directory.iterdir():
        if path.name.startswith(".") and path.name.endswith(f".{owner}.tmp"):
            path.unlink()
            removed.append(str(path))
    return removed
