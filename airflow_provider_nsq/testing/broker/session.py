"""One client's session with the broker: reading and running its commands, handing it
messages, its upgrades and its end.

What follows nsqd 1.3.0 here (docs/nsqd-facts.md sections 1, 3, 6, 7, 8):

- the ``"  V2"`` magic, then ``\\n``-terminated command lines (a line longer than nsqd's
  16 KiB read buffer closes the connection), read through
  :class:`~..wire.command_reader.CommandReader`; the commands
  themselves are :mod:`.commands` (handed in as ``handlers``);
- fatal errors: the error frame is written, then the connection closes. When more than
  16 KiB of the client's bytes were left unread, nsqd's kernel answers with an RST; the
  broker does the same with ``SO_LINGER 0`` (``pub_bad_topic_large_body``);
- output buffering (:mod:`.output`): responses and errors flush at once, message frames
  wait until the client reaches its RDY limit, the buffer fills, something else flushes,
  or the output-buffer timer runs out;
- the settings IDENTIFY negotiates (:class:`~.identify.ClientSettings`) and the timers
  they drive (:mod:`.timers`): heartbeats, the read deadline, the write deadline;
- TLS (server side, right after the plaintext IDENTIFY response), then snappy or deflate
  on both directions at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import socket
import struct
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any

from airflow_provider_nsq.protocol.compression import DeflateCodec, SnappyCodec
from airflow_provider_nsq.protocol.constants import HEARTBEAT
from airflow_provider_nsq.protocol.errors import NSQProtocolError
from airflow_provider_nsq.protocol.frames import encode_error, encode_message, encode_response

from ..wire.command_reader import CommandReader
from .authorization import AuthState, call_authorizer, query_any
from .channel import Channel
from .errors import ClientError
from .identify import ClientSettings, IdentifyData
from .message import DONE, IN_FLIGHT, BrokerMessage, Item, timer_tokens
from .output import OutputBuffer
from .state import BrokerState
from .timers import ClientTimers

log = logging.getLogger("airflow_provider_nsq.testing.broker")

#: nsqd reads through a 16 KiB bufio.Reader (docs/nsqd-facts.md section 3).
READ_BUFFER_SIZE = 16 * 1024

# The session's states, nsqd's numbers (stats show them).
STATE_INIT = 0
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

#: What a command returns: its response payload (None: no response), or a generator
#: that reads its body or waits (see :mod:`.commands`).
Result = bytes | None | Generator[Any, Any, bytes | None]
Handler = Callable[["ClientSession", list[bytes]], Result]

_TLS_REQUIRED_SUFFIX = b" in current state (TLS required)"
_LINGER_RESET = struct.pack("ii", 1, 0)


class ClientSession(asyncio.Protocol):
    """The broker side of one client; created by the TCP server per connection."""

    def __init__(self, broker: BrokerState, handlers: Mapping[bytes, Handler]) -> None:
        self.broker = broker
        self.options = opts = broker.options
        self.loop = broker.loop
        self.handlers = handlers
        self.transport: Any = None
        self.sock: Any = None
        self.remote_ip = ""
        self.remote_port = 0
        self.state = STATE_INIT
        self.closed = False
        # reading
        self.reader = CommandReader(READ_BUFFER_SIZE)
        self.read_error: tuple[str, str] | None = None  # what to say if the body never comes
        self._magic_ok = False
        self._gen: Generator[Any, Any, bytes | None] | None = None
        self._need = 0
        self._waiting: asyncio.Future[Any] | None = None
        self._in_process = False
        self._want_dispatch = False
        self._eof = False
        self.settings = ClientSettings.defaults(opts)
        # upgrades
        self.tls = False
        self.tls_version = ""
        self.tls_cipher = ""
        self.common_name = ""
        self.compression = ""
        self._decompress: Callable[[bytes], bytes] | None = None
        # AUTH
        self.auth_state: AuthState | None = None
        self.auth_secret = b""
        # consuming
        self.channel: Channel | None = None
        self.rdy = 0
        self.in_flight = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.pub_counts: dict[str, int] = {}
        self.connect_ts = int(time.time())
        self._need_flush = False
        self._write_paused = False
        self.out = OutputBuffer(self.loop)
        self.timers = ClientTimers(
            self.loop,
            heartbeat=self._send_heartbeat,
            read_timeout=self._on_read_timeout,
            write_timeout=self._on_write_timeout,
            busy=lambda: self._waiting is not None,
        )

    def __str__(self) -> str:
        return f"{self.remote_ip}:{self.remote_port}"

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = self.out.transport = self.out.socket_transport = transport
        self.sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername") or ("", 0)
        self.remote_ip, self.remote_port = str(peer[0]), int(peer[1])
        settings = self.settings
        settings.client_id = settings.hostname = self.remote_ip  # nsqd's, before IDENTIFY
        self.broker.clients.add(self)
        self._set_heartbeat_interval(settings.heartbeat_interval)
        self.timers.arm_read_deadline()
        log.debug("TCP: new client(%s)", self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._decompress is not None:
            try:
                data = self._decompress(data)
            except NSQProtocolError as exc:
                log.info("[%s] failed to read command - %s", self, exc)
                # nsqd's snappy reader stops at the bad chunk header and leaves the rest
                # unread in the socket (its kernel then resets); flate reads it all.
                self.close_connection(reset=self.compression == "snappy")
                return
        reader = self.reader
        reader.feed(data)
        if not self._magic_ok:
            magic = reader.read_magic()
            if magic is None:
                return
            if not magic:
                log.info("client(%s) bad protocol magic", self)
                # nsqd reads only the 4 bytes and closes: a clean close when nothing
                # followed them, a reset (its kernel's) when more had arrived.
                self.out.add(encode_error("E_BAD_PROTOCOL", ""))
                self.flush()
                self.close_connection(reset=reader.buffered > 0)
                return
            self._magic_ok = True
        self._process()

    def eof_received(self) -> bool | None:
        if self.closed:
            return None
        if self._waiting is not None:
            self._eof = True  # finish the command in progress first
            return True
        self._on_eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cleanup()

    def pause_writing(self) -> None:
        # The client is not reading: stop handing it messages, and drop it after one
        # heartbeat interval, like nsqd's write deadline
        # (docs/nsqd-facts.md section 7).
        self._write_paused = True
        self.timers.start_write_deadline()

    def resume_writing(self) -> None:
        self._write_paused = False
        self.timers.cancel_write_deadline()
        if self.channel is not None and not self.closed:
            self.channel.dispatch()

    # -- reading and executing commands -----------------------------------------------

    def _process(self, resume: asyncio.Future[Any] | None = None) -> None:
        if self._in_process:
            return
        self._in_process = True
        try:
            if resume is not None:
                self._resume_step(resume)
            completed = self._run()
        finally:
            self._in_process = False
        if self.closed:
            return
        if completed:
            self.timers.read_now()
        if self._want_dispatch:
            self._want_dispatch = False
            if self.channel is not None:
                self.channel.compact()
                self.channel.dispatch()
        if self._need_flush:
            self.flush()
        self.reader.compact()
        if self._eof and self._waiting is None:
            self._on_eof()

    def _run(self) -> bool:
        reader = self.reader
        handlers = self.handlers
        completed = False
        tls_required = self.options.tcp_tls_required
        channel = self.channel
        in_flight = channel.in_flight if channel is not None else None
        fast_fin = in_flight is not None and (self.tls or not tls_required)
        while not self.closed:
            gen = self._gen
            if gen is not None:
                if self._waiting is not None or reader.buffered < self._need:
                    break
                self._step(gen, None, None)
                completed = True
                continue
            try:
                params = reader.read_line()
            except NSQProtocolError as exc:
                # nsqd's ReadSlice fails with a full buffer: closes without a frame.
                log.info("[%s] failed to read command - %s", self, exc)
                self.close_connection()
                break
            if params is None:
                break
            cmd = params[0]
            completed = True
            if cmd == b"FIN" and fast_fin and len(params) > 1:
                # Fast path for the hottest command; anything unusual (unknown id,
                # another client's id, bad length) goes through cmd_fin for its error.
                msg = in_flight.get(params[1])  # type: ignore[union-attr]
                if msg is not None and msg.client is self:
                    del in_flight[params[1]]  # type: ignore[union-attr]
                    msg.state = DONE
                    msg.token = 0
                    msg.client = None
                    self.in_flight -= 1
                    self.finish_count += 1
                    self._want_dispatch = True
                    continue
            try:
                if tls_required and not self.tls and cmd != b"IDENTIFY":
                    raise ClientError("E_INVALID", b"cannot " + cmd + _TLS_REQUIRED_SUFFIX)
                handler = handlers.get(cmd)
                if handler is None:
                    raise ClientError("E_INVALID", b"invalid command " + cmd)
                result = handler(self, params)
            except ClientError as err:
                self._error(err)
                continue
            if result is None:
                continue
            if type(result) is bytes:
                self.send_response(result)
                continue
            self._gen = result  # type: ignore[assignment]
            self._need = 0
            self._step(result, None, None)  # type: ignore[arg-type]
        return completed

    def _step(
        self, gen: Generator[Any, Any, bytes | None], value: Any, exc: BaseException | None
    ) -> None:
        try:
            request = gen.send(value) if exc is None else gen.throw(exc)
        except StopIteration as stop:
            self._gen = None
            self.read_error = None
            if stop.value is not None:
                self.send_response(stop.value)
            return
        except ClientError as err:
            self._gen = None
            self.read_error = None
            self._error(err)
            return
        if type(request) is tuple:
            self._need, code, text = request
            self.read_error = (code, text)
            return
        future = asyncio.ensure_future(request)
        self._waiting = future
        future.add_done_callback(self._on_awaited)

    def _on_awaited(self, future: asyncio.Future[Any]) -> None:
        if self.closed or future.cancelled():
            return
        self._process(resume=future)

    def _resume_step(self, future: asyncio.Future[Any]) -> None:
        self._waiting = None
        gen = self._gen
        if gen is None:
            return
        exc = future.exception()
        self._step(gen, None if exc is not None else future.result(), exc)

    def _on_eof(self) -> None:
        if self._gen is not None and self.read_error is not None:
            # EOF in the middle of a body: nsqd reports the failed read, then closes.
            code, text = self.read_error
            self._fatal(ClientError(code, text))
        else:
            self.close_connection()

    # -- writing ----------------------------------------------------------------------------

    def send_response(self, data: bytes, flush: bool = False) -> None:
        self.out.add(encode_response(data))
        if flush or not self._in_process:
            self.flush()
        else:
            self._need_flush = True  # once, at the end of this batch of commands

    def _error(self, err: ClientError) -> None:
        log.info("[%s] - %s", self, err)
        if err.fatal:
            self._fatal(err)
            return
        self.out.add(encode_error(err.code, err.text))
        self.flush()

    def _fatal(self, err: ClientError, reset: bool = True) -> None:
        self.out.add(encode_error(err.code, err.text))
        self.flush()
        # More unread than nsqd's read buffer holds: its kernel answers with an RST. Not
        # counting a body already read: refused after reading it, nsqd closes cleanly.
        self.close_connection(reset=reset and self.reader.buffered > READ_BUFFER_SIZE)

    def flush(self) -> None:
        self._need_flush = False
        self.out.flush()

    # -- delivering messages (called by the channel) ---------------------------------------

    @property
    def pump_msg_timeout(self) -> int:
        return self.settings.pump_msg_timeout

    def can_take(self) -> bool:
        return (
            self.state == STATE_SUBSCRIBED
            and self.in_flight < self.rdy
            and not self._write_paused
            and not self.closed
        )

    def deliver(
        self,
        item: Item,
        now: float,
        in_flight: dict[bytes, BrokerMessage],
        heap: list[tuple[float, int, BrokerMessage]],
        push: Callable[..., None],
        timeout: float,
    ) -> bool:
        """Send one message in flight; return whether this client can take another."""
        settings = self.settings
        sample_rate = settings.pump_sample_rate
        if sample_rate and random.randrange(100) > sample_rate:
            # nsqd drops the message for good, it is not requeued
            # (docs/nsqd-facts.md section 4).
            if isinstance(item, BrokerMessage):
                item.state = DONE
            return True
        msg = item if isinstance(item, BrokerMessage) else BrokerMessage(*item)
        msg.attempts += 1
        msg.state = IN_FLIGHT
        msg.client = self
        msg.delivered_at = now
        token = next(timer_tokens)
        msg.token = token
        in_flight[msg.id] = msg
        push(heap, (now + timeout, token, msg))
        self.in_flight += 1
        self.message_count += 1
        frame = encode_message(msg.timestamp, msg.attempts, msg.id, msg.body)
        out = self.out
        limit = settings.output_buffer_size
        if out.size + len(frame) > limit and out:
            out.flush()  # bufio.Writer semantics: what is buffered goes out first
        out.add(frame)
        if self.in_flight >= self.rdy or out.size >= limit:
            # At the RDY limit nsqd flushes at once (docs/nsqd-facts.md
            # section 6).
            out.flush()
            return self.in_flight < self.rdy and not self._write_paused
        if settings.pump_output_buffer_timeout > 0:
            out.flush_within(settings.pump_output_buffer_timeout / 1000.0)
        return not self._write_paused

    def message_timed_out(self) -> None:
        if self.in_flight > 0:
            self.in_flight -= 1

    def channel_emptied(self) -> None:
        self.in_flight = 0

    # -- state changes (called by commands) ---------------------------------------------------

    def apply_identify(self, data: IdentifyData) -> str | None:
        """nsqd's clientV2.Identify; returns the error text, if any."""
        settings = self.settings
        first = not settings.identified
        error = settings.apply(data, self.options)
        if data.output_buffer_size != 0:
            self.flush()
        if error:
            return error
        if first:
            # nsqd's pump starts its ticker just after the IOLoop has set the new read
            # deadline, so the deadline (2 intervals) wins over the 2nd heartbeat
            # (heartbeat_timeout: one heartbeat, then the close).
            self._set_heartbeat_interval(settings.heartbeat_interval, offset=0.001)
        self.timers.interval_ms = settings.heartbeat_interval
        self.timers.read_now()
        self.timers.arm_read_deadline()
        return None

    def subscribed(self, channel: Channel) -> None:
        self.channel = channel
        self.state = STATE_SUBSCRIBED

    def set_rdy(self, count: int) -> None:
        self.rdy = count
        if self.can_take():
            self._want_dispatch = True
        elif self.out:
            self.flush()  # nsqd flushes as soon as the client is not ready

    def start_close(self) -> None:
        self.state = STATE_CLOSING
        self.rdy = 0
        self.flush()

    def finished(self) -> None:
        self.in_flight -= 1
        self.finish_count += 1
        self._want_dispatch = True

    def requeued(self) -> None:
        self.in_flight -= 1
        self.requeue_count += 1
        self._want_dispatch = True

    def published(self, topic: str, count: int) -> None:
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count

    # -- upgrades ----------------------------------------------------------------------------

    async def upgrade_tls(self) -> None:
        context = self.broker.ssl_context
        assert context is not None
        # nsqd swaps its reader: plaintext bytes pipelined after IDENTIFY are lost.
        self.reader.take_rest()
        transport = await self.loop.start_tls(
            self.transport, self, context, server_side=True, ssl_handshake_timeout=5.0
        )
        if transport is None:
            raise ConnectionError("connection closed during the TLS handshake")
        self.transport = self.out.transport = transport
        self.tls = True
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.tls_version = ssl_object.version() or ""
            cipher = ssl_object.cipher()
            self.tls_cipher = cipher[0] if cipher else ""
        cert = transport.get_extra_info("peercert") or {}
        for rdn in cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    self.common_name = value

    def start_compression(self, kind: str, level: int) -> None:
        """Switch both directions right after the last plain frame
        (docs/nsqd-facts.md section 8)."""
        codec = SnappyCodec() if kind == "snappy" else DeflateCodec(level)
        self.out.compress_with(codec.compress)
        rest = self.reader.take_rest()
        self._decompress = codec.decompress
        self.compression = kind
        if rest:
            try:
                self.reader.feed(codec.decompress(rest))
            except NSQProtocolError as exc:
                # Bytes pipelined behind IDENTIFY that do not decode: nsqd would never
                # have read them (it swaps its reader and drops what it had buffered),
                # so drop them and read on from a fresh decoder, keeping the connection.
                log.info("[%s] dropped %d undecodable bytes sent before the %s upgrade: %s",
                         self, len(rest), kind, exc)  # fmt: skip
                fresh = SnappyCodec() if kind == "snappy" else DeflateCodec(level)
                self._decompress = fresh.decompress

    @property
    def compressed(self) -> bool:
        return bool(self.compression)

    def query_auth(self) -> asyncio.Future[AuthState]:
        """Ask the authorizer in a worker thread (it may block on HTTP)."""
        opts = self.options
        if opts.authorizer is not None:
            call = functools.partial(
                call_authorizer,
                opts.authorizer,
                self.remote_ip,
                self.tls,
                self.common_name,
                self.auth_secret.decode("utf-8", "replace"),
            )
        else:
            call = functools.partial(
                query_any,
                opts.auth_http_address,
                self.remote_ip,
                self.tls,
                self.common_name,
                self.auth_secret,
                (opts.http_client_connect_timeout + opts.http_client_request_timeout) / 1000,
                self.broker.auth_client_ssl_context,
            )
        return self.loop.run_in_executor(self.broker.executor, call)

    # -- timers --------------------------------------------------------------------------------

    def _set_heartbeat_interval(self, interval_ms: int, offset: float = 0.0) -> None:
        self.timers.interval_ms = interval_ms
        self.timers.start_heartbeats(interval_ms, offset)

    def _send_heartbeat(self) -> None:
        if not self.closed:
            self.send_response(HEARTBEAT, flush=True)

    def _on_read_timeout(self) -> None:
        if self.closed:
            return
        # Nothing read for 2 heartbeat intervals (docs/nsqd-facts.md section 7).
        log.info("[%s] read timeout after %d ms", self, 2 * self.timers.interval_ms)
        self._on_eof()

    def _on_write_timeout(self) -> None:
        if self._write_paused and not self.closed:
            log.info("[%s] write timeout: the client is not reading", self)
            self.close_connection(abort=True)

    # -- closing ---------------------------------------------------------------------------------

    def close_connection(self, reset: bool = False, abort: bool = False) -> None:
        """Close from the server side (after a fatal error, a timeout or a delete)."""
        if self.closed:
            return
        transport = self.transport
        self._cleanup()
        if transport is None:
            return
        if reset and self.sock is not None and transport.get_write_buffer_size() == 0:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            except OSError:
                pass
            transport.abort()
        elif abort:
            transport.abort()
        else:
            transport.close()

    def _cleanup(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.timers.stop()
        self.out.close()
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        self._gen = None
        self.broker.clients.discard(self)
        if self.channel is not None:
            # In-flight messages stay in flight until their timeout
            # (docs/nsqd-facts.md section 6).
            self.channel.remove_client(self)
        log.debug("[%s] closed", self)

    # -- stats -------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "client_id": self.settings.client_id,
            "hostname": self.settings.hostname,
            "version": "V2",
            "remote_address": f"{self.remote_ip}:{self.remote_port}",
            "state": self.state,
            "ready_count": self.rdy,
            "in_flight_count": self.in_flight,
            "message_count": self.message_count,
            "finish_count": self.finish_count,
            "requeue_count": self.requeue_count,
            "connect_ts": self.connect_ts,
            "sample_rate": self.settings.sample_rate,
            "deflate": self.compression == "deflate",
            "snappy": self.compression == "snappy",
            "user_agent": self.settings.user_agent,
        }
        if self.auth_state is not None:
            stats["authed"] = True
            if self.auth_state.identity:
                stats["auth_identity"] = self.auth_state.identity
            if self.auth_state.identity_url:
                stats["auth_identity_url"] = self.auth_state.identity_url
        if self.pub_counts:
            stats["pub_counts"] = [{"topic": t, "count": n} for t, n in self.pub_counts.items()]
        stats.update(
            {
                "tls": self.tls,
                "tls_cipher_suite": self.tls_cipher,
                "tls_version": self.tls_version,
                "tls_negotiated_protocol": "",
                "tls_negotiated_protocol_is_mutual": False,
            }
        )
        return stats
