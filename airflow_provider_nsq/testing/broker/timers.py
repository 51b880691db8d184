"""A client's timers, as nsqd keeps them (docs/nsqd-facts.md section 7):
the heartbeat ticker, the read deadline (nothing read for two heartbeat intervals closes the
connection) and the write deadline (a client that stops reading is dropped after one
interval)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class ClientTimers:
    """The three timers of one connection; each calls back into the session.

    ``heartbeat`` sends a heartbeat; ``read_timeout`` closes for silence unless
    ``busy()`` (a command is waiting on something, e.g. the authorizer);
    ``write_timeout`` drops a client that stopped reading.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        heartbeat: Callable[[], None],
        read_timeout: Callable[[], None],
        write_timeout: Callable[[], None],
        busy: Callable[[], bool],
    ) -> None:
        self._loop = loop
        self._heartbeat = heartbeat
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._busy = busy
        self.interval_ms = 0  # heartbeat interval; 0: disabled
        self._hb_handle: asyncio.TimerHandle | None = None
        self._hb_next = 0.0
        self._hb_interval = 0.0
        self._read_handle: asyncio.TimerHandle | None = None
        self.last_read = loop.time()
        self._write_handle: asyncio.TimerHandle | None = None
        self._stopped = False

    # -- heartbeats ----------------------------------------------------------------------

    def start_heartbeats(self, interval_ms: int, offset: float = 0.0) -> None:
        """(Re)start the ticker: the first heartbeat one interval (plus ``offset``) from
        now; none when ``interval_ms`` is 0."""
        if self._hb_handle is not None:
            self._hb_handle.cancel()
            self._hb_handle = None
        if interval_ms > 0 and not self._stopped:
            self._hb_interval = interval_ms / 1000.0
            self._hb_next = self._loop.time() + offset + self._hb_interval
            self._hb_handle = self._loop.call_at(self._hb_next, self._on_heartbeat)

    def _on_heartbeat(self) -> None:
        now = self._loop.time()
        if now < self._hb_next:  # never early
            self._hb_handle = self._loop.call_at(self._hb_next, self._on_heartbeat)
            return
        self._heartbeat()
        if self._stopped:
            return
        self._hb_next += self._hb_interval
        if self._hb_next <= now:  # a ticker drops ticks it could not deliver
            self._hb_next = now + self._hb_interval
        self._hb_handle = self._loop.call_at(self._hb_next, self._on_heartbeat)

    # -- the read deadline ---------------------------------------------------------------

    def read_now(self) -> None:
        """A command was read: the deadline moves to two intervals from now."""
        self.last_read = self._loop.time()

    def arm_read_deadline(self) -> None:
        if self._read_handle is not None:
            self._read_handle.cancel()
        if self.interval_ms > 0:
            when = self.last_read + 2 * self.interval_ms / 1000.0
        else:
            when = self._loop.time() + 1.0  # disabled: look again later
        self._read_handle = self._loop.call_at(when, self._on_read_deadline)

    def _on_read_deadline(self) -> None:
        self._read_handle = None
        hb = self.interval_ms
        now = self._loop.time()
        if hb <= 0 or self._busy() or now < self.last_read + 2 * hb / 1000.0:
            self.arm_read_deadline()
            return
        self._read_timeout()

    # -- the write deadline --------------------------------------------------------------

    def start_write_deadline(self) -> None:
        """The client stopped reading: drop it after one interval unless it resumes."""
        if self.interval_ms > 0 and self._write_handle is None:
            self._write_handle = self._loop.call_later(
                self.interval_ms / 1000.0, self._on_write_deadline
            )

    def cancel_write_deadline(self) -> None:
        if self._write_handle is not None:
            self._write_handle.cancel()
            self._write_handle = None

    def _on_write_deadline(self) -> None:
        self._write_handle = None
        self._write_timeout()

    def stop(self) -> None:
        self._stopped = True
        for handle in (self._hb_handle, self._read_handle, self._write_handle):
            if handle is not None:
                handle.cancel()
        self._hb_handle = self._read_handle = self._write_handle = None
