"""One TCP client connection: reading commands, writing frames, timers, upgrades.

What follows nsqd 1.3.0 here (FACTS.md sections 1, 3, 6, 7, 8):

- the ``"  V2"`` magic, then ``\\n``-terminated command lines (a line longer than nsqd's
  16 KiB read buffer closes the connection); commands are executed by
  :mod:`.commands`;
- fatal errors: the error frame is written, then the connection closes. When more than
  16 KiB of the client's bytes were left unread, nsqd's kernel answers with an RST; the
  broker does the same with ``SO_LINGER 0`` (``pub_bad_topic_large_body``);
- output buffering: responses and errors flush at once, message frames wait in an
  output buffer (default 16 KiB) until the client reaches its RDY limit, the buffer
  fills, something else flushes, or the output-buffer timer (default 250 ms) runs out;
- heartbeats every ``heartbeat_interval`` from IDENTIFY (the first IDENTIFY sets the
  message pump's settings, as in nsqd); a client silent for 2 intervals is closed with
  no error frame; a client not reading for one interval (its write buffer full) is
  dropped;
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
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from airflow_provider_nsq.protocol.command_reader import CommandReader
from airflow_provider_nsq.protocol.compression import DeflateCodec, SnappyCodec
from airflow_provider_nsq.protocol.constants import HEARTBEAT
from airflow_provider_nsq.protocol.errors import NSQProtocolError
from airflow_provider_nsq.protocol.frames import encode_error, encode_message, encode_response

from .auth import AuthState, call_authorizer, query_any
from .commands import HANDLERS, STATE_CLOSING, STATE_INIT, STATE_SUBSCRIBED
from .errors import ClientError
from .identify import IdentifyData
from .message import DONE, IN_FLIGHT, BrokerMessage, Item, timer_tokens

if TYPE_CHECKING:
    from .channel import Channel
    from .server import Broker

log = logging.getLogger("airflow_provider_nsq.testing.broker")

#: nsqd reads through a 16 KiB bufio.Reader (FACTS.md section 3).
READ_BUFFER_SIZE = 16 * 1024
#: Before IDENTIFY: ClientTimeout (60 s) / 2 (FACTS.md section 7).
DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000
DEFAULT_OUTPUT_BUFFER_SIZE = 16 * 1024

_TLS_REQUIRED_SUFFIX = b" in current state (TLS required)"
_LINGER_RESET = struct.pack("ii", 1, 0)


class ClientConnection(asyncio.Protocol):
    """The broker side of one client; created by the TCP server per connection."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.loop = broker.loop
        opts = broker.options
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
        # IDENTIFY (current values) and the message pump's (first IDENTIFY only)
        self.client_id = ""
        self.hostname = ""
        self.user_agent = ""
        self.heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL_MS
        self.output_buffer_size = DEFAULT_OUTPUT_BUFFER_SIZE
        self.output_buffer_timeout = opts.output_buffer_timeout
        self.sample_rate = 0
        self.msg_timeout = opts.msg_timeout
        self._pump_identified = False
        self.pump_output_buffer_timeout = opts.output_buffer_timeout
        self.pump_sample_rate = 0
        self.pump_msg_timeout = opts.msg_timeout
        # upgrades
        self.tls = False
        self.tls_version = ""
        self.tls_cipher = ""
        self.common_name = ""
        self.compression = ""
        self._compress: Callable[[bytes], bytes] | None = None
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
        # writing
        self._out: list[bytes] = []
        self._out_size = 0
        self._need_flush = False
        self._flush_handle: asyncio.TimerHandle | None = None
        self._write_paused = False
        self._write_deadline: asyncio.TimerHandle | None = None
        # timers
        self._hb_handle: asyncio.TimerHandle | None = None
        self._hb_next = 0.0
        self._hb_interval = 0.0
        self._deadline_handle: asyncio.TimerHandle | None = None
        self._last_read = 0.0

    def __str__(self) -> str:
        return f"{self.remote_ip}:{self.remote_port}"

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername") or ("", 0)
        self.remote_ip, self.remote_port = str(peer[0]), int(peer[1])
        self.client_id = self.hostname = self.remote_ip  # nsqd's defaults before IDENTIFY
        self.broker.clients.add(self)
        self._last_read = self.loop.time()
        self._start_heartbeat(self.heartbeat_interval)
        self._arm_deadline()
        log.debug("TCP: new client(%s)", self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._decompress is not None:
            try:
                data = self._decompress(data)
            except Exception as exc:
                log.info("[%s] failed to read command - %s", self, exc)
                self.close_connection()
                return
        reader = self.reader
        reader.feed(data)
        if not self._magic_ok:
            magic = reader.read_magic()
            if magic is None:
                return
            if not magic:
                log.info("client(%s) bad protocol magic", self)
                # nsqd read only the 4 bytes: a clean close, never an RST, for this.
                self._fatal(ClientError("E_BAD_PROTOCOL"), reset=False)
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
        # heartbeat interval, like nsqd's write deadline (FACTS.md section 7).
        self._write_paused = True
        if self.heartbeat_interval > 0 and self._write_deadline is None:
            self._write_deadline = self.loop.call_later(
                self.heartbeat_interval / 1000.0, self._on_write_deadline
            )

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None
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
            self._last_read = self.loop.time()
        if self._want_dispatch:
            self._want_dispatch = False
            if self.channel is not None:
                self.channel.compact()
                self.channel.dispatch()
        if self._need_flush:
            self._flush()
        self.reader.compact()
        if self._eof and self._waiting is None:
            self._on_eof()

    def _run(self) -> bool:
        reader = self.reader
        handlers = HANDLERS
        completed = False
        tls_required = self.broker.options.tcp_tls_required
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
        frame = encode_response(data)
        self._out.append(frame)
        self._out_size += len(frame)
        if flush or not self._in_process:
            self._flush()
        else:
            self._need_flush = True  # once, at the end of this batch of commands

    def _error(self, err: ClientError) -> None:
        log.info("[%s] - %s", self, err)
        if err.fatal:
            self._fatal(err)
            return
        self._out.append(encode_error(err.code, err.text))
        self._flush()

    def _fatal(self, err: ClientError, reset: bool = True) -> None:
        self._out.append(encode_error(err.code, err.text))
        self._flush()
        # More unread than nsqd's read buffer holds: its kernel answers with an RST.
        self.close_connection(reset=reset and self.reader.unread > READ_BUFFER_SIZE)

    def _flush(self) -> None:
        out = self._out
        self._need_flush = False
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        self._out = []
        self._out_size = 0
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._compress is not None:
            data = self._compress(data)
        transport.write(data)

    def _on_flush_timer(self) -> None:
        self._flush_handle = None
        if not self.closed:
            self._flush()

    # -- delivering messages (called by the channel) ---------------------------------------

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
        sample_rate = self.pump_sample_rate
        if sample_rate and random.randrange(100) > sample_rate:
            # nsqd drops the message for good, it is not requeued (FACTS.md section 4).
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
        size = len(frame)
        limit = self.output_buffer_size
        if self._out_size + size > limit and self._out:
            self._flush()  # bufio.Writer semantics: what is buffered goes out first
        self._out.append(frame)
        self._out_size += size
        if self.in_flight >= self.rdy or self._out_size >= limit:
            # At the RDY limit nsqd flushes at once (FACTS.md section 6).
            self._flush()
            return self.in_flight < self.rdy and not self._write_paused
        if self._flush_handle is None and self.pump_output_buffer_timeout > 0:
            self._flush_handle = self.loop.call_later(
                self.pump_output_buffer_timeout / 1000.0, self._on_flush_timer
            )
        return not self._write_paused

    def message_timed_out(self) -> None:
        if self.in_flight > 0:
            self.in_flight -= 1

    def channel_emptied(self) -> None:
        self.in_flight = 0

    # -- state changes (called by commands) ---------------------------------------------------

    def apply_identify(self, data: IdentifyData) -> str | None:
        """nsqd's clientV2.Identify; returns the error text, if any."""
        opts = self.broker.options
        self.client_id = data.client_id
        self.hostname = data.hostname
        self.user_agent = data.user_agent
        hb = data.heartbeat_interval
        if hb == -1:
            self.heartbeat_interval = 0
        elif hb != 0:
            if not 1000 <= hb <= opts.max_heartbeat_interval:
                return f"heartbeat interval ({hb}) is invalid"
            self.heartbeat_interval = hb
        obt = data.output_buffer_timeout
        if obt == -1:
            self.output_buffer_timeout = 0
        elif obt != 0:
            if not opts.min_output_buffer_timeout <= obt <= opts.max_output_buffer_timeout:
                return f"output buffer timeout ({obt}) is invalid"
            self.output_buffer_timeout = obt
        obs = data.output_buffer_size
        if obs == -1:
            self.output_buffer_size = 1  # unbuffered, and no flush timer
            self.output_buffer_timeout = 0
        elif obs != 0:
            if not 64 <= obs <= opts.max_output_buffer_size:
                return f"output buffer size ({obs}) is invalid"
            self.output_buffer_size = obs
        if obs != 0:
            self._flush()
        if not 0 <= data.sample_rate <= 99:
            return f"sample rate ({data.sample_rate}) is invalid"
        self.sample_rate = data.sample_rate
        mt = data.msg_timeout
        if mt != 0:
            if not 1000 <= mt <= opts.max_msg_timeout:
                return f"msg timeout ({mt}) is invalid"
            self.msg_timeout = mt
        if not self._pump_identified:
            # nsqd's message pump takes only the first IDENTIFY into account.
            self._pump_identified = True
            self.pump_output_buffer_timeout = self.output_buffer_timeout
            if self.sample_rate > 0:
                self.pump_sample_rate = self.sample_rate
            self.pump_msg_timeout = self.msg_timeout
            # nsqd's pump starts its ticker just after the IOLoop has set the new read
            # deadline, so the deadline (2 intervals) wins over the 2nd heartbeat
            # (heartbeat_timeout: one heartbeat, then the close).
            self._start_heartbeat(self.heartbeat_interval, offset=0.001)
        self._last_read = self.loop.time()
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
        self._arm_deadline()
        return None

    def subscribed(self, channel: Channel) -> None:
        self.channel = channel
        self.state = STATE_SUBSCRIBED

    def set_rdy(self, count: int) -> None:
        self.rdy = count
        if self.can_take():
            self._want_dispatch = True
        elif self._out:
            self._flush()  # nsqd flushes as soon as the client is not ready

    def start_close(self) -> None:
        self.state = STATE_CLOSING
        self.rdy = 0
        self._flush()

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
        self.transport = transport
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
        """Switch both directions right after the last plain frame (FACTS.md section 8)."""
        codec = SnappyCodec() if kind == "snappy" else DeflateCodec(level)
        self._flush()
        rest = self.reader.take_rest()
        self._compress = codec.compress
        self._decompress = codec.decompress
        self.compression = kind
        if rest:
            self.reader.feed(codec.decompress(rest))

    @property
    def compressed(self) -> bool:
        return bool(self.compression)

    def query_auth(self) -> asyncio.Future[AuthState]:
        """Ask the authorizer in a worker thread (it may block on HTTP)."""
        opts = self.broker.options
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
                opts.http_client_request_timeout / 1000.0,
                self.broker.auth_client_ssl_context,
            )
        return self.loop.run_in_executor(self.broker.executor, call)

    # -- timers --------------------------------------------------------------------------------

    def _start_heartbeat(self, interval_ms: int, offset: float = 0.0) -> None:
        if self._hb_handle is not None:
            self._hb_handle.cancel()
            self._hb_handle = None
        if interval_ms > 0 and not self.closed:
            self._hb_interval = interval_ms / 1000.0
            self._hb_next = self.loop.time() + offset + self._hb_interval
            self._hb_handle = self.loop.call_at(self._hb_next, self._on_heartbeat)

    def _on_heartbeat(self) -> None:
        if self.closed:
            return
        now = self.loop.time()
        if now < self._hb_next:  # never early
            self._hb_handle = self.loop.call_at(self._hb_next, self._on_heartbeat)
            return
        self.send_response(HEARTBEAT, flush=True)
        self._hb_next += self._hb_interval
        if self._hb_next <= now:  # a ticker drops ticks it could not deliver
            self._hb_next = now + self._hb_interval
        self._hb_handle = self.loop.call_at(self._hb_next, self._on_heartbeat)

    def _arm_deadline(self) -> None:
        if self.heartbeat_interval > 0:
            when = self._last_read + 2 * self.heartbeat_interval / 1000.0
        else:
            when = self.loop.time() + 1.0  # disabled: look again later
        self._deadline_handle = self.loop.call_at(when, self._on_deadline)

    def _on_deadline(self) -> None:
        self._deadline_handle = None
        if self.closed:
            return
        hb = self.heartbeat_interval
        now = self.loop.time()
        if hb <= 0 or self._waiting is not None or now < self._last_read + 2 * hb / 1000.0:
            self._arm_deadline()
            return
        # Nothing read for 2 heartbeat intervals (FACTS.md section 7).
        log.info("[%s] read timeout after %d ms", self, 2 * hb)
        self._on_eof()

    def _on_write_deadline(self) -> None:
        self._write_deadline = None
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
        for handle in (
            self._hb_handle,
            self._deadline_handle,
            self._flush_handle,
            self._write_deadline,
        ):
            if handle is not None:
                handle.cancel()
        self._hb_handle = self._deadline_handle = self._flush_handle = self._write_deadline = None
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        self._gen = None
        self.broker.clients.discard(self)
        if self.channel is not None:
            # In-flight messages stay in flight until their timeout (FACTS.md section 6).
            self.channel.remove_client(self)
        log.debug("[%s] closed", self)

    # -- stats -------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "version": "V2",
            "remote_address": f"{self.remote_ip}:{self.remote_port}",
            "state": self.state,
            "ready_count": self.rdy,
            "in_flight_count": self.in_flight,
            "message_count": self.message_count,
            "finish_count": self.finish_count,
            "requeue_count": self.requeue_count,
            "connect_ts": self.connect_ts,
            "sample_rate": self.sample_rate,
            "deflate": self.compression == "deflate",
            "snappy": self.compression == "snappy",
            "user_agent": self.user_agent,
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
