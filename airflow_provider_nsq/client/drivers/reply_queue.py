"""The commands of one asyncio connection that wait for nsqd's reply, and the one timer
that bounds their wait.

nsqd answers in order, so the replies are matched to a FIFO of futures; several tasks
may publish on one connection at once and their commands are pipelined. A caller that
is cancelled leaves its future in place: it still takes its reply, so every later reply
goes to its own command.

A wait ends with :class:`NSQTimeoutError` once ``timeout`` seconds pass with no reply
and no byte of the output taken by nsqd (a large body still draining is progress; a
server that stopped reading is not): counted from when the oldest command began to
wait, or from the last reply or output progress since. One timer per connection does
it, armed while commands wait and re-armed when it fires early: a command costs no
timer of its own (no ``call_later`` and ``cancel`` per command), only a clock reading
when it is the only one waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ...protocol.errors import NSQError, NSQTimeoutError


class ReplyQueue:
    """The waiting commands of one connection (see the module docstring).

    :param loop: the connection's event loop.
    :param timeout: seconds without a reply or progress after which a wait fails.
    :param peer: who answers, for the error (``"nsqd at host:port"``).
    :param buffered: the output written but not yet taken by the socket, in bytes.
    :param on_overdue: called once a wait failed for lack of progress (the connection is
        dropped: a late reply would be matched to the next command).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        timeout: float,
        peer: str,
        buffered: Callable[[], int],
        on_overdue: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._timeout = timeout
        self._peer = peer
        self._buffered = buffered
        self._on_overdue = on_overdue
        self._waiters: deque[asyncio.Future[bytes]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._since = 0.0  # when the oldest command began to wait, or nsqd last progressed
        self._armed_sent = 0  # the output taken when the timer was armed
        #: Bytes handed to the transport on this connection.
        self.written = 0

    def add(self) -> asyncio.Future[bytes]:
        """A future for the reply to the command just written (call it after the write:
        the output it took counts as sent)."""
        waiter = self._loop.create_future()
        if not self._waiters:
            self._since = time.monotonic()
        self._waiters.append(waiter)
        if self._timer is None:
            self._arm(self._timeout)
        return waiter

    def arrived(self, data: bytes) -> None:
        """nsqd answered the oldest command."""
        waiters = self._waiters
        if waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # a cancelled caller still consumes its reply
                waiter.set_result(data)
            if waiters:
                self._since = time.monotonic()  # a reply is progress: the next one's wait

    def fail_oldest(self, error: NSQError) -> None:
        """The oldest command gets ``error`` (nsqd refused it)."""
        if self._waiters:
            fail_future(self._waiters.popleft(), error)

    def fail_all(self, error: NSQError) -> None:
        """Every waiting command gets ``error``; the timer stops."""
        while self._waiters:
            fail_future(self._waiters.popleft(), error)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _sent(self) -> int:
        return self.written - self._buffered()

    def _oldest(self) -> asyncio.Future[bytes] | None:
        for waiter in self._waiters:
            if not waiter.done():
                return waiter
        return None

    def _arm(self, delay: float) -> None:
        self._armed_sent = self._sent()
        self._timer = self._loop.call_later(delay, self._expired)

    def _expired(self) -> None:
        """The timer fired: re-arm it if the oldest wait is younger than ``timeout`` or
        nsqd took more output meanwhile, else fail that wait."""
        self._timer = None
        waiter = self._oldest()
        if waiter is None:
            return  # nobody waits; the next command arms it again
        now = time.monotonic()
        waited = now - self._since
        if waited < self._timeout:
            self._arm(self._timeout - waited)
            return
        sent = self._sent()
        if sent > self._armed_sent:
            self._since = now
            self._arm(self._timeout)
            return
        unsent = self.written - sent
        if unsent:
            text = (
                f"{self._peer} stopped reading: {unsent} bytes of output unsent "
                f"after {self._timeout:g}s without progress"
            )
        else:
            text = f"{self._peer} did not answer within {self._timeout:g}s"
        fail_future(waiter, NSQTimeoutError(text))
        self._on_overdue()


def fail_future(future: asyncio.Future[Any], error: BaseException) -> None:
    """Fail ``future`` unless it is done, marked retrieved: its awaiter (if any) still
    gets ``error``, and one nobody awaits any more (a later MPUB frame, a connect that
    timed out) is not logged as "exception was never retrieved"."""
    if not future.done():
        future.set_exception(error)
        future.exception()
