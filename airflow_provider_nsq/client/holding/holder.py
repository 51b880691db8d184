"""The one owner of a consumer while its messages are held and user code runs.

Who may call what (the rule):

- A holder takes a consumer before starting it and owns it until it has closed it: from
  then on only the holder calls the consumer. User code gets records or messages, never
  the consumer. A call on a held consumer from anywhere else is an NSQStateError naming
  the call and the holder (the consumer checks it: ``held_by``, and the holder sets
  itself in ``CALLING_HOLDER`` around each of its calls).
- :class:`MessageHolder` (blocking) lives on one thread, its owner: the thread that
  starts it. Every call on it comes from that thread (another thread gets an
  NSQStateError naming both). User code runs on another thread while the owner waits for
  it with :meth:`MessageHolder.wait_for`, which keeps the consumer alive meanwhile.
- :class:`AsyncMessageHolder` lives on one event loop. It TOUCHes on a task of its own;
  one task at a time may wait in :meth:`AsyncMessageHolder.read` (a second one is an
  NSQStateError); answers (FIN, REQ, give-up) may come from any task of that loop and
  are written between awaits.

What a holder does for what it holds:

- TOUCH on time: a message is TOUCHed a third of msg_timeout after its delivery or its
  last TOUCH (the consumer's one TOUCH policy, ``touch_held()``; only a holder asks for
  it), and nsqd's heartbeats are answered, so nothing comes back while user code runs;
- answers: :meth:`~MessageHolder.finish` (FIN), :meth:`~MessageHolder.requeue` (REQ,
  after a delay), each one write per connection for a batch;
  :meth:`~MessageHolder.give_up` (publish a dead-letter envelope, then FIN; left
  unanswered when that publish fails, so the caller can REQ it);
- close: CLS, then REQ every message delivered and not answered, so nsqd redelivers it
  at once instead of after its msg_timeout.

Both holders share everything but their I/O (:class:`_Holding`): the answers, the TOUCH
schedule, and the start, give-up and close sequences, written once as steps that yield
the calls to make (on the consumer or the dead-letter publisher): the blocking holder
makes each call, the asyncio holder awaits it. What differs is who may call and how the
consumer is kept alive while user code runs: the blocking holder is owned by one thread
and keeps the consumer alive between the slices of :meth:`MessageHolder.wait_for`; the
asyncio holder serves any task of its loop and TOUCHes on a task of its own, since the
event loop answers heartbeats by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Generator, Mapping
from concurrent.futures import Future, wait
from functools import partial
from typing import Any, Generic, TypeVar

from ...protocol.errors import NSQError, NSQStateError
from ..consumer import CALLING_HOLDER, AsyncNSQConsumer, NSQConsumer
from ..message import NSQMessage, answer, answer_or_log
from ..runners.steps import drive
from .asyncio_dead_letters import AsyncDeadLetterPublisher
from .blocking_dead_letters import DeadLetterPublisher
from .dead_letters import Reason

__all__ = ["DRAIN_S", "KEEP_ALIVE_S", "AsyncMessageHolder", "MessageHolder"]

log = logging.getLogger(__name__)

#: While user code runs, the consumer's I/O (heartbeats, deliveries, TOUCH when due) is
#: done at least this often (seconds).
KEEP_ALIVE_S = 0.5
#: When closing after RDY 0: what nsqd sent before it read it arrives within this
#: (seconds), and nothing more comes once this passed with nothing.
DRAIN_S = 0.25

C = TypeVar("C", NSQConsumer, AsyncNSQConsumer)
D = TypeVar("D", DeadLetterPublisher, AsyncDeadLetterPublisher)
T = TypeVar("T")
#: A holder's sequence: it yields the calls to make (each holder makes them its own
#: way), is sent what each returned, and returns a ``T``.
_HolderSteps = Generator[Callable[[], Any], Any, T]


def _never() -> bool:
    return False


class _CallingAs:
    """``with _CallingAs(holder):`` the consumer calls made inside are the holder's.

    One instance per ``with``: calls of one holder may overlap (an asyncio read waiting
    while another task TOUCHes), and each restores its own task's context."""

    __slots__ = ("_token", "holder")

    def __init__(self, holder: object) -> None:
        self.holder = holder

    def __enter__(self) -> None:
        self._token = CALLING_HOLDER.set(self.holder)

    def __exit__(self, *exc_info: object) -> None:
        CALLING_HOLDER.reset(self._token)


class _Holding(Generic[C, D]):
    """What both holders share: taking the consumer, the answers, the TOUCH schedule,
    and the start, give-up and close sequences."""

    def __init__(self, consumer: C, dead_letters: D | None) -> None:
        consumer.held_by(self)
        self.consumer: C = consumer
        self.topic = consumer.topic
        self.channel = consumer.channel
        self.touched = 0  # messages TOUCHed so far
        self.requeued = 0  # REQ'd by close()
        self._publisher: D | None = dead_letters
        self._next_touch = 0.0  # monotonic time when a held message is next due
        self._closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic}/{self.channel}>"

    def _check_owner(self, call: str) -> None:
        """Refuse ``call`` from a caller the holder does not serve (the blocking holder:
        another thread than its owner)."""

    def in_flight(self) -> int:
        """Messages delivered and not yet answered, over every connection."""
        return self.consumer.in_flight()

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the in-flight budget (0 pauses delivery; held messages stay held)."""
        self._check_owner("set_max_in_flight")
        with _CallingAs(self):
            self.consumer.set_max_in_flight(max_in_flight)

    def finish(self, *messages: NSQMessage) -> None:
        """FIN ``messages`` (one write per connection); raises the first write's error."""
        self._check_owner("finish")
        answer(messages, "FIN")

    def requeue(self, *messages: NSQMessage, delay_ms: int = 0) -> None:
        """REQ ``messages`` (redelivered after ``delay_ms``, attempts + 1); raises the
        first write's error."""
        self._check_owner("requeue")
        answer(messages, "REQ", delay_ms)

    def _touch_now(self) -> float:
        """TOUCH what is due; seconds until the next held message is due."""
        with _CallingAs(self):
            touched = self.consumer.touch_held()
        self.touched += touched.touched
        self._next_touch = time.monotonic() + touched.next_in
        return touched.next_in

    # -- the sequences, written once (each holder makes the calls they yield) -----------

    def _start_steps(self, max_in_flight: int) -> _HolderSteps[None]:
        """Connect and subscribe; on an error, close the consumer, then raise it."""
        try:
            yield partial(self.consumer.start, max_in_flight)
        except BaseException:
            yield from self._close_steps()
            raise

    def _give_up_steps(
        self,
        message: NSQMessage,
        reason: Reason,
        error: BaseException | None,
        error_text: str | None,
        by: Mapping[str, Any] | None,
    ) -> _HolderSteps[NSQError | None]:
        """Publish ``message``'s dead-letter envelope, then FIN it: None when done, the
        NSQError that stopped the publish otherwise (the message left unanswered)."""
        publisher = self._publisher
        if publisher is None:
            return NSQStateError(f"{self!r} has no dead-letter topic to give messages up to")
        letter = publisher.letter(
            message, self.topic, self.channel, reason, error=error, error_text=error_text, by=by
        )
        try:
            yield partial(publisher.publish, letter)
        except NSQError as exc:
            return exc
        answer_or_log(message, "FIN", message.finish)
        return None

    def _close_steps(self) -> _HolderSteps[int]:
        """CLS, REQ every message delivered and not answered, close the connections and
        the dead-letter publisher: how many were REQ'd. Idempotent."""
        if self._closed:
            return self.requeued
        self._closed = True
        try:
            held = self.consumer.in_flight()  # what close() REQs: held, read ahead, unread
            yield self.consumer.close
            self.requeued = held
        finally:
            if self._publisher is not None:
                yield self._publisher.close
        return self.requeued


class MessageHolder(_Holding[NSQConsumer, DeadLetterPublisher]):
    """Holds a blocking consumer's messages while user code runs (see the module's
    docstring for who may call what).

    :param consumer: a consumer not started yet: the holder starts it, and closes it.
    :param dead_letters: where :meth:`give_up` publishes (None: it cannot give up).
    """

    def __init__(
        self, consumer: NSQConsumer, *, dead_letters: DeadLetterPublisher | None = None
    ) -> None:
        super().__init__(consumer, dead_letters)
        self._owner: threading.Thread | None = None
        self._next_io = 0.0  # monotonic time when the consumer's I/O is due next

    def _check_owner(self, call: str) -> None:
        owner = self._owner
        current = threading.current_thread()
        if owner is not None and owner is not current:
            raise NSQStateError(
                f"{call}() on {self!r} from thread {current.name!r}: it is owned by thread "
                f"{owner.name!r}, which started it; every call comes from that thread"
            )

    def _run(self, steps: _HolderSteps[T]) -> T:
        """Make each call ``steps`` yields, as the holder."""
        return drive(steps, self._call)

    def _call(self, call: Callable[[], Any]) -> Any:
        with _CallingAs(self):
            return call()

    # -- life ----------------------------------------------------------------------------

    def start(self, max_in_flight: int) -> None:
        """Connect and subscribe (errors raise here, the consumer then closed); the
        calling thread becomes the holder's owner."""
        self._check_owner("start")
        self._owner = threading.current_thread()
        self._run(self._start_steps(max_in_flight))

    def close(self, *, drain: bool = False) -> int:
        """Stop: with ``drain``, RDY 0 first and take in what nsqd sent before it read
        that (a message still on the wire would otherwise stay in flight at nsqd until
        its msg_timeout); then CLS, REQ every message delivered and not answered, close
        the connections and the dead-letter publisher. How many were REQ'd. Idempotent."""
        self._check_owner("close")
        if drain and not self._closed:
            self._drain()
        return self._run(self._close_steps())

    def _drain(self) -> None:
        try:
            with _CallingAs(self):
                self.consumer.set_max_in_flight(0)
                deadline = time.monotonic() + DRAIN_S * 8
                while self.consumer.read(DRAIN_S) and time.monotonic() < deadline:
                    pass
        except NSQError as exc:  # close() still REQs what it can
            log.debug("Could not drain %s/%s before closing: %s", self.topic, self.channel, exc)

    # -- reading -------------------------------------------------------------------------

    def read(self, timeout: float) -> list[NSQMessage]:
        """The messages delivered since the last call, waiting up to ``timeout`` seconds
        for the first; held (TOUCHed on time) until answered."""
        self._check_owner("read")
        with _CallingAs(self):
            got = self.consumer.read(timeout)
        self._after_io(time.monotonic())
        return got

    # -- keeping them while user code runs -----------------------------------------------

    def keep_alive(self, *, when_due: bool = False) -> float:
        """The consumer's I/O without waiting: answer heartbeats, take in deliveries
        (the next :meth:`read` returns them), TOUCH what is due; with ``when_due``, only
        once :data:`KEEP_ALIVE_S` passed since the last I/O or a TOUCH is due, so that a
        caller looping fast pays nothing. Seconds until it is due again."""
        self._check_owner("keep_alive")
        now = time.monotonic()
        if when_due and now < self._next_io:
            return self._next_io - now
        with _CallingAs(self):
            self.consumer.pump()
        return self._after_io(now)

    def _after_io(self, now: float) -> float:
        """TOUCH what is due after the consumer's I/O at ``now``; when the next is due."""
        touch_in = self._next_touch - now
        if touch_in <= 0:
            touch_in = self._touch_now()
        wait = min(touch_in, KEEP_ALIVE_S)
        self._next_io = now + wait
        return wait

    def wait_for(self, future: Future[Any], stopping: Callable[[], bool] = _never) -> bool:
        """Wait until ``future`` (user code running on another thread) is done, keeping
        the consumer alive meanwhile; False as soon as ``stopping()`` is true (the future
        is then left running)."""
        self._check_owner("wait_for")
        next_in = self._next_io - time.monotonic()
        while not wait([future], timeout=max(next_in, 0.01)).done:
            if stopping():
                return False
            next_in = self.keep_alive()
        return True

    # -- answers -------------------------------------------------------------------------

    def give_up(
        self,
        message: NSQMessage,
        reason: Reason,
        *,
        error: BaseException | None = None,
        error_text: str | None = None,
        by: Mapping[str, Any] | None = None,
    ) -> NSQError | None:
        """Publish ``message``'s dead-letter envelope (:mod:`.dead_letters`), then FIN it.
        None when done; the NSQError that stopped the publish otherwise (the message is
        then left unanswered: REQ it)."""
        self._check_owner("give_up")
        return self._run(self._give_up_steps(message, reason, error, error_text, by))


class AsyncMessageHolder(_Holding[AsyncNSQConsumer, AsyncDeadLetterPublisher]):
    """Holds an asyncio consumer's messages (see the module's docstring for who may call
    what): TOUCHes on a task of its own while it runs.

    :param consumer: a consumer not started yet: the holder starts it, and closes it.
    :param dead_letters: where :meth:`give_up` publishes (None: it cannot give up).
    """

    def __init__(
        self, consumer: AsyncNSQConsumer, *, dead_letters: AsyncDeadLetterPublisher | None = None
    ) -> None:
        super().__init__(consumer, dead_letters)
        self._toucher: asyncio.Task[None] | None = None
        self._reading: asyncio.Task[Any] | None = None

    async def _run(self, steps: _HolderSteps[T]) -> T:
        """Await each call ``steps`` yields, as the holder (an error, a cancellation
        included, is thrown into the sequence, which cleans up)."""
        outcome: Any = None
        error: BaseException | None = None
        while True:
            try:
                call = steps.throw(error) if error is not None else steps.send(outcome)
            except StopIteration as done:
                return done.value
            error = None
            try:
                with _CallingAs(self):
                    awaited: Coroutine[Any, Any, Any] = call()
                    outcome = await awaited
            except BaseException as exc:
                error = exc

    # -- life ----------------------------------------------------------------------------

    async def start(self, max_in_flight: int) -> None:
        """Connect and subscribe (errors raise here, the consumer then closed), then
        TOUCH what is held on time, on a task of the holder's own."""
        await self._run(self._start_steps(max_in_flight))
        self._toucher = asyncio.create_task(self._keep_held(), name=f"nsq-touch-{self!r}")

    async def _keep_held(self) -> None:
        while True:
            await asyncio.sleep(self._touch_now())

    async def close(self) -> int:
        """Stop TOUCHing; CLS, REQ every message delivered and not answered, close the
        connections and the dead-letter publisher. How many were REQ'd. Idempotent;
        safe while being cancelled."""
        toucher, self._toucher = self._toucher, None
        if toucher is not None:
            toucher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await toucher
        return await self._run(self._close_steps())

    # -- reading -------------------------------------------------------------------------

    async def read(self, timeout: float) -> list[NSQMessage]:
        """The messages delivered since the last call, waiting up to ``timeout`` seconds
        for the first; held (TOUCHed on time) until answered. One task at a time."""
        reading = self._reading
        if reading is not None:
            raise NSQStateError(
                f"read() on {self!r} while task {reading.get_name()!r} is reading: one "
                "task at a time waits for deliveries"
            )
        self._reading = asyncio.current_task()
        try:
            with _CallingAs(self):
                return await self.consumer.read(timeout)
        finally:
            self._reading = None

    # -- answers -------------------------------------------------------------------------

    async def give_up(
        self,
        message: NSQMessage,
        reason: Reason,
        *,
        error: BaseException | None = None,
        error_text: str | None = None,
        by: Mapping[str, Any] | None = None,
    ) -> NSQError | None:
        """See :meth:`MessageHolder.give_up`."""
        return await self._run(self._give_up_steps(message, reason, error, error_text, by))
