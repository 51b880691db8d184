"""asyncio driver: an :class:`asyncio.Protocol` feeding :class:`ClientConnection`.

A Protocol rather than streams: bytes go straight from the transport into the decoder
(no StreamReader copy), and ``loop.start_tls`` upgrades it in place on every supported
Python. Replies are matched to waiting calls in order (a FIFO of futures), so several
tasks may publish on one connection concurrently and their commands are pipelined.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import deque
from collections.abc import Iterable

from ..protocol.connection import (
    HANDSHAKE_REPLIES,
    ClientConnection,
    CommandFailed,
    ConnectionClosed,
    ConnectionState,
    Heartbeat,
    Reply,
    ServerWarning,
    StartTLS,
)
from ..protocol.errors import (
    NSQConnectionClosedError,
    NSQConnectionError,
    NSQError,
    NSQServerError,
    NSQTimeoutError,
    NSQValueError,
)
from .config import ClientConfig
from .driver import CLOSED_STATES as _CLOSED_STATES
from .driver import DriverBase
from .message import NSQMessage
from .tls import build_ssl_context, describe_tls_error
from .window import (
    AckMode,
    check_window,
    new_core,
    with_context,
)

log = logging.getLogger(__name__)

_RECV_SIZE = 256 * 1024


class _Protocol(asyncio.BufferedProtocol):
    """Reads into one buffer per connection (no allocation per read)."""

    def __init__(self, owner: AsyncNSQConnection) -> None:
        self._owner = owner
        self._buffer = bytearray(_RECV_SIZE)
        self._view = memoryview(self._buffer)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self._owner._on_data(self._view[:nbytes])

    def eof_received(self) -> bool:
        self._owner._on_data(b"")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._on_lost(exc)

    def pause_writing(self) -> None:
        self._owner._writable.clear()

    def resume_writing(self) -> None:
        self._owner._writable.set()


class AsyncNSQConnection(DriverBase):
    """An asyncio connection to one nsqd. Same semantics as the blocking
    :class:`~airflow_provider_nsq.client.blocking.NSQConnection`: publishes return after
    nsqd's OK; heartbeats are answered as they arrive."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        super().__init__(config)
        self._transport: asyncio.Transport | None = None
        self._waiters: deque[asyncio.Future[bytes]] = deque()
        self._handshake: asyncio.Future[None] | None = None
        self._message_event = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
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
        """Open the connection and run the handshake within ``connect_timeout``."""
        self._teardown()
        cfg = self.config
        try:
            if hasattr(asyncio, "timeout"):  # 3.11+: no extra task, unlike wait_for
                async with asyncio.timeout(cfg.connect_timeout):
                    await self._open()
            else:  # pragma: no cover - Python 3.10
                await asyncio.wait_for(self._open(), cfg.connect_timeout)
        except asyncio.TimeoutError:
            self._teardown()
            raise NSQTimeoutError(
                f"could not connect to nsqd at {cfg.address} and complete the handshake "
                f"within {cfg.connect_timeout:g}s"
            ) from None
        except BaseException:
            self._teardown()
            raise
        return self

    async def _open(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._handshake = loop.create_future()
        try:
            transport, _ = await loop.create_connection(lambda: _Protocol(self), cfg.host, cfg.port)
        except OSError as exc:
            raise NSQConnectionError(
                f"could not connect to nsqd at {cfg.address}: {exc.strerror or exc}"
            ) from None
        self._transport = transport
        self.connects += 1
        self._core = core = new_core(cfg, self._message_class)
        core.initiate()
        self._flush()
        await self._handshake

    async def close(self) -> None:
        """REQ messages still held unanswered, then close the transport."""
        self._requeue_unanswered()
        transport = self._transport
        self._teardown()
        if transport is not None:
            await asyncio.sleep(0)  # let the transport write what is buffered

    def _teardown(self) -> None:
        self._reset_state()
        if self._transport is not None:
            self._transport.close()
        self._transport = None
        self._fail_waiters(NSQConnectionClosedError("the connection was closed by the client"))
        self._flush_scheduled = False

    # -- transport callbacks -------------------------------------------------------

    def _on_data(self, data: bytes | memoryview) -> None:
        core = self._core
        if core is None:
            return
        core.receive_data(data)
        try:
            messages, events = core.messages_and_events()
        except NSQError as exc:
            self._fail(exc)
            return
        if messages:
            self._messages += messages  # type: ignore[arg-type]
            self._message_event.set()
        for event in events:
            if isinstance(event, Reply):
                if event.command not in HANDSHAKE_REPLIES:
                    self._resolve(event.data)
            elif isinstance(event, Heartbeat):
                pass  # the core queued a NOP; flushed below
            elif isinstance(event, ServerWarning):
                log.warning("nsqd at %s: %s", self.config.address, event.error)
                self.warnings.append(event.error)
            elif isinstance(event, CommandFailed):
                self._fail(event.error)
            elif isinstance(event, ConnectionClosed):
                self._fail(
                    NSQConnectionClosedError(
                        f"nsqd at {self.config.address} closed the connection"
                    ),
                    only_waiters=True,
                )
            elif isinstance(event, StartTLS):
                self._tls_task = asyncio.ensure_future(self._start_tls())
        self._flush()  # NOP for heartbeats, AUTH during the handshake
        if (
            self._handshake is not None
            and not self._handshake.done()
            and core.state is not ConnectionState.HANDSHAKING
            and core.state not in _CLOSED_STATES
        ):
            self._handshake.set_result(None)

    def _on_lost(self, exc: Exception | None) -> None:
        core = self._core
        if core is None:
            return
        if core.state not in _CLOSED_STATES:
            core.receive_data(b"")
            try:
                self._on_data(b"")
            except NSQError:
                pass
        self._fail(
            NSQConnectionClosedError(f"connection to nsqd at {self.config.address} was lost"),
            only_waiters=True,
        )

    def _resolve(self, data: bytes) -> None:
        if self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled caller still consumes its reply
                waiter.set_result(data)

    def _fail(self, error: NSQError, only_waiters: bool = False) -> None:
        if not only_waiters or self._failure is None:
            self._failure = self._failure or error
        first = self._failure or error
        if self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(first)
        self._fail_waiters(
            NSQConnectionClosedError(
                f"nsqd at {self.config.address} closed the connection after: {first}"
            )
        )
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(first)
        self._message_event.set()  # wake readers so they see the failure
        if self._transport is not None and not isinstance(error, NSQServerError):
            self._transport.close()

    def _fail_waiters(self, error: NSQError) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    async def _start_tls(self) -> None:
        cfg = self.config
        core = self._core
        transport = self._transport
        if core is None or transport is None:
            return
        try:
            context = build_ssl_context(cfg)
            loop = asyncio.get_running_loop()
            protocol = transport.get_protocol()
            new_transport = await loop.start_tls(
                transport, protocol, context, server_hostname=cfg.tls_server_name or cfg.host
            )
        except (ssl.SSLError, OSError) as exc:
            self._fail(describe_tls_error(cfg, exc))
            return
        except NSQError as exc:
            self._fail(exc)
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
            self._last_write = time.monotonic()

    def _schedule_flush(self) -> None:
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

    async def _await_reply(self, waiter: asyncio.Future[bytes]) -> bytes:
        """Wait for ``waiter`` up to ``read_timeout``. A timer, not wait_for(): no task per
        command. A cancelled caller's reply is still consumed in order (``_resolve``)."""
        timer = asyncio.get_running_loop().call_later(
            self.config.read_timeout, self._reply_timed_out, waiter
        )
        try:
            return await waiter
        finally:
            timer.cancel()

    def _reply_timed_out(self, waiter: asyncio.Future[bytes]) -> None:
        if waiter.done():
            return
        waiter.set_exception(
            NSQTimeoutError(
                f"nsqd at {self.config.address} did not answer within {self.config.read_timeout:g}s"
            )
        )
        # A late reply would be matched to the next command: drop the connection.
        self._teardown()

    async def _request(self) -> bytes:
        waiter = self._new_waiter()
        self._flush()
        if not self._writable.is_set():
            await self._writable.wait()
        return await self._await_reply(waiter)

    async def _publisher(self) -> ClientConnection:
        if self._subscribed:
            return self._require_core()  # a subscription is never silently reopened
        core = self._core
        limit = self._idle_limit
        if (
            core is not None
            and core.state not in _CLOSED_STATES
            and (limit is None or time.monotonic() - self._last_write < limit)
        ):
            return core
        await self.connect()
        return self._require_core()

    # -- publishing ----------------------------------------------------------------

    async def publish(self, topic: str, body: bytes) -> None:
        (await self._publisher()).pub(topic, body)
        await self._request()

    async def defer_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        (await self._publisher()).dpub(topic, delay_ms, body)
        await self._request()

    async def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> int:
        """MPUB in as few frames as fit nsqd's limits; returns the frame count."""
        core = await self._publisher()
        counts = core.mpub_split(topic, bodies)
        if not counts:
            raise NSQValueError("multi_publish needs at least one message")
        waiters = [self._new_waiter() for _ in counts]
        self._flush()
        if not self._writable.is_set():
            await self._writable.wait()
        for done, waiter in enumerate(waiters):
            try:
                await self._await_reply(waiter)
            except NSQError as exc:
                if not done:
                    raise
                raise with_context(
                    exc,
                    f"(nsqd had accepted {done} MPUB frames with {sum(counts[:done])} "
                    "messages before)",
                ) from exc
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
                    await asyncio.wait_for(self._message_event.wait(), max(wait, 0))
                except asyncio.TimeoutError:
                    pass
            if not self._messages and self._failure is not None:
                raise self._failure
            if not self._messages and not self.connected:
                raise NSQConnectionClosedError(
                    f"nsqd at {self.config.address} closed the connection"
                )
        messages = self._messages
        self._messages = []
        return messages

    def _respond(self, message: NSQMessage, command: str, delay_ms: int = 0) -> None:
        self._respond_all((message,), command, delay_ms)
        self._schedule_flush()

    async def ping(self) -> None:
        """See :meth:`NSQConnection.ping`."""
        self._require_core().ping()
        await self._request()

    async def start_close(self) -> None:
        """CLS and wait for CLOSE_WAIT."""
        self._require_core().cls()
        await self._request()

    async def consume(
        self,
        topic: str,
        channel: str,
        *,
        max_messages: int = 1,
        timeout: float = 5.0,
        ack: AckMode = "fin",
        requeue_delay_ms: int = 0,
    ) -> list[NSQMessage]:
        """One subscribe window; see :meth:`NSQConnection.consume`."""
        check_window(max_messages, timeout, ack, self.max_rdy_count)
        await self.subscribe(topic, channel)
        self.ready(max_messages)
        deadline = time.monotonic() + timeout
        got: list[NSQMessage] = []
        while len(got) < max_messages:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            got.extend(await self.read_messages(remaining))
        await self.start_close()
        return self._end_window(got, max_messages, ack, requeue_delay_ms)
