"""What the blocking and asyncio drivers share: the protocol core they pump, one dispatch
of its events, the failure they record, the messages they hold, and the synchronous half
of the API (RDY, FIN, REQ, TOUCH, NOP and the connection's properties).

A driver adds only its I/O: ``_flush`` (write what the core queued), ``_start_tls``
(wrap the transport), ``_teardown`` (drop the transport) and how a caller waits
(``_reply_arrived`` / ``_messages_arrived`` tell it that something came).

What an owner of many connections (the consumer) reads of one is public and small,
in the spirit of go-nsq's connection delegate: :meth:`DriverBase.take_messages`,
:attr:`~DriverBase.messages_waiting`, :attr:`~DriverBase.in_flight`,
:attr:`~DriverBase.failure`, :attr:`~DriverBase.alive`, :attr:`~DriverBase.has_news`,
the :attr:`~DriverBase.on_wake`
callback and :meth:`~DriverBase.abort`; the blocking driver adds ``fileno()`` and
``read_available()`` for a selector.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from ..protocol.connection import (
    HANDSHAKE_REPLIES,
    ClientConnection,
    CommandFailed,
    ConnectionClosed,
    ConnectionState,
    Reply,
    ServerWarning,
    StartTLS,
)
from ..protocol.errors import (
    NSQConnectionClosedError,
    NSQError,
    NSQServerError,
    NSQStateError,
    NSQValueError,
)
from .config import ClientConfig
from .message import Answer, NSQMessage, bound_message_class
from .window import AckMode, Window, check_window, settle_window

log = logging.getLogger(__name__)

CLOSED_STATES = (ConnectionState.CLOSED, ConnectionState.FAILED)
ANSWERING_STATES = (ConnectionState.SUBSCRIBED, ConnectionState.CLOSING)


def idle_limit_s(config: ClientConfig) -> float | None:
    """Seconds of client silence after which nsqd may already have dropped us.

    nsqd closes a connection it has not read a command from for 2 x heartbeat_interval
    (tests/conformance/transcripts/FACTS.md section 7); we stop trusting it a margin before that.
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


# What ``consume`` returns: the messages (blocking), or a coroutine of them (asyncio).
WindowResult = TypeVar("WindowResult")


class DriverBase(Generic[WindowResult]):
    """Base of :class:`NSQConnection` and :class:`AsyncNSQConnection`."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self._core: ClientConnection | None = None
        self._messages: list[NSQMessage] = []  # delivered, not yet handed to the caller
        self._held: list[NSQMessage] = []  # handed out by a manual window, maybe unanswered
        self._failure: NSQError | None = None
        self._in_flight = 0  # delivered on the current connection, not yet FIN'd or REQ'd
        self._subscribed = False
        self._last_write = 0.0
        self._idle_limit = idle_limit_s(self.config)
        # Messages decode straight into a class that knows this connection.
        self._message_class = bound_message_class(self)
        self.warnings: list[NSQServerError] = []  # non-fatal E_*_FAILED frames
        self.connects = 0  # how many times a TCP connection was opened
        #: When nsqd was last heard from (``time.monotonic()``; any bytes, heartbeats
        #: included; 0.0: never): an owner tells a quiet nsqd from a silent one.
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

    # -- what an owner of the connection reads ------------------------------------------

    @property
    def failure(self) -> NSQError | None:
        """The error that ended the connection (the first one), or None."""
        return self._failure

    @property
    def alive(self) -> bool:
        """The connection can still answer its messages: open, and no failure."""
        core = self._core  # not self.connected: an owner asks this on every wait
        return self._failure is None and core is not None and core.state not in CLOSED_STATES

    @property
    def has_news(self) -> bool:
        """Something for the owner to look at: messages to take, or the connection is no
        longer :attr:`alive`."""
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

    def abort(self) -> None:
        """Drop the connection at once, without answering anything: nsqd redelivers what
        it had in flight here after its msg_timeout. For a connection that already
        failed; :meth:`close` is the orderly way."""
        self._teardown()

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

    # -- a consume window ------------------------------------------------------------

    def consume(
        self,
        topic: str,
        channel: str,
        *,
        max_messages: int = 1,
        timeout: float = 5.0,
        ack: AckMode = "fin",
        requeue_delay_ms: int = 0,
    ) -> WindowResult:
        """One subscribe window: SUB, RDY, collect up to ``max_messages`` or until
        ``timeout`` seconds pass, then stop delivery (CLS). Await it on the asyncio driver.

        ``ack`` decides what happens to the messages: ``"fin"`` FINs them before
        returning, ``"req"`` REQs them (a peek; attempts + 1), ``"manual"`` hands them back
        unanswered: FIN or REQ them on this connection (``finish``/``requeue``) and then
        ``close()`` it; anything still unanswered at ``close()`` is REQ'd.
        """
        check_window(max_messages, timeout, ack, self.max_rdy_count)
        return self._run_window(
            Window(topic, channel, max_messages, timeout, ack, requeue_delay_ms)
        )

    def _run_window(self, window: Window) -> WindowResult:
        """SUB, RDY, read until the window ends, CLS, then :meth:`_end_window`."""
        raise NotImplementedError

    def _end_window(self, window: Window) -> list[NSQMessage]:
        """After CLS: settle the window's messages and the stragglers nsqd sent first."""
        got = settle_window(
            self,
            window.got,
            self.take_messages(),
            window.max_messages,
            window.ack,
            window.requeue_delay_ms,
        )
        if window.ack == "manual":
            self._held = got  # the caller answers them; close() REQs what is left
        return got

    # -- what each driver supplies --------------------------------------------------

    def _flush(self) -> None:
        """Write what the core has queued."""
        raise NotImplementedError

    def _flush_soon(self) -> None:
        """Write what the core has queued, now or within this event-loop iteration."""
        self._flush()

    def _start_tls(self) -> None:
        """Run (or start) the TLS client handshake, then call ``core.tls_established()``."""
        raise NotImplementedError

    def _reply_arrived(self, data: bytes) -> None:
        """nsqd answered the oldest command still waiting for its reply."""
        raise NotImplementedError

    def _teardown(self) -> None:
        """Drop the transport and the protocol state (no REQ, no waiting)."""
        raise NotImplementedError

    def _messages_arrived(self) -> None:
        """``self._messages`` grew (a waiting reader may wake)."""
        if self.on_wake is not None:
            self.on_wake()

    def _fail(self, error: NSQError) -> None:
        """The connection failed with ``error``; the first failure is the one reported."""
        if self._failure is None:
            self._failure = error
        if self.on_wake is not None:
            self.on_wake()

    def respond(self, message: NSQMessage, command: Answer, delay_ms: int = 0) -> None:
        """Answer one message: what ``message.finish()``, ``requeue()`` and ``touch()``
        call. Written at once by the blocking driver; within this event-loop iteration by
        the asyncio one, so the answers given in one iteration go out in one write."""
        self._respond_all((message,), command, delay_ms)
        self._flush_soon()

    # -- input: one dispatch for both drivers -----------------------------------------

    def _receive(self, data: bytes | memoryview) -> None:
        """Feed bytes read from the transport (``b""``: EOF) to the core and act on the
        events they complete. Invalid bytes are recorded as the failure and raised."""
        core = self._core
        if core is None:
            return
        self.last_received = time.monotonic()
        core.receive_data(data)
        try:
            messages, events = core.messages_and_events()
        except NSQError as exc:
            self._fail(exc)
            raise
        if messages:
            self._messages += messages  # type: ignore[arg-type]
            self._in_flight += len(messages)
            self._messages_arrived()
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
            # Heartbeat: the core queued the NOP, written below.
        if core.state not in CLOSED_STATES:
            self._flush()  # the NOP for a heartbeat; AUTH once IDENTIFY asked for it

    def _closed_error(self, pending: Sequence[str]) -> NSQConnectionClosedError:
        text = f"{self._peer} closed the connection"
        if pending:
            text += f" before answering {', '.join(pending)}: the outcome is unknown"
        return NSQConnectionClosedError(text)

    # -- publishing ------------------------------------------------------------------

    @staticmethod
    def _queue_mpub(core: ClientConnection, topic: str, bodies: Iterable[bytes]) -> list[int]:
        """Queue ``bodies`` as as few MPUB frames as fit; each frame's message count."""
        counts = core.mpub_split(topic, bodies)
        if not counts:
            raise NSQValueError("multi_publish needs at least one message")
        return counts

    @staticmethod
    def _mpub_failed(exc: NSQError, done: int, counts: Sequence[int]) -> NSQError:
        """The error to raise when MPUB frame ``done`` failed: it says what nsqd took."""
        if not done:
            return exc
        accepted = f"{done} MPUB frames with {sum(counts[:done])} messages"
        return with_context(exc, f"(nsqd had accepted {accepted} before)")

    # -- shared bookkeeping -----------------------------------------------------------

    def _new_core(self) -> ClientConnection:
        """A fresh protocol core for a new TCP connection, counted in ``connects``."""
        cfg = self.config
        self.connects += 1
        self._core = ClientConnection(
            identify=cfg.identify_fields(),
            auth_secret=cfg.auth_secret.encode() if cfg.auth_secret else None,
            max_msg_size=cfg.max_msg_size,
            max_body_size=cfg.max_body_size,
            max_req_timeout_ms=cfg.max_req_timeout_ms,
            message_class=self._message_class,
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

    def _requeue_unanswered(self) -> None:
        """Before closing: REQ what was delivered and never answered, so nsqd redelivers
        it at once instead of after msg_timeout (it does not requeue on disconnect)."""
        core = self._core
        if core is None or core.state not in ANSWERING_STATES:
            return
        held = [m for m in (*self._held, *self._messages) if not m.responded]
        try:
            if held:
                self._respond_all(held, "REQ")
            self._flush()
        except NSQError:
            pass  # closing anyway; nsqd's msg_timeout redelivers them

    def _reset_state(self) -> None:
        if self._core is not None:
            self._core.close()
        self._core = None
        self._messages = []
        self._held = []
        self._failure = None
        self._in_flight = 0
        self._subscribed = False
