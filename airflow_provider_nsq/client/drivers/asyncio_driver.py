"""asyncio driver: an :class:`asyncio.BufferedProtocol` feeding :class:`ClientConnection`.

A Protocol rather than streams: bytes go straight from the transport into the decoder
(no StreamReader copy), and ``loop.start_tls`` upgrades it in place on every supported
Python. Replies are matched to waiting calls in order (:class:`ReplyQueue`), so several
tasks may publish on one connection concurrently and their commands are pipelined; a
read that is exactly nsqd's ``OK`` is taken by the protocol object's ``take_ok``, with
no frame or event made for it.

Concurrent publishers share one (re)connect (:class:`SharedTask`), so a client never
holds two connections at once. Each connection's protocol object is the only one whose
bytes reach the core: a late reply on an old socket can never answer a command sent on
the new one.

What is decided about a connection is in :mod:`.base`, shared with the blocking driver;
this module holds only the asyncio I/O: the transport and its protocol, the reply
futures and their one timer, the shared (re)connect.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from ...protocol.connection import ClientConnection, ConnectionState
from ...protocol.constants import OK
from ...protocol.errors import (
    NSQConnectionClosedError,
    NSQError,
    NSQServerError,
    NSQTimeoutError,
)
from ..message import NSQMessage
from ..settings.client_config import ClientConfig
from ..transport.io_errors import map_exceptions
from ..transport.tls import build_ssl_context
from .base import (
    CLOSED_STATES,
    AnsweringDriver,
    give_back_buffer,
    mpub_failed,
    queue_mpub,
    take_buffer,
)

__all__ = ["AsyncNSQConnection"]

log = logging.getLogger(__name__)

_READY = ConnectionState.READY
_HANDSHAKING = ConnectionState.HANDSHAKING


class ReplyQueue:
    """The commands of one connection that wait for nsqd's reply, and the one timer that
    bounds their wait.

    nsqd answers in order, so the replies are matched to a FIFO of futures; several tasks
    may publish on one connection at once and their commands are pipelined. A caller
    that is cancelled leaves its future in place: it still takes its reply, so every
    later reply goes to its own command.

    A wait ends with :class:`NSQTimeoutError` once ``timeout`` seconds pass with no reply
    and no byte of the output taken by nsqd (a large body still draining is progress; a
    server that stopped reading is not): counted from when the oldest command began to
    wait, or from the last reply or output progress since. One timer per connection does
    it, armed while commands wait and re-armed when it fires early: a command costs no
    timer of its own (no ``call_later`` and ``cancel`` per command), only a clock reading
    when it is the only one waiting.

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


class SharedTask:
    """Runs ``start()`` once for every caller of :meth:`join` until the run ends: the
    (re)connect. The first publisher that finds the connection missing, dropped or idle
    starts it as a task of its own, the others wait for that task, so a client never
    holds two connections at once; a caller that is cancelled stops waiting without
    cancelling the run for the others.

    :param start: makes the coroutine to run.
    :param stopped: the error a caller gets when :meth:`stop` ended the run.
    """

    def __init__(
        self,
        start: Callable[[], Coroutine[Any, Any, None]],
        stopped: Callable[[], BaseException],
    ) -> None:
        self._start = start
        self._stopped = stopped
        self._task: asyncio.Task[None] | None = None
        #: A run is under way (an attribute, not a property: publishers read it per call).
        self.running = False

    async def join(self) -> None:
        """Start the run, or join the one under way, and wait for it to end; raises what
        it raised."""
        task = self._task
        if task is None:
            task = self._task = asyncio.ensure_future(self._start())
            task.add_done_callback(self._done)
            self.running = True
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            cancelling = getattr(current, "cancelling", lambda: 0)()
            if task.cancelled() and not cancelling:  # stop() ended it, not our caller
                raise self._stopped() from None
            raise

    async def stop(self) -> None:
        """Cancel the run under way, if any, and wait until it has ended."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    def _done(self, task: asyncio.Task[None]) -> None:
        if self._task is task:
            self._task = None
            self.running = False
        if not task.cancelled():
            task.exception()  # every waiter got it; do not log it as never retrieved


class _Protocol(asyncio.BufferedProtocol):
    """Reads into one buffer per connection (no allocation per read) and hands what
    arrived to its owner's callbacks. Once the owner has moved on to another connection
    it :meth:`detach` es this one, which is deaf from then on: a late byte on an old
    socket never reaches the new connection's core."""

    def __init__(
        self,
        on_read: Callable[[bytearray, memoryview, int], None],
        on_eof: Callable[[], None],
    ) -> None:
        self._on_read: Callable[[bytearray, memoryview, int], None] | None = on_read
        self._on_eof: Callable[[], None] | None = on_eof
        self._buffer, self._view = take_buffer()

    def detach(self) -> None:
        self._on_read = self._on_eof = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        if self._on_read is not None:
            self._on_read(self._buffer, self._view, nbytes)

    def eof_received(self) -> bool:
        if self._on_eof is not None:
            self._on_eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._on_eof is not None:
            self._on_eof()
        if self._on_read is not None or self._on_eof is not None or self._buffer:
            buffer, view = self._buffer, self._view
            self._buffer = bytearray()  # given back once: the transport reads no more
            give_back_buffer(buffer, view)


class AsyncioIO(AnsweringDriver):
    """The asyncio driver's I/O: the transport and its protocol (:class:`_Protocol`), the
    writes of what the core queued, the reads and their dispatch, the commands waiting
    for replies (:class:`ReplyQueue`) and the TLS upgrade of the transport."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        super().__init__(config)
        self._transport: asyncio.Transport | None = None
        self._protocol: _Protocol | None = None  # the current connection's, see _Protocol
        self._replies: ReplyQueue | None = None  # the current connection's
        self._handshake: asyncio.Future[None] | None = None
        self._message_event = asyncio.Event()
        self._flush_scheduled = False
        self._tls_task: asyncio.Future[None] | None = None

    # -- the connection --------------------------------------------------------------

    def _teardown(self) -> None:
        self._reset_state()
        if self._protocol is not None:
            self._protocol.detach()  # the old socket's late bytes go nowhere
        self._protocol = None
        if self._transport is not None:
            self._transport.close()
        self._transport = None
        closed = NSQConnectionClosedError("the connection was closed by the client")
        if self._replies is not None:
            self._replies.fail_all(closed)
        self._replies = None
        if self._handshake is not None:
            fail_future(self._handshake, closed)
        self._flush_scheduled = False

    # -- transport callbacks -------------------------------------------------------

    def _on_read(self, buffer: bytearray, view: memoryview, nbytes: int) -> None:
        self.last_received = time.monotonic()
        core = self._core
        # An OK and nothing else, the usual read of a publisher (10 bytes).
        if nbytes == 10 and core is not None and core.take_ok(buffer, nbytes):
            replies = self._replies
            if replies is not None:
                replies.arrived(OK)
            return
        self._on_data(view[:nbytes])

    def _on_eof(self) -> None:
        # EOF for the core: it reports the close and the commands left unanswered.
        self._on_data(b"")

    def _on_data(self, data: bytes | memoryview) -> None:
        try:
            if self._receive(data):
                self._message_event.set()
        except NSQError:
            return  # recorded: _fail woke every waiter with it
        core = self._core
        if core is not None and core.state not in CLOSED_STATES:
            self._flush()  # the NOP for a heartbeat; AUTH once IDENTIFY asked for it
        handshake = self._handshake
        if (
            core is not None
            and handshake is not None
            and not handshake.done()
            and core.state is not _HANDSHAKING
            and core.state not in CLOSED_STATES
        ):
            handshake.set_result(None)

    def _reply_arrived(self, data: bytes) -> None:
        if self._replies is not None:
            self._replies.arrived(data)

    def _fail(self, error: NSQError) -> None:
        super()._fail(error)
        first = self._failure or error  # the waiter of the oldest command gets the cause
        replies = self._replies
        if replies is not None:
            replies.fail_oldest(first)
            replies.fail_all(
                NSQConnectionClosedError(f"{self._peer} closed the connection after: {first}")
            )
        if self._handshake is not None:
            fail_future(self._handshake, first)
        self._message_event.set()  # wake readers so they see the failure
        if self._transport is not None and not isinstance(error, NSQServerError):
            self._transport.close()

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
            if self._replies is not None:
                self._replies.written += len(data)
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

    def _buffered(self) -> int:
        """Output written to the transport and not yet taken by the socket."""
        transport = self._transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def _request(self) -> asyncio.Future[bytes]:
        """Write what is queued; the future of its reply."""
        self._flush()
        replies = self._replies
        if replies is None:  # the write failed the connection (no reply will come)
            raise self._failure or self._closed_error(())
        return replies.add()


class AsyncNSQConnection(AsyncioIO):
    """An asyncio connection to one nsqd. Same semantics as the blocking
    :class:`~airflow_provider_nsq.client.drivers.blocking_driver.NSQConnection`: publishes return after
    nsqd's OK; heartbeats are answered as they arrive."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        super().__init__(config)
        self._connecting = SharedTask(self._connect, self._stopped_error)

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
        await self._connecting.join()
        return self

    def _stopped_error(self) -> NSQConnectionClosedError:
        return NSQConnectionClosedError(
            f"the connection to {self._peer} was closed by the client while connecting"
        )

    async def _connect(self) -> None:
        """One (re)connect: the old connection closed, then the new one opened and its
        handshake run, all within ``connect_timeout``."""
        had_transport = self._transport is not None
        self._teardown()
        if had_transport:
            await asyncio.sleep(0)  # let the old socket close before the new one opens
        cfg = self.config
        loop = asyncio.get_running_loop()
        protocol = self._protocol = _Protocol(self._on_read, self._on_eof)
        try:
            async with asyncio.timeout(cfg.connect_timeout):
                self._handshake = loop.create_future()
                with map_exceptions(self._peer, "connect to"):
                    transport, _ = await loop.create_connection(
                        lambda: protocol, cfg.host, cfg.port
                    )
                if self._protocol is not protocol:  # torn down while connecting
                    transport.close()
                    raise NSQConnectionClosedError(f"the connection to {self._peer} was closed")
                self._transport = transport
                self._replies = ReplyQueue(
                    loop, cfg.read_timeout, self._peer, self._buffered, self._teardown
                )
                self._new_core().initiate()
                self._flush()
                await self._handshake
        except TimeoutError:
            self._teardown()
            raise NSQTimeoutError(
                f"could not connect to nsqd at {cfg.address} and complete the handshake "
                f"within {cfg.connect_timeout:g}s"
            ) from None
        except BaseException:
            protocol.detach()
            self._teardown()
            raise

    async def close(self) -> None:
        """REQ messages delivered and not taken, then close the transport (and stop a
        connect under way)."""
        await self._connecting.stop()
        if self._subscribed:
            self._requeue_unanswered()
        transport = self._transport
        buffered = transport is not None and transport.get_write_buffer_size() > 0
        self._teardown()
        if buffered:
            await asyncio.sleep(0)  # let the transport write what is buffered

    # -- publishing ----------------------------------------------------------------

    async def prepare_publish(self) -> None:
        """Decide whether the connection is usable for a publish, and make it so, without
        writing anything of that publish: (re)open it when it is not open yet, nsqd
        closed it, or it sat idle past nsqd's heartbeat deadline (heartbeats are
        answered as they arrive). Raises what (re)opening raises.

        A publish made right after it with ``prepared=True`` (no ``await`` in between)
        trusts this answer instead of asking again: so the producer knows that a failure
        here came before any byte of the command was written (it may fail over to
        another nsqd), and a failure of the publish after.
        """
        if self._usable_core() is None:
            await self._reconnected_core()

    async def publish(self, topic: str, body: bytes, *, prepared: bool = False) -> None:
        """PUB one message; returns after nsqd's OK.

        :param prepared: :meth:`prepare_publish` was called just before; otherwise the
            publish asks the same question itself.
        """
        core = (
            (self._core if prepared else None)
            or self._usable_core()
            or await self._reconnected_core()
        )
        core.pub(topic, body)
        await self._request()

    async def defer_publish(
        self, topic: str, body: bytes, delay_ms: int, *, prepared: bool = False
    ) -> None:
        """DPUB: nsqd delivers the message ``delay_ms`` after it is published
        (``prepared``: as :meth:`publish` says)."""
        core = (
            (self._core if prepared else None)
            or self._usable_core()
            or await self._reconnected_core()
        )
        core.dpub(topic, delay_ms, body)
        await self._request()

    def _usable_core(self) -> ClientConnection | None:
        """The answer of :meth:`prepare_publish`: the core when the connection is up and
        not idle past nsqd's heartbeat deadline; None when a (re)connect must come
        first."""
        if self._subscribed:
            return self._require_core()  # a subscription is never silently reopened
        core = self._core
        if self._connecting.running or core is None or core.state is not _READY:
            return None
        limit = self._idle_limit
        if limit is not None and time.monotonic() - self._last_write >= limit:
            return None
        return core

    async def _reconnected_core(self) -> ClientConnection:
        """The core after the one (re)connect shared by every task publishing meanwhile."""
        await self._connecting.join()
        core = self._require_core()
        if core.state is not _READY:  # dropped again before our turn
            raise self._closed_error(())
        return core

    async def multi_publish(
        self, topic: str, bodies: Iterable[bytes], *, prepared: bool = False
    ) -> int:
        """MPUB in as few frames as fit nsqd's limits; returns the frame count
        (``prepared``: as :meth:`publish` says)."""
        core = (
            (self._core if prepared else None)
            or self._usable_core()
            or await self._reconnected_core()
        )
        counts = queue_mpub(core, topic, bodies)
        self._flush()
        replies = self._replies
        assert replies is not None
        waiters = [replies.add() for _ in counts]
        for done, waiter in enumerate(waiters):
            try:
                await waiter
            except NSQError as exc:
                raise mpub_failed(exc, done, counts) from exc if done else None
        return len(counts)

    # -- subscribing ---------------------------------------------------------------

    async def subscribe(self, topic: str, channel: str) -> None:
        self._require_core().sub(topic, channel, self._message_class())
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
