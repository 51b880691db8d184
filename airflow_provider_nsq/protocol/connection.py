"""One client connection's protocol state, without I/O (in the manner of h11/wsproto).

The driver pumps bytes; this object does everything else::

    conn = ClientConnection(identify={...}, auth_secret=b"...")
    conn.initiate()                       # queues magic + IDENTIFY
    sock.sendall(conn.data_to_send())
    while conn.state is ConnectionState.HANDSHAKING:
        conn.receive_data(sock.recv(65536))
        for event in conn.events():
            if isinstance(event, StartTLS): ...wrap the socket...; conn.tls_established()
        sock.sendall(conn.data_to_send())

Handshake (docs/nsqd-facts.md sections 4, 8, 9): magic, IDENTIFY, then,
as the IDENTIFY response negotiates them, TLS (the driver wraps its transport when asked),
snappy or deflate (applied here, on both directions, at the exact byte where nsqd switches),
and AUTH when nsqd says ``auth_required``.

Replies are matched to commands in order: only IDENTIFY, AUTH, SUB, PUB, MPUB, DPUB and
CLS get one. Heartbeats, messages and the non-fatal E_FIN/REQ/TOUCH_FAILED errors arrive
unasked and never consume a pending command. Heartbeats are answered with NOP here.
"""

from __future__ import annotations

import enum
import json
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import commands
from .compression import DeflateCodec, SnappyCodec, StreamCodec
from .constants import (
    CLOSE_WAIT,
    DEFAULT_DEFLATE_LEVEL,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_MSG_SIZE,
    DEFAULT_MAX_RDY_COUNT,
    DEFAULT_MAX_REQ_TIMEOUT_MS,
    HEARTBEAT,
    MAGIC_V2,
    OK,
)
from .errors import (
    NSQAuthError,
    NSQConnectionClosedError,
    NSQProtocolError,
    NSQServerError,
    NSQStateError,
    NSQTLSError,
)
from .frames import ErrorFrame, FrameDecoder, Message, ResponseFrame, encode_response


class ConnectionState(enum.Enum):
    NEW = "new"
    HANDSHAKING = "handshaking"
    READY = "ready"
    SUBSCRIBED = "subscribed"
    CLOSING = "closing"  # CLS sent: nsqd stops sending; FIN/REQ/TOUCH still allowed
    CLOSED = "closed"
    FAILED = "failed"


_NEW, _HANDSHAKING, _READY, _SUBSCRIBED, _CLOSING, _CLOSED, _FAILED = ConnectionState

# Which state each command may be sent in (docs/nsqd-facts.md section 2).
_ALLOWED: dict[str, frozenset[ConnectionState]] = {
    "SUB": frozenset({_READY}),
    "RDY": frozenset({_SUBSCRIBED, _CLOSING}),
    "FIN": frozenset({_SUBSCRIBED, _CLOSING}),
    "REQ": frozenset({_SUBSCRIBED, _CLOSING}),
    "TOUCH": frozenset({_SUBSCRIBED, _CLOSING}),
    "CLS": frozenset({_SUBSCRIBED}),
    "PUB": frozenset({_READY, _SUBSCRIBED, _CLOSING}),
    "MPUB": frozenset({_READY, _SUBSCRIBED, _CLOSING}),
    "DPUB": frozenset({_READY, _SUBSCRIBED, _CLOSING}),
    "NOP": frozenset({_HANDSHAKING, _READY, _SUBSCRIBED, _CLOSING}),
    "PING": frozenset({_READY}),  # its IDENTIFY is refused once subscribed
}

# The states a publish may be sent in (_ALLOWED's PUB row, checked by identity: an enum's
# hash is a Python-level call).
_PUBLISHING = (_READY, _SUBSCRIBED, _CLOSING)

# The whole frame of an ``OK`` response: what a publisher reads after almost every command.
_OK_FRAME = encode_response(OK)

# IDENTIFY fields that negotiate an upgrade: a ping's IDENTIFY leaves them out.
_UPGRADE_FIELDS = frozenset({"feature_negotiation", "tls_v1", "snappy", "deflate", "deflate_level"})


# Events. Messages are delivered as the Message objects themselves (the hot path).


@dataclass(frozen=True, slots=True)
class Reply:
    """nsqd's answer to a command that gets one (``OK``, ``CLOSE_WAIT``, JSON)."""

    command: str
    data: bytes


@dataclass(frozen=True, slots=True)
class CommandFailed:
    """A fatal error frame: nsqd refused ``command`` (None if nothing was pending) and is
    closing the connection."""

    command: str | None
    error: NSQServerError


@dataclass(frozen=True, slots=True)
class ServerWarning:
    """A non-fatal error frame (E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED)."""

    error: NSQServerError


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """nsqd sent ``_heartbeat_``; a NOP has already been queued in reply."""


@dataclass(frozen=True, slots=True)
class StartTLS:
    """The driver must run a TLS client handshake now, then call ``tls_established()``."""


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The server closed the connection. ``pending`` lists commands left unanswered."""

    pending: tuple[str, ...]


Event = Reply | CommandFailed | ServerWarning | Heartbeat | StartTLS | ConnectionClosed | Message

HEARTBEAT_EVENT = Heartbeat()

# Decompressed bytes taken per step (more when one frame needs more): bounds what a
# compressed bomb can make the core hold beyond one frame (issue: "decompression bombs").
_INFLATE_STEP = 128 * 1024

# Replies the handshake consumes itself; drivers match only the others to callers.
HANDSHAKE_REPLIES = frozenset({"IDENTIFY", "TLS", "SNAPPY", "DEFLATE", "AUTH"})


def _parse_json(command: str, data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        raise NSQProtocolError(f"{command} response is not JSON: {data[:80]!r}") from None
    except RecursionError:
        raise NSQProtocolError(
            f"{command} response is JSON nested too deeply to be nsqd's: {data[:80]!r}"
        ) from None
    if not isinstance(value, dict):
        raise NSQProtocolError(f"{command} response is not a JSON object: {data[:80]!r}")
    return value


# IDENTIFY responses already parsed: one nsqd answers every connection of a client alike.
# Each is shared by the connections that got it, and never changed (drivers hand out
# copies).
_IDENTIFY_RESPONSES: dict[bytes, dict[str, Any]] = {}


def _identify_response(data: bytes) -> dict[str, Any]:
    info = _IDENTIFY_RESPONSES.get(data)
    if info is None:
        info = _parse_json("IDENTIFY", data)
        if len(_IDENTIFY_RESPONSES) < 64:
            _IDENTIFY_RESPONSES[data] = info
    return info


class ClientConnection:
    """Sans-I/O state of one NSQ client connection. See the module docstring."""

    def __init__(
        self,
        *,
        identify: Mapping[str, Any] | None = None,
        auth_secret: bytes | None = None,
        max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_req_timeout_ms: int = DEFAULT_MAX_REQ_TIMEOUT_MS,
        max_frame_size: int | None = None,
        message_class: type[Message] = Message,
    ) -> None:
        self._identify = dict(identify) if identify is not None else None
        self._auth_secret = auth_secret
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.max_req_timeout_ms = max_req_timeout_ms
        self.max_rdy_count = DEFAULT_MAX_RDY_COUNT
        if max_frame_size is None:
            max_frame_size = max(DEFAULT_MAX_FRAME_SIZE, max_msg_size + 30)
        self._message_class = message_class
        self._decoder = FrameDecoder(max_frame_size, message_class)
        self._codec: StreamCodec | None = None
        self._out: list[bytes] = []
        self._pending: deque[str] = deque()
        self._eof = False
        self._awaiting_tls = False
        self._answered_heartbeat = False
        self.state = _NEW
        self.server_info: dict[str, Any] = {}
        self.auth_info: dict[str, Any] | None = None
        self.tls = False
        self.compression: str | None = None
        self.error: BaseException | None = None

    # -- introspection -------------------------------------------------------------

    @property
    def pending(self) -> tuple[str, ...]:
        """Commands sent and still waiting for their reply, oldest first."""
        return tuple(self._pending)

    @property
    def heartbeats_disabled(self) -> bool:
        return bool(self._identify) and self._identify.get("heartbeat_interval") == -1  # type: ignore[union-attr]

    # -- output --------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Everything queued since the last call, compressed if compression is on."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        if self._codec is not None:
            data = self._codec.compress(data)
        return data

    def _queue(self, data: bytes, reply_to: str | None = None) -> None:
        self._out.append(data)
        if reply_to is not None:
            self._pending.append(reply_to)

    def _check(self, command: str) -> None:
        state = self.state
        if state in _ALLOWED[command]:
            return
        if state is _CLOSED or state is _FAILED:
            raise NSQConnectionClosedError(
                f"cannot send {command}: the connection is {state.value}"
                + (f" ({self.error})" if self.error else "")
            )
        raise NSQStateError(f"cannot send {command} in state {state.value.upper()}")

    # -- handshake -----------------------------------------------------------------

    def initiate(self) -> None:
        """Queue the magic and IDENTIFY (or AUTH, or nothing) to open the connection."""
        if self.state is not _NEW:
            raise NSQStateError("initiate() was already called")
        self._queue(MAGIC_V2)
        if self._identify is not None:
            self._queue(commands.encode_identify(self._identify), "IDENTIFY")
            self.state = _HANDSHAKING
        elif self._auth_secret is not None:
            self._queue(commands.encode_auth(self._auth_secret), "AUTH")
            self.state = _HANDSHAKING
        else:
            self.state = _READY

    def tls_established(self) -> None:
        """The driver finished the TLS handshake; nsqd now sends ``OK`` over TLS."""
        if not self._awaiting_tls:
            raise NSQStateError("tls_established() called but no TLS upgrade was negotiated")
        self._awaiting_tls = False
        self.tls = True
        self._pending.append("TLS")

    def _on_handshake_reply(self, command: str, data: bytes) -> Event | None:
        if command == "IDENTIFY":
            return self._on_identify(data)
        if command == "TLS":
            self._expect_ok(command, data)
            self._start_compression()
            return None
        if command in ("SNAPPY", "DEFLATE"):
            self._expect_ok(command, data)
            self._start_auth()
            return None
        if command == "AUTH":
            self.auth_info = _parse_json(command, data)
            self.state = _READY
            return None
        raise AssertionError(command)  # pragma: no cover

    def _expect_ok(self, command: str, data: bytes) -> None:
        if data != OK:
            raise NSQProtocolError(f"expected OK after the {command} upgrade, got {data[:80]!r}")

    def _on_identify(self, data: bytes) -> Event | None:
        requested = self._identify or {}
        if data == OK:
            self.server_info = {"response": "OK"}
        else:
            self.server_info = _identify_response(data)
        info = self.server_info
        max_rdy = info.get("max_rdy_count")
        if isinstance(max_rdy, int) and max_rdy >= 0:
            self.max_rdy_count = max_rdy
        if requested.get("tls_v1") and not info.get("tls_v1"):
            # nsqd would carry on in plaintext; a client that asked for TLS must not.
            if data == OK:
                raise NSQTLSError(
                    "TLS was requested without feature negotiation: nsqd answered OK and stays "
                    "in plaintext"
                )
            raise NSQTLSError(
                "TLS was requested but nsqd did not negotiate it (tls_v1=false in the IDENTIFY "
                "response): the server has no TLS certificate configured"
            )
        if info.get("tls_v1"):
            self._awaiting_tls = True
            return StartTLS()
        self._start_compression()
        return None

    def _start_compression(self) -> None:
        info = self.server_info
        codec: StreamCodec
        if info.get("snappy"):
            codec, command = SnappyCodec(), "SNAPPY"
        elif info.get("deflate"):
            level = (self._identify or {}).get("deflate_level") or DEFAULT_DEFLATE_LEVEL
            codec, command = DeflateCodec(int(level)), "DEFLATE"
        else:
            self._start_auth()
            return
        # nsqd switches right after its last plain frame: whatever follows is compressed.
        leftover = self._decoder.take_buffered()
        self._codec = codec
        self.compression = codec.name
        self._pending.append(command)
        if leftover:
            codec.feed(leftover)  # inflated a step at a time by events()

    def _start_auth(self) -> None:
        if self.server_info.get("auth_required"):
            if not self._auth_secret:
                raise NSQAuthError(
                    "nsqd requires AUTH (auth_required=true) but no AUTH secret is configured; "
                    "set the connection's password (AUTH secret)"
                )
            self._queue(commands.encode_auth(self._auth_secret), "AUTH")
        else:
            self.state = _READY

    # -- commands ------------------------------------------------------------------

    def pub(self, topic: str, body: bytes) -> None:
        if self.state not in _PUBLISHING:
            self._check("PUB")
        self._out.append(commands.encode_pub(topic, body, self.max_msg_size))
        self._pending.append("PUB")

    def dpub(self, topic: str, delay_ms: int, body: bytes) -> None:
        if self.state not in _PUBLISHING:
            self._check("DPUB")
        data = commands.encode_dpub(
            topic, delay_ms, body, self.max_msg_size, self.max_req_timeout_ms
        )
        self._queue(data, "DPUB")

    def mpub(self, topic: str, bodies: Sequence[bytes]) -> None:
        """One MPUB frame; :meth:`mpub_split` splits batches larger than the limits."""
        self._check("MPUB")
        data = commands.encode_mpub(topic, bodies, self.max_msg_size, self.max_body_size)
        self._queue(data, "MPUB")

    def mpub_split(self, topic: str, bodies: Iterable[bytes]) -> list[int]:
        """Queue ``bodies`` as as few MPUB frames as fit nsqd's limits (each gets its own
        reply); returns the message count of each frame. Nothing is queued if any body
        is refused."""
        if self.state not in _PUBLISHING:
            self._check("MPUB")
        frames = commands.encode_mpub_batches(topic, bodies, self.max_msg_size, self.max_body_size)
        out, pending = self._out, self._pending
        for _, frame in frames:
            out.append(frame)
            pending.append("MPUB")
        return [count for count, _ in frames]

    def sub(self, topic: str, channel: str, message_class: type[Message] | None = None) -> None:
        """SUB; messages are decoded into ``message_class`` from now on when it is given
        (a class made for the subscribing connection: publishers never make one)."""
        self._check("SUB")
        if self.heartbeats_disabled:
            raise NSQStateError("cannot SUB with heartbeats disabled (heartbeat_interval=-1)")
        self._queue(commands.encode_sub(topic, channel), "SUB")
        if message_class is not None:
            self._message_class = self._decoder.message_class = message_class
        self.state = _SUBSCRIBED

    def rdy(self, count: int) -> None:
        self._check("RDY")
        self._queue(commands.encode_rdy(count, self.max_rdy_count))

    def fin(self, raw_id: bytes) -> None:
        self._check("FIN")
        self._queue(commands.encode_fin(raw_id))

    def fin_many(self, raw_ids: Sequence[bytes]) -> None:
        """FIN several messages in one write (what keeps nsqd fast:
        docs/nsqd-facts.md sec. 6)."""
        self._check("FIN")
        self._queue(commands.encode_fin_many(raw_ids))

    def req(self, raw_id: bytes, delay_ms: int = 0) -> None:
        self._check("REQ")
        self._queue(commands.encode_req(raw_id, delay_ms, self.max_req_timeout_ms))

    def touch(self, raw_id: bytes) -> None:
        self._check("TOUCH")
        self._queue(commands.encode_touch(raw_id))

    def nop(self) -> None:
        self._check("NOP")
        self._queue(commands.NOP)

    def ping(self) -> None:
        """A round trip that shows nsqd accepts commands on this connection: ``NOP`` (which
        nsqd refuses, fatally, when it requires TLS and the connection has none), then an
        IDENTIFY that repeats this connection's settings without any upgrade, which nsqd
        answers ``OK``. The reply is matched as ``PING``; a refusal fails it."""
        self._check("PING")
        fields = {k: v for k, v in (self._identify or {}).items() if k not in _UPGRADE_FIELDS}
        self._queue(commands.NOP)
        self._queue(commands.encode_identify(fields), "PING")

    def cls(self) -> None:
        self._check("CLS")
        self._queue(commands.CLS, "CLS")
        self.state = _CLOSING

    def send_raw(self, data: bytes, reply_to: str | None = None) -> None:
        """Queue ``data`` unchecked (tests and diagnostics only: nsqd may close the
        connection on anything malformed). ``reply_to`` names the command if nsqd answers
        it, so the reply is matched."""
        if self.state is _CLOSED or self.state is _FAILED:
            self._check("NOP")
        self._queue(bytes(data), reply_to)

    def close(self) -> None:
        """The driver closed (or is closing) its transport."""
        if self.state not in (_CLOSED, _FAILED):
            self.state = _CLOSED
        self._pending.clear()
        self._out.clear()

    # -- input ---------------------------------------------------------------------

    def receive_data(self, data: bytes | memoryview) -> None:
        """Bytes read from the transport; ``b""`` means the server closed it."""
        if not data:
            self._eof = True
            return
        if self.state is _CLOSED or self.state is _FAILED:
            return
        if self._codec is not None:
            self._codec.feed(data)  # inflated a step at a time by events()
        else:
            self._decoder.undecoded += data  # FrameDecoder.feed, without the call per read

    def take_ok(self, data: bytearray, size: int) -> bool:
        """The publisher's fast path of :meth:`receive_data` + :meth:`events`: when the
        first ``size`` bytes of ``data`` are exactly one ``OK`` response, nothing else is
        buffered, the stream is not compressed, and the oldest command waiting for a
        reply takes ``OK`` (a publish or SUB on a steady connection; not CLS), that
        command is answered: True. Otherwise nothing changes and it returns False: feed
        the bytes to :meth:`receive_data`. No frame or event object is made."""
        if size != 10 or not data.startswith(_OK_FRAME):
            return False
        pending = self._pending
        if (
            not pending
            or self._codec is not None
            or self._decoder.undecoded
            or self.state not in _PUBLISHING
            or pending[0] == "CLS"
        ):
            return False
        pending.popleft()
        return True

    def events(self) -> list[Event]:
        """Every event the received bytes complete, in order."""
        out: list[Event] = []
        self._answered_heartbeat = False
        try:
            while True:
                if self.state is _HANDSHAKING:
                    self._handshake_events(out)
                state = self.state
                if state is not _HANDSHAKING and state is not _FAILED and self._decoder.undecoded:
                    self._steady_events(self._decoder.frames(), out)
                if not self._inflate():
                    break
        except (NSQProtocolError, NSQTLSError, NSQAuthError) as exc:
            self._fail(exc)
            raise
        if self._eof:
            out.extend(self._closed_event())
        return out

    def _inflate(self) -> bool:
        """Decompress pending input into the decoder, a bounded step at a time, until it
        holds one whole frame or the input runs out; True if it got bytes.

        The frame-size limit is checked between steps, so a compressed bomb is refused
        after at most one step past a frame header, never inflated whole first.
        """
        codec = self._codec
        if codec is None or self.state is _FAILED or not codec.pending:
            return False
        decoder = self._decoder
        grew = False
        while codec.pending:
            needed = decoder.needed()  # raises as soon as a bad frame size is visible
            if not needed:
                break
            data = codec.read(max(needed, _INFLATE_STEP))
            if not data:
                break
            decoder.feed(data)
            grew = True
        if grew:
            decoder.needed()
        return grew

    def messages_and_events(self) -> tuple[list[Message], list[Event]]:
        """:meth:`events`, with the messages in a list of their own (the consumer's fast
        path: no per-message dispatch). Order is kept within each list."""
        if (
            self.state is not _READY
            and self.state is not _SUBSCRIBED
            and self.state is not _CLOSING
        ):
            events = self.events()
            msg_class = self._message_class
            return (
                [e for e in events if isinstance(e, msg_class)],
                [e for e in events if not isinstance(e, msg_class)],
            )
        out: list[Event] = []
        self._answered_heartbeat = False
        try:
            messages, others = self._decoder.split_frames()
            if others:
                self._steady_events(others, out)
            while self._inflate():
                more, others = self._decoder.split_frames()
                messages += more
                if others:
                    self._steady_events(others, out)
        except NSQProtocolError as exc:
            self._fail(exc)
            raise
        if self._eof:
            out.extend(self._closed_event())
        return messages, out

    def _closed_event(self) -> list[Event]:
        if self.state is _CLOSED:
            return []
        lost = tuple(self._pending)
        if self.state is not _FAILED:
            self.state = _CLOSED
            self.error = self.error or NSQConnectionClosedError("nsqd closed the connection")
        self._pending.clear()
        return [ConnectionClosed(lost)]

    def _fail(self, exc: BaseException) -> None:
        self.state = _FAILED
        self.error = exc
        self._pending.clear()

    def _handshake_events(self, out: list[Event]) -> None:
        # One frame at a time: the stream may change encoding after any handshake reply.
        decoder = self._decoder
        while self.state is _HANDSHAKING and not self._awaiting_tls:
            frame = decoder.next_frame()
            if frame is None:
                return
            if isinstance(frame, ResponseFrame):
                if frame.data == HEARTBEAT:
                    self._on_heartbeat(out)
                    continue
                command = self._pop_pending(frame.data)
                out.append(Reply(command, frame.data))
                event = self._on_handshake_reply(command, frame.data)
                if event is not None:
                    out.append(event)
            elif isinstance(frame, ErrorFrame):
                self._on_error(frame, out)
            else:
                raise NSQProtocolError("message frame received during the handshake")

    def _on_heartbeat(self, out: list[Event]) -> None:
        # One NOP answers any number of heartbeats read at once: nsqd only needs to hear
        # from us, and a flood of them (cheap to send compressed) must not queue a NOP each.
        if not self._answered_heartbeat:
            self._answered_heartbeat = True
            self._queue(commands.NOP)
            out.append(HEARTBEAT_EVENT)

    def _pop_pending(self, data: bytes) -> str:
        try:
            return self._pending.popleft()
        except IndexError:
            raise NSQProtocolError(
                f"unexpected response with no command pending: {data[:80]!r}"
            ) from None

    def _on_error(self, frame: ErrorFrame, out: list[Event]) -> bool:
        error = frame.error()
        if not error.fatal:
            out.append(ServerWarning(error))
            return False
        command = self._pending.popleft() if self._pending else None
        self._fail(error)
        out.append(CommandFailed(command, error))
        return True

    def _steady_events(self, frames: list[Any], out: list[Event]) -> None:
        msg_class = self._message_class
        append = out.append
        for frame in frames:
            cls = frame.__class__
            if cls is msg_class:
                append(frame)
            elif cls is ResponseFrame:
                data = frame.data
                if data == HEARTBEAT:
                    self._on_heartbeat(out)
                    continue
                command = self._pop_pending(data)
                if command == "CLS" and data != CLOSE_WAIT:
                    raise NSQProtocolError(f"expected CLOSE_WAIT after CLS, got {data[:80]!r}")
                append(Reply(command, data))
            elif cls is ErrorFrame:
                if self._on_error(frame, out):
                    return  # fatal: nsqd closes; nothing after it is meaningful
            elif isinstance(frame, Message):
                append(frame)
            else:  # pragma: no cover
                raise NSQProtocolError(f"unexpected frame {frame!r}")
