"""The one owner of a consumer while its messages are held and user code runs.

Who may call what (the rule):

- A holder takes a consumer before starting it and owns it until it has closed it: from
  then on only the holder calls the consumer. User code gets records or messages, never
  the consumer. A call on a held consumer from anywhere else is an NSQStateError naming
  the call and the holder (the consumer checks it: ``held_by``, ``CallingAs``).
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
  after a delay), :meth:`~MessageHolder.give_up` (publish a dead-letter envelope, then
  FIN; left unanswered when that publish fails, so the caller can REQ it);
- close: CLS, then REQ every message delivered and not answered, so nsqd redelivers it
  at once instead of after its msg_timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from typing import Any

from ...protocol.errors import NSQError, NSQStateError
from ..consumer import AsyncNSQConsumer, CallingAs, NSQConsumer
from ..message import NSQMessage, answer_or_log
from .asyncio_dead_letters import AsyncDeadLetterPublisher
from .blocking_dead_letters import DeadLetterPublisher
from .dead_letters import Reason

log = logging.getLogger(__name__)

#: While user code runs, the consumer's I/O (heartbeats, deliveries, TOUCH when due) is
#: done at least this often (seconds).
KEEP_ALIVE_S = 0.5
#: When closing after RDY 0: what nsqd sent before it read it arrives within this
#: (seconds), and nothing more comes once this passed with nothing.
DRAIN_S = 0.25


def _never() -> bool:
    return False


class _Holding:
    """What both holders share: taking the consumer, the TOUCH schedule, the envelope
    of a message given up, and the calls they make as the holder."""

    def __init__(self, consumer: NSQConsumer | AsyncNSQConsumer) -> None:
        consumer.held_by(self)
        self.topic = consumer.topic
        self.channel = consumer.channel
        self.touched = 0  # messages TOUCHed so far
        self.requeued = 0  # REQ'd by close()
        self._next_touch = 0.0  # monotonic time when a held message is next due

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic}/{self.channel}>"

    def _touch_now(self, consumer: NSQConsumer | AsyncNSQConsumer) -> float:
        """TOUCH what is due; seconds until the next held message is due."""
        with CallingAs(self):
            touched = consumer.touch_held()
        self.touched += touched.touched
        self._next_touch = time.monotonic() + touched.next_in
        return touched.next_in

    def _no_dead_letters(self) -> NSQError:
        return NSQStateError(f"{self!r} has no dead-letter topic to give messages up to")


class MessageHolder(_Holding):
    """Holds a blocking consumer's messages while user code runs (see the module's
    docstring for who may call what).

    :param consumer: a consumer not started yet: the holder starts it, and closes it.
    :param dead_letters: where :meth:`give_up` publishes (None: it cannot give up).
    """

    def __init__(
        self, consumer: NSQConsumer, *, dead_letters: DeadLetterPublisher | None = None
    ) -> None:
        super().__init__(consumer)
        self.consumer = consumer
        self._publisher = dead_letters
        self._owner: threading.Thread | None = None
        self._next_io = 0.0  # monotonic time when the consumer's I/O is due next
        self._closed = False

    def _check_owner(self, call: str) -> None:
        owner = self._owner
        current = threading.current_thread()
        if owner is not None and owner is not current:
            raise NSQStateError(
                f"{call}() on {self!r} from thread {current.name!r}: it is owned by thread "
                f"{owner.name!r}, which started it; every call comes from that thread"
            )

    # -- life ----------------------------------------------------------------------------

    def start(self, max_in_flight: int) -> None:
        """Connect and subscribe (errors raise here, the consumer then closed); the
        calling thread becomes the holder's owner."""
        self._check_owner("start")
        self._owner = threading.current_thread()
        try:
            with CallingAs(self):
                self.consumer.start(max_in_flight)
        except BaseException:
            self.close()
            raise

    def close(self, *, drain: bool = False) -> int:
        """Stop: with ``drain``, RDY 0 first and take in what nsqd sent before it read
        that (a message still on the wire would otherwise stay in flight at nsqd until
        its msg_timeout); then CLS, REQ every message delivered and not answered, close
        the connections and the dead-letter publisher. How many were REQ'd. Idempotent."""
        self._check_owner("close")
        if self._closed:
            return self.requeued
        self._closed = True
        consumer = self.consumer
        try:
            if drain:
                self._drain()
            held = consumer.in_flight()  # what close() REQs: held, read ahead, unread
            with CallingAs(self):
                consumer.close()
            self.requeued = held
        finally:
            if self._publisher is not None:
                self._publisher.close()
        return self.requeued

    def _drain(self) -> None:
        try:
            with CallingAs(self):
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
        with CallingAs(self):
            got = self.consumer.read(timeout)
        self._after_io(time.monotonic())
        return got

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the in-flight budget (0 pauses delivery; held messages stay held)."""
        self._check_owner("set_max_in_flight")
        with CallingAs(self):
            self.consumer.set_max_in_flight(max_in_flight)

    def in_flight(self) -> int:
        """Messages delivered and not yet answered, over every connection."""
        return self.consumer.in_flight()

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
        with CallingAs(self):
            self.consumer.pump()
        return self._after_io(now)

    def _after_io(self, now: float) -> float:
        """TOUCH what is due after the consumer's I/O at ``now``; when the next is due."""
        touch_in = self._next_touch - now
        if touch_in <= 0:
            touch_in = self._touch_now(self.consumer)
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

    def finish(self, *messages: NSQMessage) -> None:
        """FIN ``messages`` (one write per connection); raises the first write's error."""
        self._check_owner("finish")
        NSQConsumer.finish(*messages)

    def requeue(self, *messages: NSQMessage, delay_ms: int = 0) -> None:
        """REQ ``messages`` (redelivered after ``delay_ms``, attempts + 1); raises the
        first write's error."""
        self._check_owner("requeue")
        NSQConsumer.requeue(*messages, delay_ms=delay_ms)

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
        if self._publisher is None:
            return self._no_dead_letters()
        try:
            self._publisher.publish(
                self._publisher.letter(
                    message,
                    self.topic,
                    self.channel,
                    reason,
                    error=error,
                    error_text=error_text,
                    by=by,
                )
            )
        except NSQError as exc:
            return exc
        answer_or_log(message, "FIN", message.finish)
        return None


class AsyncMessageHolder(_Holding):
    """Holds an asyncio consumer's messages (see the module's docstring for who may call
    what): TOUCHes on a task of its own while it runs.

    :param consumer: a consumer not started yet: the holder starts it, and closes it.
    :param dead_letters: where :meth:`give_up` publishes (None: it cannot give up).
    """

    def __init__(
        self, consumer: AsyncNSQConsumer, *, dead_letters: AsyncDeadLetterPublisher | None = None
    ) -> None:
        super().__init__(consumer)
        self.consumer = consumer
        self._publisher = dead_letters
        self._toucher: asyncio.Task[None] | None = None
        self._reading: asyncio.Task[Any] | None = None
        self._closed = False

    # -- life ----------------------------------------------------------------------------

    async def start(self, max_in_flight: int) -> None:
        """Connect and subscribe (errors raise here, the consumer then closed), then
        TOUCH what is held on time, on a task of the holder's own."""
        try:
            with CallingAs(self):
                await self.consumer.start(max_in_flight)
        except BaseException:
            await self.close()
            raise
        self._toucher = asyncio.create_task(self._keep_held(), name=f"nsq-touch-{self!r}")

    async def _keep_held(self) -> None:
        while True:
            await asyncio.sleep(self._touch_now(self.consumer))

    async def close(self) -> int:
        """Stop TOUCHing; CLS, REQ every message delivered and not answered, close the
        connections and the dead-letter publisher. How many were REQ'd. Idempotent;
        safe while being cancelled."""
        if self._closed:
            return self.requeued
        self._closed = True
        toucher, self._toucher = self._toucher, None
        if toucher is not None:
            toucher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await toucher
        try:
            held = self.consumer.in_flight()
            with CallingAs(self):
                await self.consumer.close()
            self.requeued = held
        finally:
            if self._publisher is not None:
                await self._publisher.close()
        return self.requeued

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
            with CallingAs(self):
                return await self.consumer.read(timeout)
        finally:
            self._reading = None

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the in-flight budget (0 pauses delivery; held messages stay held)."""
        with CallingAs(self):
            self.consumer.set_max_in_flight(max_in_flight)

    def in_flight(self) -> int:
        """Messages delivered and not yet answered, over every connection."""
        return self.consumer.in_flight()

    # -- answers -------------------------------------------------------------------------

    def finish(self, *messages: NSQMessage) -> None:
        """FIN ``messages`` (one write per connection); raises the first write's error."""
        AsyncNSQConsumer.finish(*messages)

    def requeue(self, *messages: NSQMessage, delay_ms: int = 0) -> None:
        """REQ ``messages`` (redelivered after ``delay_ms``, attempts + 1); raises the
        first write's error."""
        AsyncNSQConsumer.requeue(*messages, delay_ms=delay_ms)

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
        if self._publisher is None:
            return self._no_dead_letters()
        try:
            await self._publisher.publish(
                self._publisher.letter(
                    message,
                    self.topic,
                    self.channel,
                    reason,
                    error=error,
                    error_text=error_text,
                    by=by,
                )
            )
        except NSQError as exc:
            return exc
        answer_or_log(message, "FIN", message.finish)
        return None
