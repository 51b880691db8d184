"""The stream reader's batches, held in flight until Spark committed them.

NSQ cannot replay: a message exists for a reader only while it is in flight on the
connection that received it, and only that connection can FIN it. The stream reader
hands messages to Spark in batches and may FIN a batch only once Spark committed it, so
it keeps every delivered message in flight until it says "FIN these", or stops (REQ the
rest, so nsqd redelivers them at once).

The reader is idle between Spark's calls (while Spark runs a batch), so a pump thread
owns the consumer through a :class:`~airflow_provider_nsq.client.holding.holder.MessageHolder`
(the pump is its owner thread: every nsqd, found through nsqlookupd or listed,
reconnects, one RDY budget): it reads (answering heartbeats, prefetching the next batch
within the in-flight budget, joining nsqds that appear), and the holder TOUCHes what is
held on time; it runs the FIN the reader asks for. Only that thread calls the holder;
when it stops, the holder's ``close()`` REQs every message not FIN'd.

Memory: everything in flight (held in batches, or prefetched) is bounded by the in-flight
budget in messages, and the budget is sized from the bodies seen so far so that it also
holds about ``max_bytes_in_flight`` bytes: nsqd cannot send more than the budget allows,
so a byte bound needs a budget that follows the message size.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from itertools import accumulate
from operator import attrgetter

from ..client.consumer import NSQConsumer
from ..client.holding.holder import MessageHolder
from ..client.message import NSQMessage
from ..protocol.errors import NSQError, NSQTimeoutError

log = logging.getLogger(__name__)

# How long the pump waits for data before it looks at queued work and TOUCH deadlines.
POLL_INTERVAL_S = 0.02
# Body size assumed before any message arrived (sizes the first in-flight budget).
INITIAL_SIZE_GUESS = 64 * 1024


_BODY = attrgetter("body")


class _Chunk:
    """Messages delivered together and not yet batched, with their bodies' total size."""

    __slots__ = ("messages", "size")

    def __init__(self, messages: list[NSQMessage], size: int) -> None:
        self.messages = messages
        self.size = size


class HeldBatches:
    """Owns a consumer (through its holder) and the pump thread; see the module
    docstring.

    :param consumer: not started yet; the pump thread starts, reads and closes it.
    :param max_in_flight: the RDY budget: messages held plus prefetched, at most.
    :param max_bytes_in_flight: about how many bytes of bodies may be held plus prefetched:
        the in-flight budget shrinks below ``max_in_flight`` when messages are large.
    """

    def __init__(
        self, consumer: NSQConsumer, *, max_in_flight: int, max_bytes_in_flight: int
    ) -> None:
        self._holder = MessageHolder(consumer)
        self._max_in_flight = max_in_flight
        self._max_bytes_in_flight = max_bytes_in_flight
        self._seen_messages = 0
        self._seen_bytes = 0
        self._budget = 0  # the in-flight budget last set
        self._cond = threading.Condition()
        self._pending: deque[_Chunk] = deque()  # delivered, not yet in a batch
        self._pending_bytes = 0
        self._work: list[Callable[[], None]] = []
        self._failure: BaseException | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self.requeued = 0  # REQ'd by close()

    # -- lifecycle (reader's thread) ----------------------------------------------------

    @property
    def touched(self) -> int:
        """Messages TOUCHed so far (held longer than a third of msg_timeout)."""
        return self._holder.touched

    def start(self) -> None:
        """Start the pump thread, which connects and subscribes; errors raise here."""
        self._budget = self._budget_for_size()
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._pump, args=(started,), name="nsq-stream-pump", daemon=True
        )
        self._thread.start()
        started.wait()  # set by the pump in every case: started, or failed to
        with self._cond:
            failure = self._failure
        if failure is not None:
            raise failure

    def close(self, timeout: float = 10.0) -> int:
        """Stop: REQ every message not FIN'd (nsqd redelivers it at once, attempts + 1)
        and close the connections. Returns how many were REQ'd. If the pump does not stop
        within ``timeout``, its messages are left to nsqd's msg_timeout."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        thread = self._thread
        if thread is None:
            self.requeued = self._holder.close()
        elif thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning(
                    "nsq: the pump thread did not stop within %ss; the messages it holds "
                    "return to the channel after their msg_timeout",
                    timeout,
                )
        return self.requeued

    # -- batches (reader's thread) ----------------------------------------------------

    def take(
        self,
        max_messages: int,
        max_bytes: int,
        until: float | None = None,
        idle: float | None = None,
        published_before: int | None = None,
    ) -> list[NSQMessage]:
        """The next batch: delivered messages in arrival order, at most ``max_messages``
        and ``max_bytes`` of bodies (at least one message, however big).

        It waits for the batch to fill until the ``time.monotonic()`` deadline ``until``,
        and, with ``idle``, no longer than ``idle`` seconds without a new message (the
        channel has run dry). With ``published_before`` (ns since the epoch), a message
        published later is not batched: it stays held until :meth:`close` REQs it, and
        does not count as new.
        """
        if until is None and idle is None:
            raise ValueError("take() needs a deadline or an idle time")
        batch: list[NSQMessage] = []
        size = 0
        progress = time.monotonic()
        with self._cond:
            while True:
                self._raise_failure()
                taken = len(batch)
                size, full = self._fill(batch, size, max_messages, max_bytes, published_before)
                if full:
                    break
                now = time.monotonic()
                if len(batch) > taken:
                    progress = now
                wait_until = until if until is not None else math.inf
                if idle is not None:
                    wait_until = min(wait_until, progress + idle)
                if now >= wait_until:
                    break
                self._cond.wait(wait_until - now)
        return batch

    def _fill(
        self,
        batch: list[NSQMessage],
        size: int,
        max_messages: int,
        max_bytes: int,
        published_before: int | None,
    ) -> tuple[int, bool]:
        """Move pending messages into ``batch`` (holding ``size`` bytes of bodies) up to
        the bounds; the batch's size now, and whether it is full. Holds the lock."""
        pending = self._pending
        full = False
        while pending and not full:
            chunk = pending.popleft()
            self._pending_bytes -= chunk.size
            messages = chunk.messages
            if published_before is not None:
                messages = [m for m in messages if m.timestamp <= published_before]
            # The whole chunk when it fits (the usual case), else the part that does.
            fits = len(messages) <= max_messages - len(batch)
            chunk_size = chunk.size if len(messages) == len(chunk.messages) else -1
            if fits and chunk_size >= 0 and size + chunk_size <= max_bytes:
                batch += messages
                size += chunk_size
                # Exactly full: done, no waiting for a message that cannot fit.
                full = len(batch) >= max_messages or size >= max_bytes
                continue
            sizes = list(accumulate(map(len, map(_BODY, messages))))
            count = min(max_messages - len(batch), bisect_right(sizes, max_bytes - size))
            if not batch and not count and messages:
                count = 1  # one message bigger than max_bytes: a batch of its own
            batch += messages[:count]
            size += sizes[count - 1] if count else 0
            rest = messages[count:]
            if rest:
                full = True
                left = _Chunk(rest, sum(map(len, map(_BODY, rest))))
                pending.appendleft(left)
                self._pending_bytes += left.size
            if len(batch) >= max_messages or size >= max_bytes:
                full = True
        return size, full

    def finish(
        self, messages: list[NSQMessage], timeout: float = 30.0, *, wait: bool = True
    ) -> None:
        """FIN ``messages`` (on the pump thread); returns once they are written, or at
        once with ``wait=False`` (then a failure to write them fails the next call).
        Either way they are written before :meth:`close` REQs what is left."""
        if messages:
            self._run(lambda: self._holder.finish(*messages), timeout if wait else None, "FIN")

    @property
    def pending(self) -> int:
        """Messages delivered and not yet taken into a batch."""
        with self._cond:
            return sum(len(c.messages) for c in self._pending)

    def _run(self, work: Callable[[], None], timeout: float | None, what: str) -> None:
        done = threading.Event()
        errors: list[BaseException] = []

        def task() -> None:
            try:
                work()
            except BaseException as exc:
                errors.append(exc)
                raise
            finally:
                done.set()

        with self._cond:
            self._raise_failure()
            self._work.append(task)
        if timeout is None:
            return
        if not done.wait(timeout):
            raise NSQTimeoutError(f"nsq: the pump thread did not send {what} within {timeout}s")
        if errors:
            raise errors[0]

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is not None:
            raise NSQError(f"nsq: the held batches' connection failed: {failure}") from failure
        if self._closing:
            raise NSQError("nsq: the held batches are stopped")

    # -- pump (its own thread) ----------------------------------------------------------

    def _pump(self, started: threading.Event) -> None:
        holder = self._holder
        try:
            holder.start(self._budget)  # this thread is the holder's owner from now on
        except BaseException as exc:
            with self._cond:
                self._failure = exc
            started.set()
            return
        started.set()
        try:
            while True:
                with self._cond:
                    if self._closing:
                        break
                    work, self._work = self._work, []
                for task in work:
                    task()
                budget = self._budget_for_size()
                if abs(budget - self._budget) * 4 > self._budget:  # > 25 %: worth an RDY
                    holder.set_max_in_flight(budget)
                    self._budget = budget
                got = holder.read(POLL_INTERVAL_S)  # TOUCHes what is due, too
                if got:
                    size = sum(map(len, map(_BODY, got)))
                    self._seen_messages += len(got)
                    self._seen_bytes += size
                    with self._cond:
                        self._pending.append(_Chunk(got, size))
                        self._pending_bytes += size
                        self._cond.notify_all()
        except BaseException as exc:
            log.error("nsq: the held batches' connection failed: %s", exc)
            with self._cond:
                self._failure = exc
                self._cond.notify_all()
        finally:
            self._shut_down()

    def _budget_for_size(self) -> int:
        """The in-flight budget (messages) that holds about max_bytes_in_flight."""
        if self._seen_messages:
            average = max(self._seen_bytes / self._seen_messages, 1.0)
        else:
            average = INITIAL_SIZE_GUESS
        return max(1, min(self._max_in_flight, int(self._max_bytes_in_flight / average)))

    def _shut_down(self) -> None:
        with self._cond:
            work, self._work = self._work, []
        for task in work:  # let waiting callers return (their work fails: closing)
            try:
                task()
            except BaseException:
                pass
        held = self._holder.in_flight()
        try:
            # CLS first (RDY 0), so nsqd does not hand them back; then REQ what is held,
            # prefetched or unread.
            self.requeued = self._holder.close()
        except (NSQError, OSError) as exc:
            log.warning(
                "nsq: could not REQ %s held messages (%s); nsqd redelivers them after "
                "their msg_timeout",
                held,
                exc,
            )
