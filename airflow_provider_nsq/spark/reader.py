"""``spark.readStream.format("nsq")``: an at-least-once NSQ stream source (PySpark 4.2+:
it implements admission control and ``Trigger.AvailableNow``, which Python stream readers
have from 4.2 on; on an older PySpark importing this module fails naming the version).

Where each piece runs and where the rows live:

- Spark starts one Python process on the driver for the query's source (pyspark's
  ``python_streaming_source_runner``); :class:`NSQStreamReader` runs there for the whole
  query. It reads through the project's consumer
  (:class:`~..client.consumer.NSQConsumer`: every nsqd listed, or found through
  nsqlookupd and re-polled), and a :class:`~.held_batches.HeldBatches` keeps every
  delivered message in flight on the connection that received it.
- ``latestOffset`` cuts the next batch from the delivered messages (bounded by
  ``max_messages_per_batch`` and ``max_bytes_per_batch``), turns it into Arrow and keeps
  it, as Arrow IPC bytes, until the batch is done; ``partitions`` hands those bytes to
  Spark inside the input partitions.
- ``read`` runs on the executors and only decodes the Arrow bytes of its partition: the
  executors never talk to nsqd.
- A batch's messages are FIN'd once Spark has committed it: in ``commit(end)``, or, for
  the last batch of a query (Spark calls ``commit`` for a batch only when it plans the
  next one), in the next ``latestOffset(start)``: Spark plans the next batch only after
  it has written the commit log of the previous one. Anything not FIN'd when the query
  stops is REQ'd; if the process dies first, nsqd redelivers after ``msg_timeout``.

This reader is a ``DataSourceStreamReader``, not a ``SimpleDataSourceStreamReader``: the
simple reader caches each batch's rows in the driver process and sends them as one
partition, so a batch is read by one task; here a batch is split into
``min_partitions`` (or more) partitions and decoded in parallel on the executors.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..client.consumer import NSQConsumer
from ..client.message import NSQMessage
from ..protocol.errors import NSQValueError
from .held_batches import HeldBatches
from .progress import report_batch
from .reader_options import NSQReadOptions
from .versions import stream_reader_too_old

try:
    from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # admission control and availableNow for Python readers: 4.2
    raise stream_reader_too_old() from None

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

#: The rows of ``spark.readStream.format("nsq")``: one per message.
READ_SCHEMA = StructType(
    [
        StructField("id", StringType()),
        StructField("body", BinaryType()),
        StructField("attempts", IntegerType()),
        StructField("timestamp", TimestampType()),
        StructField("topic", StringType()),
        StructField("channel", StringType()),
        StructField("nsqd", StringType()),
    ]
)

# A partition's Arrow bytes travel inside a Spark task; keep each well under
# spark.rpc.message.maxSize (128 MiB) and Spark's large-task warnings reasonable.
PARTITION_TARGET_BYTES = 16 * 1024 * 1024

_RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"


class NSQBatchPartition(InputPartition):
    """One slice of a batch: ``payload`` is an Arrow IPC stream of its rows."""

    def __init__(self, index: int, rows: int, payload: bytes) -> None:
        super().__init__(index)
        self.index = index
        self.rows = rows
        self.payload = payload

    def __repr__(self) -> str:
        return f"NSQBatchPartition(index={self.index}, rows={self.rows}, bytes={len(self.payload)})"


@functools.cache
def arrow_schema() -> pa.Schema:
    """READ_SCHEMA as Arrow, exactly as PySpark expects a data source's batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(READ_SCHEMA, timezone="UTC")


def messages_to_arrow(messages: list[NSQMessage], topic: str, channel: str) -> pa.RecordBatch:
    """One Arrow record batch (READ_SCHEMA) holding ``messages``."""
    import pyarrow as pa

    n = len(messages)
    # Each connection decodes into its own message class: code the nsqd column by class.
    codes: dict[type, int] = {}
    names: list[str] = []
    index = []
    for m in messages:
        cls = m.__class__
        code = codes.get(cls)
        if code is None:
            code = codes[cls] = len(names)
            names.append(m.nsqd or "")
        index.append(code)
    nsqd = pa.DictionaryArray.from_arrays(pa.array(index, pa.int32()), pa.array(names, pa.string()))
    columns = [
        pa.array([m.raw_id for m in messages], pa.binary()).cast(pa.string()),
        pa.array([m.body for m in messages], pa.binary()),
        pa.array([m.attempts for m in messages], pa.int32()),
        pa.array([m.timestamp for m in messages], pa.timestamp("ns", tz="UTC")).cast(
            pa.timestamp("us", tz="UTC"), safe=False
        ),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(channel, pa.string()), n),
        nsqd.cast(pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema())


def _ipc_bytes(batch: pa.RecordBatch) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


@dataclass
class _Batch:
    """A batch this run planned and has not FIN'd yet."""

    number: int
    start: dict[str, Any]
    end: dict[str, Any]
    messages: list[NSQMessage]
    partitions: list[NSQBatchPartition]
    bytes: int


class _Run:
    """The reader's state in the driver-side process: connections, held batches."""

    def __init__(self, options: NSQReadOptions) -> None:
        self.options = options
        self.token = uuid.uuid4().hex[:12]  # tells this run's offsets from a restart's
        consumer = NSQConsumer(options.topic, options.channel, **options.consumer_options())
        self.holder = HeldBatches(
            consumer,
            max_in_flight=options.max_in_flight,
            # Room for the batch Spark runs and the next one, as for the count.
            max_bytes_in_flight=2 * options.max_bytes_per_batch,
        )
        self.holder.start()
        messages_to_arrow([], options.topic, options.channel)  # pyarrow's first call is slow
        self.batches: dict[int, _Batch] = {}
        self.last_cut = time.monotonic()  # when the last batch was cut
        self.finished = 0  # messages FIN'd since the query started

    def owns(self, offset: dict[str, Any]) -> bool:
        return offset.get("run") == self.token

    def finish_through(self, offset: dict[str, Any]) -> None:
        """FIN the batches up to ``offset``: Spark has committed them."""
        if not self.owns(offset):
            return
        done = [b for n, b in self.batches.items() if n <= offset["batch"]]
        for batch in done:
            # Spark waits for this call: FIN without waiting for the write (the pump
            # writes it before anything else, and before close() REQs what is left).
            self.holder.finish(batch.messages, wait=False)
            del self.batches[batch.number]
            self.finished += len(batch.messages)
            report_batch(
                self.options.topic,
                self.options.channel,
                batch.number,
                len(batch.messages),
                self.finished,
            )

    def planned_after(self, start: dict[str, Any]) -> _Batch | None:
        key = _key(start)
        for batch in self.batches.values():
            if _key(batch.start) == key:
                return batch
        return None

    def stop(self) -> None:
        requeued = self.holder.close()
        if requeued:
            log.warning(
                "nsq: the query stopped; REQ'd %s messages not committed by Spark "
                "(redelivered with attempts + 1)",
                requeued,
            )


def _key(offset: dict[str, Any]) -> str:
    return json.dumps(offset, sort_keys=True)


class NSQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader; see the module docstring. Created by ``NSQDataSource``."""

    def __init__(self, options: NSQReadOptions) -> None:
        self.options = options
        self._run: _Run | None = None
        self._run_lock = threading.Lock()
        self._available_now = False
        self._cutoff_ns: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to executors (read) without connections, threads or batches.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- driver-side process --------------------------------------------------------------

    def _state(self) -> _Run:
        with self._run_lock:
            if self._run is None:
                self._run = _Run(self.options)
                _stop_on_sigterm()
            return self._run

    def initialOffset(self) -> dict[str, Any]:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # Drain what was published before now; newer messages wait for the next run.
        self._available_now = True
        self._cutoff_ns = time.time_ns()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if isinstance(limit, ReadAllAvailable):
            # Only trigger(once=True) asks for that here (availableNow is implemented).
            # Spark stops right after that batch, without a later call telling the reader
            # it was committed: its messages would be REQ'd and read again every run.
            raise NSQValueError(
                "the nsq stream reader does not support trigger(once=True): its only batch "
                "could never be FIN'd; use trigger(availableNow=True)"
            )
        run = self._state()
        # Spark plans a batch only after committing the previous one, and never calls
        # commit() for the last batch of a query: FIN it here.
        run.finish_through(start)
        planned = run.planned_after(start)
        if planned is not None:  # asked again for the same batch: the same answer
            return planned.end
        opts = self.options
        max_messages, max_bytes = opts.max_messages_per_batch, opts.max_bytes_per_batch
        if isinstance(limit, ReadMaxRows):
            max_messages = max(1, limit.max_rows)
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = max(1, limit.max_bytes)
        if self._available_now:
            # Drain: fill each batch; the channel is dry after batch_timeout without a
            # message, and an empty batch ends the query.
            messages = run.holder.take(
                max_messages,
                max_bytes,
                idle=opts.batch_timeout,
                published_before=self._cutoff_ns,
            )
        else:
            # Stream: a batch is what arrived within batch_timeout of the previous cut.
            until = run.last_cut + opts.batch_timeout
            messages = run.holder.take(max_messages, max_bytes, until=until)
        run.last_cut = time.monotonic()
        if not messages:
            return start
        number = int(start.get("batch", 0)) + 1
        end = {"batch": number, "run": run.token}
        run.batches[number] = self._plan(number, start, end, messages)
        return end

    def _plan(
        self, number: int, start: dict[str, Any], end: dict[str, Any], messages: list[NSQMessage]
    ) -> _Batch:
        opts = self.options
        arrow = messages_to_arrow(messages, opts.topic, opts.channel)
        size = sum(len(m.body) for m in messages)
        rows = len(messages)
        count = max(opts.min_partitions, math.ceil(arrow.nbytes / PARTITION_TARGET_BYTES))
        count = max(1, min(rows, count))
        step = math.ceil(rows / count)
        partitions = [
            NSQBatchPartition(i, min(step, rows - offset), _ipc_bytes(arrow.slice(offset, step)))
            for i, offset in enumerate(range(0, rows, step))
        ]
        # The Arrow bytes are the batch now; keep only what FIN/TOUCH/REQ need.
        for m in messages:
            m.body = b""
        log.info(
            "nsq: batch %s: %s messages, %s bytes of bodies, %s partitions",
            number,
            rows,
            size,
            len(partitions),
        )
        return _Batch(number, start, end, messages, partitions, size)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        run = self._state()
        if _key(start) == _key(end):
            return []
        if run.owns(end):
            batch = run.batches.get(int(end["batch"]))
            if batch is None:
                raise RuntimeError(
                    f"nsq: batch {end} was planned by this reader but is not held any more"
                )
            return list(batch.partitions)
        # Spark replays a batch an earlier run planned and did not commit: that run's
        # messages went back to nsqd (REQ, or msg_timeout) and come again in new batches.
        log.warning(
            "nsq: batch %s was planned by an earlier run of this query and not committed; "
            "its messages were returned to nsqd and are redelivered in later batches",
            end,
        )
        return []

    def commit(self, end: dict[str, Any]) -> None:
        if self._run is not None:
            self._run.finish_through(end)

    def stop(self) -> None:
        with self._run_lock:
            run, self._run = self._run, None
        if run is not None:
            run.stop()

    # -- executors ------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        assert isinstance(partition, NSQBatchPartition)
        with pa.ipc.open_stream(partition.payload) as stream:
            yield from stream


def _stop_on_sigterm() -> None:
    """Spark ends the source's process with SIGTERM when the query stops; Python's
    default would kill it before the reader REQs its held messages. Turn SIGTERM into
    SystemExit there (the runner then calls ``stop()``). Only in that process, from its
    main thread, and only if nothing else handles SIGTERM."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) != _RUNNER_MODULE:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    stopping = threading.Event()

    def exit_now(signum: int, frame: object) -> None:
        if stopping.is_set():  # Spark sends it more than once; let stop() finish
            return
        stopping.set()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_now)
    log.debug("nsq: SIGTERM now stops the reader cleanly (pid %s)", os.getpid())
