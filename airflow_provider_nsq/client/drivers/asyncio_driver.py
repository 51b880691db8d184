"""asyncio driver: an :class:`asyncio.BufferedProtocol` feeding :class:`ClientConnection`.

A Protocol rather than streams: bytes go straight from the transport into the decoder
(no StreamReader copy), and ``loop.start_tls`` upgrades it in place on every supported
Python. Replies are matched to waiting calls in order (:mod:`.reply_queue`), so several
tasks may publish on one connection concurrently and their commands are pipelined; a
read that is exactly nsqd's ``OK`` is taken by the protocol object's ``take_ok``, with
no frame or event made for it.

Concurrent publishers share one (re)connect (:mod:`.shared_task`), so a client never
holds two connections at once. Each connection's protocol object is the only one whose
bytes reach the core: a late reply on an old socket can never answer a command sent on
the new one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

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
from ..transport import receive_buffers
from ..transport.io_errors import map_exceptions
from ..transport.tls import build_ssl_context
from .answering import AnsweringDriver
from .base import CLOSED_STATES, mpub_failed, queue_mpub
from .reply_queue import ReplyQueue, fail_future
from .shared_task import SharedTask

log = logging.getLogger(__name__)

_READY = ConnectionState.READY
_HANDSHAKING = ConnectionState.HANDSHAKING


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
        self._buffer, self._view = receive_buffers.take()

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
            receive_buffers.give_back(buffer, view)


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
            self._receive(data)
        except NSQError:
            return  # recorded: _fail woke every waiter with it
        core = self._core
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

    def _messages_arrived(self) -> None:
        self._message_event.set()
        super()._messages_arrived()

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
        self._requeue_unanswered()
        transport = self._transport
        buffered = transport is not None and transport.get_write_buffer_size() > 0
        self._teardown()
        if buffered:
            await asyncio.sleep(0)  # let the transport write what is buffered

    # -- publishing ----------------------------------------------------------------

    def _publishing_core(self) -> ClientConnection | None:
        """The core to publish on when the connection is up (and not idle past nsqd's
        heartbeat deadline); None when a (re)connect must come first."""
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

    async def prepare_publish(self) -> None:
        """Make the connection ready for the next publish without sending anything: open
        it, or reopen it when nsqd closed it or it sat idle past nsqd's heartbeat
        deadline. Raises what (re)opening raises; a publish that follows without an
        ``await`` in between writes on the connection this made ready."""
        if self._publishing_core() is None:
            await self._reconnected_core()

    async def publish(self, topic: str, body: bytes) -> None:
        (self._publishing_core() or await self._reconnected_core()).pub(topic, body)
        await self._request()

    async def defer_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        core = self._publishing_core() or await self._reconnected_core()
        core.dpub(topic, delay_ms, body)
        await self._request()

    async def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> int:
        """MPUB in as few frames as fit nsqd's limits; returns the frame count."""
        core = self._publishing_core() or await self._reconnected_core()
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
