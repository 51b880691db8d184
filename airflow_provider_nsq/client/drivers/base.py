"""What the blocking and asyncio drivers share about one connection, written once: the
protocol object they pump (``_core``, a :class:`ClientConnection`), one dispatch of what
it reads, the failure they record, what the connection negotiated, the messages it
delivered and their answers, and the buffers both read into.

The layers of a driver:

- :class:`DriverBase` (here): the protocol object, input, failure, negotiated settings;
- :class:`AnsweringDriver` (here): the messages delivered and their answers (RDY, FIN,
  REQ, TOUCH): what an owner of many connections (the consumer) reads of one, in the
  spirit of go-nsq's connection delegate: :meth:`~AnsweringDriver.take_messages`,
  :attr:`~AnsweringDriver.messages_waiting`, :attr:`~AnsweringDriver.in_flight`,
  :attr:`~AnsweringDriver.has_news`, ``failure``, ``alive``, ``on_wake`` and ``abort()``;
  the blocking driver adds ``fileno()`` and ``read_available()`` for a selector;
- :class:`~.blocking_driver.NSQConnection` (a socket read loop) and
  :class:`~.asyncio_driver.AsyncNSQConnection` (an asyncio Protocol with a FIFO of
  reply futures): the I/O, connecting, publishing and waiting for replies, each in its
  own way.

A driver supplies only its I/O: ``_flush`` (write what the core queued), ``_start_tls``
(wrap the transport), ``_teardown`` (drop the transport) and ``_reply_arrived`` (nsqd
answered the oldest command waiting). :meth:`DriverBase._receive` never writes: the
driver that read the bytes flushes what they made the core queue (a NOP, an AUTH).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ...protocol.connection import (
    HANDSHAKE_REPLIES,
    ClientConnection,
    CommandFailed,
    ConnectionClosed,
    ConnectionState,
    Reply,
    ServerWarning,
    StartTLS,
)
from ...protocol.errors import (
    NSQConnectionClosedError,
    NSQError,
    NSQServerError,
    NSQStateError,
    NSQValueError,
)
from ..message import Answer, NSQMessage, bound_message_class
from ..settings.client_config import ClientConfig

__all__ = [
    "CLOSED_STATES",
    "AnsweringDriver",
    "DriverBase",
    "give_back_buffer",
    "mpub_failed",
    "queue_mpub",
    "take_buffer",
    "with_context",
]

log = logging.getLogger(__name__)

CLOSED_STATES = (ConnectionState.CLOSED, ConnectionState.FAILED)
_ANSWERING_STATES = (ConnectionState.SUBSCRIBED, ConnectionState.CLOSING)

# -- the buffers both drivers read into ------------------------------------------------
#
# A connection reads into one buffer of its own (``recv_into``, or an asyncio
# BufferedProtocol): ``recv(256 KiB)`` would allocate, shrink and free a 256 KiB object
# on every read. Allocating and zeroing that buffer costs about as much as a
# connection's handshake parsing, so a closed connection leaves its buffer for the next
# one (a publisher that reconnects, a consumer's connections, a task that opens one per
# call). At most _SPARE_BUFFERS wait.

#: Bytes per buffer: what one read may take (a consumer's reads of many messages).
BUFFER_SIZE = 256 * 1024
_SPARE_BUFFERS = 8
_spare: list[tuple[bytearray, memoryview]] = []


def take_buffer() -> tuple[bytearray, memoryview]:
    """A buffer (and a view of it) for a connection that opens."""
    try:
        return _spare.pop()  # atomic: threads may open connections at once
    except IndexError:
        buffer = bytearray(BUFFER_SIZE)
        return buffer, memoryview(buffer)


def give_back_buffer(buffer: bytearray, view: memoryview) -> None:
    """``buffer`` is no longer read into (its connection is closed)."""
    if len(_spare) < _SPARE_BUFFERS:
        _spare.append((buffer, view))


# -- what both drivers' publishing says -------------------------------------------------


def _idle_limit_s(config: ClientConfig) -> float | None:
    """Seconds of client silence after which nsqd may already have dropped us.

    nsqd closes a connection it has not read a command from for 2 x heartbeat_interval
    (docs/nsqd-facts.md section 7); we stop trusting it a margin before that.
    """
    hb = config.effective_heartbeat_interval_ms
    if hb <= 0:
        return None
    margin = min(hb / 2, 5000)
    return (2 * hb - margin) / 1000


def with_context(exc: NSQError, suffix: str) -> NSQError:
    """A copy of ``exc`` (same class, same code) whose message ends with ``suffix``."""
    if isinstance(exc, NSQServerError):
        return type(exc)(exc.code, f"{exc.description} {suffix}".strip())
    return type(exc)(f"{exc} {suffix}")


def queue_mpub(core: ClientConnection, topic: str, bodies: Iterable[bytes]) -> list[int]:
    """Queue ``bodies`` as as few MPUB frames as fit; each frame's message count."""
    counts = core.mpub_split(topic, bodies)
    if not counts:
        raise NSQValueError("multi_publish needs at least one message")
    return counts


def mpub_failed(exc: NSQError, done: int, counts: Sequence[int]) -> NSQError:
    """The error to raise when MPUB frame ``done`` failed: it says what nsqd took."""
    if not done:
        return exc
    accepted = f"{done} MPUB frames with {sum(counts[:done])} messages"
    return with_context(exc, f"(nsqd had accepted {accepted} before)")


class DriverBase:
    """The protocol object of one connection to nsqd and what comes in on it."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self._core: ClientConnection | None = None
        self._messages: list[NSQMessage] = []  # delivered, not yet handed to the caller
        self._failure: NSQError | None = None
        self._in_flight = 0  # delivered on the current connection, not yet FIN'd or REQ'd
        self._subscribed = False
        self._last_write = 0.0
        self._idle_limit = _idle_limit_s(self.config)
        self.warnings: list[NSQServerError] = []  # non-fatal E_*_FAILED frames
        self.connects = 0  # how many times a TCP connection was opened
        #: When nsqd was last heard from (``time.monotonic()``; any bytes, heartbeats and
        #: OK fast paths included; 0.0: never), set by each driver's read: an owner
        #: tells a quiet nsqd from a silent one.
        self.last_received = 0.0
        #: Called (no arguments) when messages arrive or the connection fails: an owner
        #: waiting on several connections learns there is something to look at.
        self.on_wake: Callable[[], None] | None = None

    def __repr__(self) -> str:
        state = self._core.state.value if self._core else "not connected"
        return f"<{type(self).__name__} {self.config.address} {state}>"

    @property
    def _peer(self) -> str:
        """Who this connection talks to, for error messages."""
        return f"nsqd at {self.config.address}"

    # -- what the connection negotiated -------------------------------------------

    @property
    def connected(self) -> bool:
        return self._core is not None and self._core.state not in CLOSED_STATES

    @property
    def server_info(self) -> dict[str, Any]:
        """The IDENTIFY response (``{"response": "OK"}`` without feature negotiation)."""
        return dict(self._require_core().server_info)

    @property
    def auth_info(self) -> dict[str, Any] | None:
        return self._core.auth_info if self._core else None

    @property
    def tls(self) -> bool:
        return bool(self._core and self._core.tls)

    @property
    def compression(self) -> str | None:
        return self._core.compression if self._core else None

    @property
    def max_rdy_count(self) -> int:
        return self._require_core().max_rdy_count

    # -- how it ended ---------------------------------------------------------------

    @property
    def failure(self) -> NSQError | None:
        """The error that ended the connection (the first one), or None."""
        return self._failure

    @property
    def alive(self) -> bool:
        """The connection can still answer its messages: open, and no failure."""
        core = self._core  # not self.connected: an owner asks this on every wait
        return self._failure is None and core is not None and core.state not in CLOSED_STATES

    def abort(self) -> None:
        """Drop the connection at once, without answering anything: nsqd redelivers what
        it had in flight here after its msg_timeout. For a connection that already
        failed; ``close()`` is the orderly way."""
        self._teardown()

    def _fail(self, error: NSQError) -> None:
        """The connection failed with ``error``; the first failure is the one reported."""
        if self._failure is None:
            self._failure = error
        if self.on_wake is not None:
            self.on_wake()

    def _closed_error(self, pending: Sequence[str]) -> NSQConnectionClosedError:
        text = f"{self._peer} closed the connection"
        if pending:
            text += f" before answering {', '.join(pending)}: the outcome is unknown"
        return NSQConnectionClosedError(text)

    # -- what each driver supplies --------------------------------------------------

    def _flush(self) -> None:
        """Write what the core has queued."""
        raise NotImplementedError

    def _start_tls(self) -> None:
        """Run (or start) the TLS client handshake, then call ``core.tls_established()``."""
        raise NotImplementedError

    def _reply_arrived(self, data: bytes) -> None:
        """nsqd answered the oldest command still waiting for its reply."""
        raise NotImplementedError

    def _teardown(self) -> None:
        """Drop the transport and the protocol state (no REQ, no waiting)."""
        raise NotImplementedError

    # -- input: one dispatch for both drivers -----------------------------------------

    def _receive(self, data: bytes | memoryview) -> bool:
        """Feed bytes read from the transport (``b""``: EOF) to the core and act on the
        events they complete; True when messages arrived (the owner's ``on_wake`` was
        called; a driver's own waiting reader is the driver's to wake). The caller then
        flushes what the core queued (a NOP for a heartbeat, AUTH once IDENTIFY asked for
        it). Invalid bytes are recorded as the failure and raised."""
        core = self._core
        if core is None:
            return False
        core.receive_data(data)
        try:
            messages, events = core.messages_and_events()
        except NSQError as exc:
            self._fail(exc)
            raise
        if messages:
            self._messages += messages  # type: ignore[arg-type]
            self._in_flight += len(messages)
            if self.on_wake is not None:
                self.on_wake()
        for event in events:
            if isinstance(event, Reply):
                if event.command not in HANDSHAKE_REPLIES:
                    self._reply_arrived(event.data)
            elif isinstance(event, ServerWarning):
                log.warning("nsqd at %s: %s", self.config.address, event.error)
                self.warnings.append(event.error)
            elif isinstance(event, CommandFailed):
                self._fail(event.error)
            elif isinstance(event, ConnectionClosed):
                self._fail(self._closed_error(event.pending))
            elif isinstance(event, StartTLS):
                self._start_tls()
            # Heartbeat: the core queued the NOP; the caller writes it.
        return bool(messages)

    # -- shared bookkeeping -----------------------------------------------------------

    def _new_core(self) -> ClientConnection:
        """A fresh protocol core for a new TCP connection, counted in ``connects``."""
        cfg = self.config
        self.connects += 1
        self._core = ClientConnection(
            identify=cfg.identify_fields,
            auth_secret=cfg.auth_secret.encode() if cfg.auth_secret else None,
            max_msg_size=cfg.max_msg_size,
            max_body_size=cfg.max_body_size,
            max_req_timeout_ms=cfg.max_req_timeout_ms,
        )
        return self._core

    def _require_core(self) -> ClientConnection:
        core = self._core
        if core is None:
            raise NSQStateError(f"not connected to nsqd at {self.config.address}: call connect()")
        if core.state in CLOSED_STATES:
            raise NSQConnectionClosedError(
                f"the connection to nsqd at {self.config.address} is closed"
                + (f" ({self._failure})" if self._failure else "")
            )
        return core

    def _reset_state(self) -> None:
        # The core is dropped, not closed: nothing else holds it (an asyncio TLS upgrade
        # under way tells by identity that its core was replaced).
        self._core = None
        self._messages = []
        self._failure = None
        self._in_flight = 0
        self._subscribed = False


class AnsweringDriver(DriverBase):
    """A connection's deliveries: the messages it holds, how many nsqd counts in flight
    against its RDY, and the answers, each written on this connection."""

    _bound_class: type[NSQMessage] | None = None

    @property
    def has_news(self) -> bool:
        """Something for the owner to look at: messages to take, or the connection is no
        longer ``alive``."""
        core = self._core
        return (
            bool(self._messages)
            or self._failure is not None
            or core is None
            or core.state in CLOSED_STATES
        )

    @property
    def in_flight(self) -> int:
        """Messages delivered on this connection and not yet FIN'd or REQ'd (taken or
        not): what nsqd counts against this connection's RDY."""
        return self._in_flight

    @property
    def messages_waiting(self) -> int:
        """Messages delivered and not yet taken (:meth:`take_messages`)."""
        return len(self._messages)

    def take_messages(self) -> list[NSQMessage]:
        """The messages delivered and not yet taken; the caller owns them now (they stay
        in flight until answered)."""
        messages = self._messages
        self._messages = []
        return messages

    def _message_class(self) -> type[NSQMessage]:
        """The class this connection's messages decode into: it carries the connection,
        so a message costs no assignment per delivery. Made at the first SUB (a class
        costs more to make than a connection's handshake parsing; a publisher never
        needs one)."""
        cls = self._bound_class
        if cls is None:
            cls = self._bound_class = bound_message_class(self)
        return cls

    # -- commands without a reply ---------------------------------------------------

    def ready(self, count: int) -> None:
        """RDY: how many messages may be in flight to this connection at once."""
        self._require_core().rdy(count)
        self._flush()

    def finish(self, *messages: NSQMessage) -> None:
        """FIN messages (one write for all of them)."""
        self._respond_all(messages, "FIN")
        self._flush()

    def requeue(self, *messages: NSQMessage, delay_ms: int = 0) -> None:
        """REQ messages: redelivered after ``delay_ms`` with attempts + 1."""
        self._respond_all(messages, "REQ", delay_ms)
        self._flush()

    def touch(self, *messages: NSQMessage) -> None:
        """TOUCH messages: restart their in-flight timeout."""
        self._respond_all(messages, "TOUCH")
        self._flush()

    def nop(self) -> None:
        self._require_core().nop()
        self._flush()

    def respond(self, message: NSQMessage, command: Answer, delay_ms: int = 0) -> None:
        """Answer one message: what ``message.finish()``, ``requeue()`` and ``touch()``
        call. Written at once by the blocking driver; within this event-loop iteration by
        the asyncio one, so the answers given in one iteration go out in one write."""
        self._respond_all((message,), command, delay_ms)
        self._flush_soon()

    def _flush_soon(self) -> None:
        """Write what the core has queued, now or within this event-loop iteration."""
        self._flush()

    def _respond_all(self, messages: Sequence[NSQMessage], command: str, delay_ms: int = 0) -> None:
        """Queue FIN, REQ or TOUCH for every message not yet FIN'd or REQ'd (one write)."""
        core = self._require_core()
        todo = [m for m in messages if not m.responded]
        if not todo:
            return
        if command == "FIN":
            core.fin_many([m.raw_id for m in todo])
        elif command == "REQ":
            for m in todo:
                core.req(m.raw_id, delay_ms)
        else:
            for m in todo:
                core.touch(m.raw_id)
            return
        for m in todo:
            m.responded = True
        self._in_flight = max(self._in_flight - len(todo), 0)

    def _requeue_unanswered(self) -> None:
        """Before closing a subscribed connection: REQ what was delivered and never
        taken, so nsqd redelivers it at once instead of after msg_timeout (it does not
        requeue on disconnect). Messages already taken are their owner's to answer (the
        consumer REQs those it holds before it closes)."""
        core = self._core
        if core is None or core.state not in _ANSWERING_STATES:
            return
        held = [m for m in self._messages if not m.responded]
        try:
            if held:
                self._respond_all(held, "REQ")
            self._flush()
        except NSQError:
            pass  # closing anyway; nsqd's msg_timeout redelivers them
