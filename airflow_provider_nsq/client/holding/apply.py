"""Consume and apply: take messages off a channel, hand each one (or each batch) to a
function, FIN after it returns, REQ with backoff when it raises, and set a message aside
on a dead-letter topic once it failed ``max_attempts`` deliveries.

How a message is answered:

- the function returned: FIN (after its result, when results are kept, was checked);
- it raised, delivery ``n`` < ``max_attempts``: REQ after the ``n``-th wait of a
  :class:`~..backoff.Backoff` from ``requeue_delay_ms``, doubling, capped at the
  connection's ``max_req_timeout_ms`` (nsqd refuses longer, closing the connection);
- it raised on delivery ``max_attempts`` (or later): published to the dead-letter topic
  in an envelope (:mod:`.dead_letters`), FIN once nsqd said OK; with no dead-letter
  topic, or when that publish failed, REQ'd as above and the run stops with
  :class:`~...protocol.errors.NSQPoisonMessageError` (never dropped silently);
- everything taken and not answered when the run ends, however it ends (the function
  still running at a timeout, messages read ahead), is REQ'd by the consumer's
  ``close()``.

Threads: the function runs on a :class:`~.function_thread.FunctionThread`; the consumer
is held by a :class:`~.holder.MessageHolder` on the caller's thread, which waits for
the function in slices of at most :data:`~.holder.KEEP_ALIVE_S` and in between answers
heartbeats and TOUCHes what has been held for a third of msg_timeout.

What a message costs is paid per hand-off, not per message: the function thread is
handed every message held at once (a batch function up to ``batch_size``; a
per-message function is called on each in turn, stopping after the first that raises), the answers of the calls
that ended are written together (one FIN write per connection), and the metrics are
counted in memory and sent at most once a second (and when the run ends). A message
is still FINished only after
its own call returned: the answers of a long hand-off are written at every keep-alive
slice, while the function runs on the next message. Why a thread and not the task's
own: the blocking consumer must do its I/O (heartbeats, TOUCH) while a slow function
runs, and only its owner thread may; handed a group at a time, the thread costs one
hand-off per group instead of one per message.

The run ends after ``max_messages`` messages were answered, or once ``idle_timeout``
seconds passed with nothing to do (no message in hand, none delivered).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from typing import Any, Literal, Protocol, get_args

from ...protocol.errors import NSQPoisonMessageError, NSQValueError
from ..backoff import Backoff
from ..consumer import NSQConsumer
from ..message import NSQMessage, answer_or_log, message_records
from .blocking_dead_letters import DeadLetterPublisher
from .function_thread import FunctionThread
from .holder import MessageHolder

log = logging.getLogger(__name__)

#: A batch takes what is delivered until it is full or nothing came for this long.
BATCH_GATHER_S = 0.25
#: Metrics are sent at most this often (seconds), and when the run ends.
REPORT_EVERY_S = 1.0
#: The longest single wait for a delivery, so that a stop request is seen soon.
READ_SLICE_S = 0.5
Counted = Literal["applied", "requeued", "dead_lettered", "dead_letter_failed", "exhausted"]
Timed = Literal["apply_duration", "delay"]
Ended = Literal["max_messages", "idle_timeout", "stopped"]


class ApplyMetrics(Protocol):
    """Where a run reports what it did, as it does it (the operator's metrics)."""

    def count(self, what: Counted, n: int) -> None: ...

    def time(self, what: Timed, seconds: float) -> None: ...


class _NoMetrics:
    def count(self, what: Counted, n: int) -> None:
        pass

    def time(self, what: Timed, seconds: float) -> None:
        pass


@dataclass
class ApplySummary:
    """What one run did: counts, never bodies."""

    messages: int = 0  # deliveries handed to the function
    applied: int = 0  # ... FINished after it returned
    requeued: int = 0  # ... REQ'd after it raised
    dead_lettered: int = 0  # ... published to the dead-letter topic, then FINished
    nsqds: set[str] = field(default_factory=set)  # the nsqds that delivered them
    ended: Ended | None = None
    results: list[Any] = field(default_factory=list)  # non-None results, when kept

    def as_dict(self, topic: str, channel: str) -> dict[str, Any]:
        """The summary as a JSON-safe dict (what the operator returns to XCom)."""
        return {
            "topic": topic,
            "channel": channel,
            "messages": self.messages,
            "applied": self.applied,
            "requeued": self.requeued,
            "dead_lettered": self.dead_lettered,
            "nsqds": sorted(self.nsqds),
            "ended": self.ended,
        }


@dataclass(frozen=True)
class ApplySettings:
    """How a run takes and answers messages (checked by the caller: the operator).

    :param batch: call the function with a list of records (up to ``batch_size``)
        instead of one record.
    :param max_messages: end after answering this many deliveries (None: no limit).
    :param max_in_flight: messages held at once (the RDY budget). More than
        ``batch_size`` lets nsqd deliver the next group while the function runs.
    :param batch_size: the batch of a batch function (None: ``max_in_flight``); a
        per-message function's thread is handed every message held.
    :param idle_timeout: end once this many seconds passed with nothing to do.
    :param max_attempts: the delivery (nsqd's ``attempts``) after whose failure a message
        is set aside (None: never; REQ'd every time).
    :param requeue_delay_ms: the first REQ delay (0: every REQ without delay).
    :param max_requeue_delay_ms: the longest REQ delay (the connection's
        ``max_req_timeout_ms``).
    :param keep_results: keep the function's non-None results (each must be JSON).
    """

    batch: bool = False
    max_messages: int | None = None
    max_in_flight: int = 100
    batch_size: int | None = None
    idle_timeout: float = 5.0
    max_attempts: int | None = None
    requeue_delay_ms: int = 0
    max_requeue_delay_ms: int = 3_600_000
    keep_results: bool = False


_TIMESTAMP = attrgetter("timestamp")
#: No message FINished since the last report (``_oldest_finished``).
_NEVER = float("inf")


class _Calls:
    """The calls of one hand-off, run on the function thread: the function on each
    record in turn, stopping after the first that raises (the messages after it are
    handed over again, in order), or once on the whole batch. What each call gave is
    kept as it ends (``results`` in order; ``error`` once one raised, after which no
    call starts), so the consumer's thread can answer a message while the function
    runs on the next."""

    def __init__(self, function: Callable[[Any], Any], records: list[Any], *, batch: bool):
        self.function = function
        self.records = records
        self.batch = batch
        # Written by the function thread only: the results of the calls that returned,
        # then the error of the one that raised (None while none did).
        self.results: list[Any] = []
        self.error: BaseException | None = None
        self.seconds = 0.0  # spent in the function, over every call
        # Read and written by the consumer's thread only.
        self.answered = 0  # calls whose messages are answered
        #: Set by the consumer's thread: no further call starts.
        self.stop = False

    @property
    def called(self) -> int:
        return len(self.results) + (self.error is not None)

    @property
    def unanswered(self) -> bool:
        """Calls ended whose messages are not answered yet."""
        return self.called > self.answered

    def run(self) -> None:
        function, results, clock = self.function, self.results, time.perf_counter
        started = clock()
        try:
            for given in [self.records] if self.batch else self.records:
                if self.stop:
                    return
                results.append(function(given))
        except BaseException as exc:  # the consumer's thread decides what it means
            self.error = exc
        finally:
            self.seconds = clock() - started


class ConsumeApply:
    """One consume-and-apply run (see the module's docstring): :meth:`run` starts the
    consumer, applies, closes the consumer and returns the summary.

    :param consumer: a consumer not yet started (it is started, then closed, by :meth:`run`).
    :param function: called with one record (or a list of them, ``batch``): the dicts of
        :func:`~..message.message_record`, never the live message, so it cannot answer
        nsqd from its thread.
    :param topic: the topic the consumer reads (named in records and envelopes).
    :param channel: its channel.
    :param settings: how to take and answer messages.
    :param dead_letters: where to set aside messages past ``max_attempts`` (None: stop
        the run instead).
    :param error_text: an error's text as it may be published (mask secrets here).
    :param by: who runs this, written into envelopes (``dag_id``, ``task_id``, ``run_id``).
    :param metrics: told what happened as it happens.
    :param stopping: polled between waits; True ends the run at once (``ended="stopped"``),
        what is held handed back.
    """

    def __init__(
        self,
        consumer: NSQConsumer,
        function: Callable[[Any], Any],
        *,
        topic: str,
        channel: str,
        settings: ApplySettings,
        dead_letters: DeadLetterPublisher | None = None,
        error_text: Callable[[BaseException], str] = str,
        by: Mapping[str, Any] | None = None,
        metrics: ApplyMetrics | None = None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.holder = MessageHolder(consumer, dead_letters=dead_letters)
        self.function = function
        self.topic = topic
        self.channel = channel
        self.settings = settings
        self.dead_letters = dead_letters
        self.error_text = error_text
        self.by = dict(by or {})
        self.metrics: ApplyMetrics = metrics or _NoMetrics()
        self.stopping = stopping
        self.summary = ApplySummary()
        cap_ms = max(settings.max_requeue_delay_ms, 1)
        self._backoff = (
            Backoff(settings.requeue_delay_ms / 1000, cap_ms / 1000)
            if settings.requeue_delay_ms > 0
            else None
        )
        self._thread = FunctionThread(f"nsq-apply-{topic}-{channel}")
        self._held: deque[NSQMessage] = deque()  # read, not yet handed to the function
        self._budget = -1  # the in-flight budget last set
        # What the run did since the last report (sent at most every REPORT_EVERY_S and
        # when the run ends, never per message): the counts, the calls and their time,
        # and the oldest message FINished (nsqd's timestamp).
        self._counts: dict[Counted, int] = dict.fromkeys(get_args(Counted), 0)
        self._calls = 0
        self._call_seconds = 0.0
        self._oldest_finished = _NEVER
        self._next_report = 0.0

    def run(self) -> ApplySummary:
        """Start the consumer, apply until the run ends, close the consumer (which REQs
        what was not answered, after taking in what was still on the wire). Raises
        :class:`NSQPoisonMessageError` when a message past ``max_attempts`` could not be
        set aside, and whatever stopped the run otherwise."""
        started = False
        try:
            self._budget = self._wanted_budget()
            self.holder.start(self._budget)
            started = True
            self.summary.ended = self._loop()
        finally:
            self._report()
            try:
                # Ended on max_messages, nothing is on the wire: the budget kept nsqd's
                # RDY at what the run could still answer, so with all answered it sent
                # no more. Otherwise take in what nsqd sent before it read RDY 0.
                self.holder.close(drain=started and self.summary.ended != "max_messages")
            finally:
                self._thread.stop()
        return self.summary

    # -- the loop ------------------------------------------------------------------------

    def _loop(self) -> Ended:
        idle_since = time.monotonic()
        while True:
            if self.stopping():
                return "stopped"
            left = self._left()
            if left == 0:
                return "max_messages"
            self._set_budget()
            self.holder.keep_alive(when_due=True)
            if not self._held:
                idle_left = self.settings.idle_timeout - (time.monotonic() - idle_since)
                if idle_left <= 0:
                    return "idle_timeout"
                if self._read(min(READ_SLICE_S, idle_left)):
                    idle_since = time.monotonic()
                continue
            if not self._hand_off(self._next_group(left)):
                return "stopped"
            idle_since = time.monotonic()

    def _left(self, answering: int = 0) -> int | None:
        """Deliveries the run may still answer (None: no limit), once ``answering``
        more are answered."""
        limit = self.settings.max_messages
        return None if limit is None else max(limit - self.summary.messages - answering, 0)

    def _wanted_budget(self, answering: int = 0) -> int:
        left = self._left(answering)
        return (
            self.settings.max_in_flight if left is None else min(self.settings.max_in_flight, left)
        )

    def _set_budget(self, answering: int = 0) -> None:
        """Never more in flight than the run may still answer: what it holds counts
        against nsqd's RDY, so ``answered + held <= max_messages``. Called before
        messages are answered (``answering``), so nsqd reads the lower RDY before the
        FIN or REQ that frees room."""
        budget = self._wanted_budget(answering)
        if budget != self._budget:
            self.holder.set_max_in_flight(budget)
            self._budget = budget

    def _read(self, timeout: float) -> bool:
        """Take what was delivered (waiting up to ``timeout`` for the first)."""
        got = self.holder.read(timeout)
        self._held.extend(got)
        return bool(got)

    def _next_group(self, left: int | None) -> list[NSQMessage]:
        """What the function thread gets next: every message held (a per-message
        function is called on each in turn: one hand-off for all of them, whatever
        ``batch_size``, since each hand-off costs two thread wake-ups), or the next batch:
        what is held, then what arrives until the batch is full or nothing came for
        :data:`BATCH_GATHER_S`."""
        settings = self.settings
        size = settings.max_in_flight
        if settings.batch and settings.batch_size:
            size = min(settings.batch_size, size)
        if left is not None:
            size = min(size, left)
        if settings.batch:
            while len(self._held) < size and self._read(BATCH_GATHER_S):
                pass
        held = self._held
        if size >= len(held):
            group = list(held)
            held.clear()
            return group
        return [held.popleft() for _ in range(size)]

    # -- handing work to the function thread, keeping the consumer alive meanwhile -------

    def _hand_off(self, group: list[NSQMessage]) -> bool:
        """Run the function on ``group`` (once per message, or once on the whole batch)
        on the function thread, and answer each message as its call ends: FIN after it
        returned, REQ or dead letter after it raised. One hand-off for the whole group,
        answers written together (one write per connection for what is done at each
        look), metrics counted here. False when the run was
        stopped meanwhile: what is not answered is handed back by ``close()``."""
        records = message_records(group, self.topic, self.channel)
        calls = _Calls(self.function, records, batch=self.settings.batch)
        future: Future = self._thread.submit(calls.run)
        # wait_for returns early (False) when the run stops or calls ended since the
        # last answers: those are answered while the function runs on.
        while not self.holder.wait_for(future, lambda: self.stopping() or calls.unanswered):
            if self.stopping():
                calls.stop = True  # no further call starts; the running one is left
                return False
            self._answer(group, calls)
        self._answer(group, calls)
        if calls.answered < len(group):
            # The function raised on a message: the ones after it were not called on
            # yet, and go first into the next group, in their order.
            self._held.extendleft(reversed(group[calls.answered :]))
        self._calls += calls.called
        self._call_seconds += calls.seconds
        if time.monotonic() >= self._next_report:
            self._report()
        return True

    def _answer(self, group: list[NSQMessage], calls: _Calls) -> None:
        """Answer the messages whose calls ended since the last answers."""
        answered = calls.answered
        returned = len(calls.results)  # read before error: no result follows an error
        error = calls.error
        if self.settings.batch:
            if returned or error is not None:
                calls.answered = len(group)
                if error is None:
                    self._finish(group, calls.results)
                else:
                    self._fail(group, error)
            return
        if returned > answered:
            calls.answered = returned
            self._finish(group[answered:returned], calls.results[answered:returned])
        if error is not None and calls.answered == returned:
            calls.answered = returned + 1
            self._fail([group[returned]], error)

    # -- answering -----------------------------------------------------------------------

    def _answering(self, group: list[NSQMessage]) -> None:
        """Count ``group`` as answered (after lowering the budget, so nsqd reads the
        lower RDY before the FIN or REQ that frees room)."""
        self._set_budget(answering=len(group))
        summary = self.summary
        summary.messages += len(group)
        # One message per connection: they name the nsqds that delivered the group.
        summary.nsqds.update(m.nsqd or "" for m in {m.connection: m for m in group}.values())

    def _finish(self, group: list[NSQMessage], results: list[Any]) -> None:
        """FIN ``group``, whose call(s) returned ``results`` (kept when asked)."""
        self._answering(group)
        if self.settings.keep_results:
            self._keep_results(group, results)
        self.holder.finish(*group)
        self.summary.applied += len(group)
        self._counts["applied"] += len(group)
        oldest = min(map(_TIMESTAMP, group))
        self._oldest_finished = min(self._oldest_finished, oldest)

    def _fail(self, group: list[NSQMessage], error: BaseException) -> None:
        """``group``'s call raised ``error``: REQ each message with backoff, or set it
        aside on the dead-letter topic past ``max_attempts``."""
        self._answering(group)
        log.warning(
            "%s failed (%s: %s)",
            f"A batch of {len(group)}" if self.settings.batch else f"Message {group[0].id}",
            type(error).__name__,
            self.error_text(error),
        )
        poison: NSQPoisonMessageError | None = None
        limit = self.settings.max_attempts
        for message in group:
            if limit is not None and message.attempts >= limit:
                failure = self._set_aside(message, error)
                if failure is None:
                    continue
                poison = poison or failure
            self._requeue(message)
            self.summary.requeued += 1
            self._counts["requeued"] += 1
        if poison is not None:
            raise poison

    def _report(self) -> None:
        """Send what the run did since the last report: the counts, the mean call's
        duration, and how far behind the topic the oldest message FINished was (one
        call per metric)."""
        self._next_report = time.monotonic() + REPORT_EVERY_S
        metrics = self.metrics
        for what, n in self._counts.items():
            if n:
                metrics.count(what, n)
        self._counts = dict.fromkeys(self._counts, 0)
        if self._calls:
            metrics.time("apply_duration", self._call_seconds / self._calls)
            self._calls, self._call_seconds = 0, 0.0
        if self._oldest_finished != _NEVER:
            metrics.time("delay", time.time() - self._oldest_finished / 1e9)
            self._oldest_finished = _NEVER

    def _keep_results(self, group: list[NSQMessage], results: list[Any]) -> None:
        """Keep the calls' non-None results (each must be JSON); one that is not fails
        the run, and its message and those after it are handed back (REQ), unanswered:
        the messages before it are FINished."""
        for i, result in enumerate(results):
            if result is None:
                continue
            try:
                json.dumps(result)
            except (TypeError, ValueError) as exc:
                first = i if len(results) == len(group) else 0  # a batch's one result: all
                if first:
                    self.holder.finish(*group[:first])
                for message in group[first:]:
                    answer_or_log(message, "REQ", partial(self.holder.requeue, message))
                raise NSQValueError(
                    f"the function returned a {type(result).__name__}, which cannot be kept "
                    f"as a JSON result ({exc}); its message(s) were handed back (REQ): return "
                    "JSON-serialisable values (or None) with return_apply_function_results"
                ) from None
            self.summary.results.append(result)

    def _requeue(self, message: NSQMessage) -> None:
        delay_ms = 0
        if self._backoff is not None:
            delay_ms = round(self._backoff.nth(max(message.attempts, 1)) * 1000)
        answer_or_log(message, "REQ", partial(self.holder.requeue, message, delay_ms=delay_ms))

    def _set_aside(self, message: NSQMessage, error: BaseException) -> NSQPoisonMessageError | None:
        """Publish ``message`` to the dead-letter topic and FIN it; the error to stop
        the run with when it could not be."""
        nsqd = message.nsqd or ""
        if self.dead_letters is None:
            self._counts["exhausted"] += 1
            return NSQPoisonMessageError(
                message.id, nsqd, message.attempts, "no dead_letter_topic is set"
            )
        failed = self.holder.give_up(
            message, "max_attempts", error=error, error_text=self.error_text(error), by=self.by
        )
        if failed is not None:
            self._counts["dead_letter_failed"] += 1
            return NSQPoisonMessageError(
                message.id,
                nsqd,
                message.attempts,
                f"could not be published to the dead-letter topic {self.dead_letters.topic} "
                f"({failed})",
            )
        self.summary.dead_lettered += 1
        self._counts["dead_lettered"] += 1
        log.warning(
            "Message %s from %s failed delivery %s: published to %s",
            message.id,
            nsqd,
            message.attempts,
            self.dead_letters.topic,
        )
        return None
