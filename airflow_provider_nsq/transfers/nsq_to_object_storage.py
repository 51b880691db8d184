"""``NSQToObjectStorageOperator``: drain a channel into files on Airflow's object storage
(``s3://``, ``gs://``, ``file://`` ...: an ``ObjectStoragePath``), as NSQ's nsq_to_file
does to a disk, with what nsq_to_file cannot give: a message is FINished only after the
file holding it is written to the store and renamed to its final name.

The loop (on the task's thread, the consumer held by a
:class:`~airflow_provider_nsq.client.holding.holder.MessageHolder`):

- read what nsqd delivers (up to ``max_messages_per_file`` held at once: the in-flight
  budget is the file), append each message's line to the file being filled (on the
  worker's disk, :mod:`.archive_files`);
- when it holds ``max_messages_per_file`` messages or ``max_bytes_per_file`` bytes, or
  has been open ``max_seconds_per_file``, or the run ends: store it (a temporary name,
  then a rename) on a thread of its own while the holder keeps the connections alive
  (heartbeats, a TOUCH of every held message each third of msg_timeout), then FIN its
  messages;
- the run ends after ``max_messages`` messages, or once ``idle_timeout`` passed with
  nothing delivered; it returns the URLs of the files written, in order.

A task that fails or is killed leaves its unstored messages unanswered: they come back
from nsqd (at once when the task closes its connections, after msg_timeout when it was
killed outright; 10 s unless the connection sets ``msg_timeout_ms``), and no final name
holds a partial file. A file renamed whose FIN did not reach nsqd (a kill between the
two) means its messages come again: at-least-once, as everything NSQ delivers.
"""

from __future__ import annotations

import datetime
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, BaseOperator, ObjectStoragePath

from ..client.consumer import NSQConsumer
from ..client.holding.function_thread import FunctionThread
from ..client.holding.holder import MessageHolder
from ..client.settings.values import duration_to_seconds
from ..hooks.consumer import NSQConsumerHook
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT
from ..protocol.errors import NSQValueError
from ..protocol.names import is_ephemeral, validate_channel_name, validate_topic_name
from ..protocol.value_checks import check_int
from ..templated import is_templated
from .archive_files import (
    ArchiveFile,
    Compression,
    FileFormat,
    file_name,
    owner_of,
    remove_leftovers,
    store,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: The longest single wait for a delivery, so that a kill or a due file is seen soon.
READ_SLICE_S = 0.5


def _check_names(topic: object, channel: object) -> None:
    if not is_templated(topic):
        validate_topic_name(topic)
    if not is_templated(channel):
        validate_channel_name(channel)
        if is_ephemeral(str(channel)):
            raise NSQValueError(
                f"channel {channel!r} is #ephemeral: nsqd drops it, and what it holds, when "
                "the task disconnects; archive a durable channel"
            )


class NSQToObjectStorageOperator(BaseOperator):
    """Drain ``topic``/``channel`` into files under ``path`` (see the module's docstring
    for when each message is FINished), and return the URLs of the files written.

    :param topic: the topic (templated).
    :param channel: the channel (templated); durable (``#ephemeral`` is refused).
    :param path: the directory: an ``ObjectStoragePath`` or its URL
        (``s3://bucket/prefix/``, ``file:///data/nsq/``; templated).
    :param object_storage_conn_id: the connection of the store (for a URL ``path``;
        templated). None: the URL's own (``s3://conn_id@bucket/...``) or the default.
    :param file_format: ``jsonl`` (each message's record: id, body as text or base64,
        attempts, timestamp, topic, channel, nsqd) or ``raw`` (the bodies, one per line).
    :param compression: ``gzip``, or None.
    :param max_messages_per_file: a new file after this many messages (1 to 2500,
        nsqd's ``--max-rdy-count``: a file's messages are all held until it is stored).
    :param max_bytes_per_file: a new file after this many bytes (before compression).
    :param max_seconds_per_file: a file is stored once open this long (seconds or a
        ``timedelta``; under nsqd's ``--max-msg-timeout``, 15 min by default: a message
        is TOUCHed at most that long).
    :param max_messages: end after this many messages (None: only ``idle_timeout``).
    :param idle_timeout: end once nothing came for this long (seconds or a ``timedelta``).
    :param filename_prefix: what each file name starts with.
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    template_fields: Sequence[str] = (
        "topic",
        "channel",
        "path",
        "object_storage_conn_id",
        "filename_prefix",
        "nsq_conn_id",
    )
    ui_color = "#f0e4c6"

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        path: str | ObjectStoragePath,
        object_storage_conn_id: str | None = None,
        file_format: FileFormat = "jsonl",
        compression: Compression = None,
        max_messages_per_file: int = 1000,
        max_bytes_per_file: int = 64 * 1024 * 1024,
        max_seconds_per_file: datetime.timedelta | float = 60.0,
        max_messages: int | None = None,
        idle_timeout: datetime.timedelta | float = 5.0,
        filename_prefix: str = "part-",
        nsq_conn_id: str = NSQConsumerHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        _check_names(topic, channel)
        if file_format not in ("jsonl", "raw"):
            raise NSQValueError(f"file_format must be 'jsonl' or 'raw', got {file_format!r}")
        if compression not in (None, "gzip"):
            raise NSQValueError(f"compression must be 'gzip' or None, got {compression!r}")
        check_int(
            max_messages_per_file,
            "max_messages_per_file",
            minimum=1,
            maximum=DEFAULT_MAX_RDY_COUNT,
        )
        check_int(max_bytes_per_file, "max_bytes_per_file", minimum=1)
        if max_messages is not None:
            check_int(max_messages, "max_messages", minimum=1)
        self.topic = topic
        self.channel = channel
        self.path = path
        self.object_storage_conn_id = object_storage_conn_id
        self.file_format: FileFormat = file_format
        self.compression: Compression = compression
        self.max_messages_per_file = max_messages_per_file
        self.max_bytes_per_file = max_bytes_per_file
        self.max_seconds_per_file = duration_to_seconds(
            max_seconds_per_file, "max_seconds_per_file"
        )
        self.max_messages = max_messages
        self.idle_timeout = duration_to_seconds(idle_timeout, "idle_timeout")
        self.filename_prefix = filename_prefix
        self.nsq_conn_id = nsq_conn_id

    @cached_property
    def hook(self) -> NSQConsumerHook:
        return NSQConsumerHook(nsq_conn_id=self.nsq_conn_id)

    @cached_property
    def _killed(self) -> threading.Event:
        # Made on first use: Airflow 3.0 deep-copies operators, and an Event cannot be.
        return threading.Event()

    def on_kill(self) -> None:
        # From a signal handler: only a flag, the loop reads it between waits.
        self._killed.set()

    def _directory(self) -> ObjectStoragePath:
        if isinstance(self.path, ObjectStoragePath):
            return self.path
        return ObjectStoragePath(str(self.path), conn_id=self.object_storage_conn_id)

    def execute(self, context: Context) -> list[str]:
        _check_names(self.topic, self.channel)  # rendered now
        directory = self._directory()
        owner = owner_of(context)
        for leftover in remove_leftovers(directory, owner):
            self.log.info("Removed %s, left by an earlier try", leftover)
        directory.mkdir(parents=True, exist_ok=True)
        consumer = NSQConsumer(self.topic, self.channel, **self.hook.held_consumer_options())
        run = _Archiving(self, directory, owner, MessageHolder(consumer), self._killed.is_set)
        files = run.run()
        self.log.info(
            "%s/%s: %s message(s) in %s file(s) under %s",
            *(self.topic, self.channel, run.messages, len(files), directory),
        )
        return files


class _Archiving:
    """One run of the loop (see the module's docstring); on the task's thread."""

    def __init__(
        self,
        operator: NSQToObjectStorageOperator,
        directory: ObjectStoragePath,
        owner: str,
        holder: MessageHolder,
        stopping: Callable[[], bool],
    ) -> None:
        self.op = operator
        self.stopping = stopping
        self.directory = directory
        self.owner = owner
        self.holder = holder
        self.token = secrets.token_hex(4)
        self.files: list[str] = []
        self.messages = 0
        self.current: ArchiveFile | None = None
        self.storing = FunctionThread(f"nsq-store-{operator.topic}")

    def run(self) -> list[str]:
        op = self.op
        budget = op.max_messages_per_file
        if op.max_messages is not None:
            budget = min(budget, op.max_messages)
        try:
            self.holder.start(budget)
            self._loop()
            if self.current is not None:
                self._store()
        finally:
            if self.current is not None:
                self.current.close()
            self.holder.close(drain=True)  # REQs whatever is not FINished
            self.storing.stop()
        return self.files

    def _loop(self) -> None:
        op = self.op
        idle_since = time.monotonic()
        while not self._enough():
            if self.stopping():
                raise AirflowException(self._killed_text())
            now = time.monotonic()
            wait = min(READ_SLICE_S, max(op.idle_timeout - (now - idle_since), 0.01))
            if self.current is not None:
                due = self.current.opened_at + op.max_seconds_per_file - now
                wait = min(wait, max(due, 0.01))
            delivered = self.holder.read(wait)
            now = time.monotonic()
            if delivered:
                idle_since = now
            for message in delivered:
                if self._enough():
                    self.holder.requeue(message)  # read ahead past max_messages
                    continue
                self._file().add(message)
                self.messages += 1
                if self._full():
                    self._store()
            if self.current is not None and now - self.current.opened_at >= op.max_seconds_per_file:
                self._store()
            if not delivered and now - idle_since >= op.idle_timeout:
                return

    def _enough(self) -> bool:
        limit = self.op.max_messages
        return limit is not None and self.messages >= limit

    def _file(self) -> ArchiveFile:
        if self.current is None:
            op = self.op
            self.current = ArchiveFile(op.topic, op.channel, op.file_format, op.compression)
        return self.current

    def _full(self) -> bool:
        current = self.current
        assert current is not None
        return (
            len(current.messages) >= self.op.max_messages_per_file
            or current.bytes >= self.op.max_bytes_per_file
        )

    def _store(self) -> None:
        """Store the current file (its own thread; the holder keeps nsqd's connections
        alive meanwhile), then FIN its messages."""
        current, self.current = self.current, None
        assert current is not None
        op = self.op
        name = file_name(
            op.filename_prefix,
            time.time(),
            self.token,
            len(self.files) + 1,
            op.file_format,
            op.compression is not None,
        )
        try:
            stored = self.storing.submit(
                store, current.finished(), self.directory, name, self.owner
            )
            if not self.holder.wait_for(stored, self.stopping):
                raise AirflowException(self._killed_text())
            url = stored.result()  # a store that failed raises: nothing is FINished
        finally:
            current.close()
        self.holder.finish(*current.messages)
        self.files.append(url)
        op.log.info("Stored %s message(s) in %s", len(current.messages), url)

    def _killed_text(self) -> str:
        return (
            f"The task was killed while archiving {self.op.topic}/{self.op.channel}: "
            f"{len(self.files)} file(s) stored; the messages of the rest were handed back"
        )
