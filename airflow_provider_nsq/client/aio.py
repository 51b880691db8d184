"""asyncio driver: an :class:`asyncio.Protocol` feeding :class:`ClientConnection`.

A Protocol rather than streams: bytes go straight from the transport into the decoder
(no StreamReader copy), and ``loop.start_tls`` upgrades it in place on every supported
Python. Replies are matched to waiting calls in order (a FIFO of futures), so several
tasks may publish on one connection concurrently and their commands are pipelined.

Concurrent publishers share one (re)connect: the first that finds the connection missing,
dropped or idle starts it as a task, the others wait for that task, so a client never
holds two connections at once. Each connection's protocol object is the only one whose
bytes reach the core: a late reply on an old socket can never answer a command sent on
the new one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from ..protocol.connection import ClientConnection, ConnectionState
from ..protocol.errors import (
    NSQConnectionClosedError,
    NSQError,
    NSQServerError,
    NSQTimeoutError,
)
from .config import ClientConfig
from .driver import CLOSED_STATES as _CLOSED_STATES
from .driver import DriverBase
from .io_errors import map_exceptions
from .message import NSQMessage
from .tls import build_ssl_context
from .window import Window

log = logging.getLogger(__name__)

_RECV_SIZE = 256 * 1024


class _Protocol(asyncio.BufferedProtocol):
    """Reads into one buffer per connection (no allocation per read) and hands the bytes
    to its owner's callbacks. Once the owner has moved on to another connection it
    :meth:`detach` es this one, which is deaf from then on: a late byte on an old socket
    never reaches the new connection's core."""

    def __init__(
        self,
        on_data: Callable[[bytes | memoryview], None],
        on_lost: Callable[[Exception | None], None],
    ) -> None:
        self._on_data: Callable[[bytes | memoryview], None] | None = on_data
        self._on_lost: Callable[[Exception | None], None] | None = on_lost
        self._buffer = bytearray(_RECV_SIZE)
        self._view = memoryview(self._buffer)

    def detach(self) -> None:
        self._on_data = self._on_lost = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        if self._on_data is not None:
            self._on_data(self._view[:nbytes])

    def eof_received(self) -> bool:
        if self._on_data is not None:
            self._on_data(b"")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._on_lost is not None:
            self._on_lost(exc)


class AsyncNSQConnection(DriverBase[Coroutine[Any, Any, list[NSQMessage]]]):
    """An asyncio connection to one nsqd. Same semantics as the blocking
    :class:`~airflow_provider_nsq.client.blocking.NSQConnection`: publishes return after
    nsqd's OK; heartbeats are answered as they arrive."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        super().__init__(config)
        self._transport: asyncio.Transport | None = None
        self._protocol: _Protocol | None = None  # the current connection's, see _Protocol
        self._connecting: asyncio.Task[None] | None = None  # the one (re)connect under way
        self._waiters: deque[asyncio.Future[bytes]] = deque()
        self._handshake: asyncio.Future[None] | None = None
        self._message_event = asyncio.Event()
        self._written = 0  # bytes handed to the transport on this connection
        self._flush_scheduled = False
        self._tls_task: asyncio.Future[None] | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> AsyncNSQConnection:
        if self._transport is None:
            await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> AsyncNSQConnection:
        """Open the connection and run the handshake within ``connect_timeout`` (closing
        the current one first). Tasks that call it, or publish, while it runs share it."""
        await self._shared_connect()
        return self

    async def _shared_connect(self) -> None:
        """Join the (re)connect under way, or start one as a task of its own: a caller that
        is cancelled does not cancel it for the others."""
        task = self._connecting
        if task is None:
            task = self._connecting = asyncio.ensure_future(self._connect())
            task.add_done_callback(self._connect_done)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            cancelling = getattr(current, "cancelling", lambda: 0)()
            if task.cancelled() and not cancelling:  # close() stopped it, not our caller
                raise NSQConnectionClosedError(
                    f"the connection to {self._peer} was closed by the client while connecting"
                ) from None
            raise

    def _connect_done(self, task: asyncio.Task[None]) -> None:
        if self._connecting is task:
            self._connecting = None
        if not task.cancelled():
            task.exception()  # every waiter got it; do not log it as never retrieved

    async def _connect(self) -> None:
        had_transport = self._transport is not None
        self._teardown()
        if had_transport:
            await asyncio.sleep(0)  # let the old socket close before the new one opens
        cfg = self.config
        try:
            async with asyncio.timeout(cfg.connect_timeout):
                await self._open()
        except TimeoutError:
            self._teardown()
            raise NSQTimeoutError(
                f"could not connect to nsqd at {cfg.address} and complete the handshake "
                f"within {cfg.connect_timeout:g}s"
            ) from None
        except BaseException:
            self._teardown()
            raise

    async def _open(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._handshake = loop.create_future()
        protocol = self._protocol = _Protocol(self._on_data, self._on_lost)
        try:
            with map_exceptions(self._peer, "connect to"):
                transport, _ = await loop.create_connection(lambda: protocol, cfg.host, cfg.port)
        except BaseException:
            protocol.detach()
            if self._protocol is protocol:
                self._protocol = None
            raise
        if self._protocol is not protocol:  # torn down while connecting
            transport.close()
            raise NSQConnectionClosedError(f"the connection to {self._peer} was closed")
        self._transport = transport
        core = self._new_core()
        core.initiate()
        self._flush()
        await self._handshake

    async def close(self) -> None:
        """REQ messages still held unanswered, then close the transport (and stop a
        connect under way)."""
        task = self._connecting
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        self._requeue_unanswered()
        transport = self._transport
        self._teardown()
        if transport is not None:
            await asyncio.sleep(0)  # let the transport write what is buffered

    def _teardown(self) -> None:
        self._reset_state()
        if self._protocol is not None:
            self._protocol.detach()  # the old socket's late bytes go nowhere
        self._protocol = None
        if self._transport is not None:
            self._transport.close()
        self._transport = None
        closed = NSQConnectionClosedError("the connection was closed by the client")
        self._fail_waiters(closed)
        if self._handshake is not None:
            _fail_future(self._handshake, closed)
        self._flush_scheduled = False
        self._written = 0

    # -- transport callbacks -------------------------------------------------------

    def _on_data(self, data: bytes | memoryview) -> None:
        try:
            self._receive(data)
        except NSQError:
            return  # recorded: _fail woke every waiter with it
        core = self._core
        if (
            core is not None
            and self._handshake is not None
            and not self._handshake.done()
            and core.state is not ConnectionState.HANDSHAKING
            and core.state not in _CLOSED_STATES
        ):
            self._handshake.set_result(None)

    def _on_lost(self, exc: Exception | None) -> None:
        # EOF for the core: it reports the close and the commands left unanswered.
        self._on_data(b"")

    def _reply_arrived(self, data: bytes) -> None:
        if self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled caller still consumes its reply
                waiter.set_result(data)

    def _messages_arrived(self) -> None:
        self._message_event.set()
        super()._messages_arrived()

    def _fail(self, error: NSQError) -> None:
        super()._fail(error)
        first = self._failure or error  # the waiter of the oldest command gets the cause
        if self._waiters:
            _fail_future(self._waiters.popleft(), first)
        self._fail_waiters(
            NSQConnectionClosedError(f"{self._peer} closed the connection after: {first}")
        )
        if self._handshake is not None:
            _fail_future(self._handshake, first)
        self._message_event.set()  # wake readers so they see the failure
        if self._transport is not None and not isinstance(error, NSQServerError):
            self._transport.close()

    def _fail_waiters(self, error: NSQError) -> None:
        while self._waiters:
            _fail_future(self._waiters.popleft(), error)

    def _start_tls(self) -> None:
        self._tls_task = asyncio.ensure_future(self._upgrade_to_tls())

    async def _upgrade_to_tls(self) -> None:
        cfg = self.config
        core = self._core
        transport = self._transport
        if core is None or transport is None:
            return
        try:
            context = build_ssl_context(cfg)
            with map_exceptions(self._peer, "upgrade to TLS with", tls=True):
                new_transport = await asyncio.get_running_loop().start_tls(
                    transport,
                    transport.get_protocol(),
                    context,
                    server_hostname=cfg.tls_server_name or cfg.host,
                    # The connect's own deadline covers it too; this ends the task.
                    ssl_handshake_timeout=cfg.connect_timeout,
                )
        except NSQError as exc:
            if self._core is core:  # not a connection that replaced this one meanwhile
                self._fail(exc)
            return
        if self._core is not core:  # torn down during the upgrade
            if new_transport is not None:
                new_transport.close()
            return
        if new_transport is None:  # pragma: no cover - only for a closing transport
            self._fail(NSQConnectionClosedError("connection closed during the TLS upgrade"))
            return
        self._transport = new_transport
        core.tls_established()

    # -- output --------------------------------------------------------------------

    def _flush(self) -> None:
        self._flush_scheduled = False
        core = self._core
        transport = self._transport
        if core is None or transport is None:
            return
        data = core.data_to_send()
        if data:
            transport.write(data)
            self._written += len(data)
            self._last_write = time.monotonic()

    def _flush_soon(self) -> None:
        # FIN/REQ/TOUCH issued in one loop iteration go out in one write.
        if self._flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called from outside the loop: write now
            self._flush()
            return
        self._flush_scheduled = True
        loop.call_soon(self._flush)

    def _new_waiter(self) -> asyncio.Future[bytes]:
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    def _sent(self) -> int:
        """Bytes of this connection's output that left the transport's buffer."""
        transport = self._transport
        if transport is None:
            return self._written
        return self._written - transport.get_write_buffer_size()

    async def _await_reply(self, waiter: asyncio.Future[bytes]) -> bytes:
        """Wait for ``waiter`` while nsqd makes progress: the wait ends with
        :class:`NSQTimeoutError` once ``read_timeout`` passes with no reply and no byte of
        the output taken by nsqd (a large body still draining is progress; a server that
        stopped reading is not). A failure or close ends it at once: it fails the waiter.
        A timer, not wait_for(): no task per command. A cancelled caller's reply is still
        consumed in order (``_reply_arrived``)."""
        timer = _ReplyTimer(waiter, self._sent(), self.config.read_timeout, self._check_reply)
        try:
            return await waiter
        finally:
            timer.cancel()

    def _check_reply(self, timer: _ReplyTimer) -> None:
        """``read_timeout`` passed since ``timer`` was armed: re-arm it if nsqd took more
        of the output meanwhile, else fail the wait."""
        waiter = timer.waiter
        if waiter.done():
            return
        sent = self._sent()
        if sent > timer.sent:
            timer.rearm(sent)
            return
        self._reply_overdue(waiter, self._written - sent)

    def _reply_overdue(self, waiter: asyncio.Future[bytes], unsent: int) -> None:
        """``read_timeout`` passed with no reply and no progress: fail the wait."""
        timeout = self.config.read_timeout
        if unsent:
            text = (
                f"{self._peer} stopped reading: {unsent} bytes of output unsent "
                f"after {timeout:g}s without progress"
            )
        else:
            text = f"{self._peer} did not answer within {timeout:g}s"
        _fail_future(waiter, NSQTimeoutError(text))
        # A late reply would be matched to the next command: drop the connection.
        self._teardown()

    async def _request(self) -> bytes:
        waiter = self._new_waiter()
        self._flush()
        return await self._await_reply(waiter)

    async def _publisher(self) -> ClientConnection:
        """The core to publish on: the current connection when it is up, else the one
        (re)connect shared by every task that publishes meanwhile."""
        if self._subscribed:
            return self._require_core()  # a subscription is never silently reopened
        core = self._core
        limit = self._idle_limit
        if (
            self._connecting is None
            and core is not None
            and core.state is ConnectionState.READY
            and (limit is None or time.monotonic() - self._last_write < limit)
        ):
            return core
        await self._shared_connect()
        core = self._require_core()
        if core.state is not ConnectionState.READY:  # dropped again before our turn
            raise self._closed_error(())
        return core

    # -- publishing ----------------------------------------------------------------

    async def publish(self, topic: str, body: bytes) -> None:
        (await self._publisher()).pub(topic, body)
        await self._request()

    async def defer_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        (await self._publisher()).dpub(topic, delay_ms, body)
        await self._request()

    async def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> int:
        """MPUB in as few frames as fit nsqd's limits; returns the frame count."""
        counts = self._queue_mpub(await self._publisher(), topic, bodies)
        waiters = [self._new_waiter() for _ in counts]
        self._flush()
        for done, waiter in enumerate(waiters):
            try:
                await self._await_reply(waiter)
            except NSQError as exc:
                raise self._mpub_failed(exc, done, counts) from exc if done else None
        return len(counts)

    # -- subscribing ---------------------------------------------------------------

    async def subscribe(self, topic: str, channel: str) -> None:
        self._require_core().sub(topic, channel)
        self._subscribed = True
        await self._request()

    async def read_messages(self, timeout: float | None = None) -> list[NSQMessage]:
        """Wait up to ``timeout`` seconds for messages; return all that arrived."""
        if not self._messages:
            self._flush()
            wait = self.config.read_timeout if timeout is None else timeout
            self._message_event.clear()
            if self._failure is None and self.connected:
                try:
                    async with asyncio.timeout(max(wait, 0)):
                        await self._message_event.wait()
                except TimeoutError:
                    pass
            if not self._messages and self._failure is not None:
                raise self._failure
            if not self._messages and not self.connected:
                raise self._closed_error(())
        return self.take_messages()

    async def ping(self) -> None:
        """See :meth:`NSQConnection.ping`."""
        self._require_core().ping()
        await self._request()

    async def start_close(self) -> None:
        """CLS and wait for CLOSE_WAIT."""
        self._require_core().cls()
        await self._request()

    async def _run_window(self, window: Window) -> list[NSQMessage]:
        await self.subscribe(window.topic, window.channel)
        self.ready(window.max_messages)
        for remaining in window.waits():
            window.got.extend(await self.read_messages(remaining))
        await self.start_close()
        return self._end_window(window)


def _fail_future(future: asyncio.Future[Any], error: BaseException) -> None:
    """Fail ``future`` unless it is done, marked retrieved: its awaiter (if any) still
    gets ``error``, and one nobody awaits any more (a later MPUB frame, a connect that
    timed out) is not logged as "exception was never retrieved"."""
    if not future.done():
        future.set_exception(error)
        future.exception()


class _ReplyTimer:
    """One reply wait's timer (see :meth:`AsyncNSQConnection._await_reply`): calls
    ``check(timer)`` ``timeout`` seconds after it was (re)armed; ``sent`` is the output
    that had left by then. Re-armed only while output drains."""

    __slots__ = ("check", "handle", "sent", "timeout", "waiter")

    def __init__(
        self,
        waiter: asyncio.Future[bytes],
        sent: int,
        timeout: float,
        check: Callable[[_ReplyTimer], None],
    ) -> None:
        self.waiter = waiter
        self.timeout = timeout
        self.check = check
        self.sent = sent
        self.handle = asyncio.get_running_loop().call_later(timeout, check, self)

    def rearm(self, sent: int) -> None:
        self.sent = sent
        self.handle = asyncio.get_running_loop().call_later(self.timeout, self.check, self)

    def cancel(self) -> None:
        self.handle.cancel()
