"""What the blocking and asyncio drivers share: the protocol core they pump, the messages
they hold, and the synchronous half of the API (RDY, FIN, REQ, TOUCH, NOP and the
connection's properties). Each driver adds its own I/O: ``_flush`` and the waiting."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..protocol.connection import ClientConnection, ConnectionState
from ..protocol.errors import (
    NSQConnectionClosedError,
    NSQError,
    NSQServerError,
    NSQStateError,
)
from .config import ClientConfig
from .message import NSQMessage, bound_message_class
from .window import AckMode, idle_limit_s, respond_all, settle_window

CLOSED_STATES = (ConnectionState.CLOSED, ConnectionState.FAILED)
ANSWERING_STATES = (ConnectionState.SUBSCRIBED, ConnectionState.CLOSING)


class DriverBase:
    """Base of :class:`NSQConnection` and :class:`AsyncNSQConnection`."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self._core: ClientConnection | None = None
        self._messages: list[NSQMessage] = []  # delivered, not yet handed to the caller
        self._held: list[NSQMessage] = []  # handed out by a manual window, maybe unanswered
        self._failure: NSQError | None = None
        self._subscribed = False
        self._last_write = 0.0
        self._idle_limit = idle_limit_s(self.config)
        # Messages decode straight into a class that knows this connection.
        self._message_class = bound_message_class(self)
        self.warnings: list[NSQServerError] = []  # non-fatal E_*_FAILED frames
        self.connects = 0  # how many times a TCP connection was opened

    def __repr__(self) -> str:
        state = self._core.state.value if self._core else "not connected"
        return f"<{type(self).__name__} {self.config.address} {state}>"

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
        respond_all(self._require_core(), messages, command, delay_ms)

    def _flush(self) -> None:
        raise NotImplementedError

    def _respond(self, message: NSQMessage, command: str, delay_ms: int = 0) -> None:
        """``message.finish()`` and friends land here (see NSQMessage)."""
        raise NotImplementedError

    # -- shared bookkeeping -----------------------------------------------------------

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
        held = [m for m in (*self._held, *self._messages) if not m._responded]
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
        self._subscribed = False

    def _end_window(
        self,
        got: list[NSQMessage],
        max_messages: int,
        ack: AckMode,
        requeue_delay_ms: int,
    ) -> list[NSQMessage]:
        """After CLS: settle the window's messages and the stragglers nsqd sent first."""
        stragglers = self._messages
        self._messages = []
        got = settle_window(self, got, stragglers, max_messages, ack, requeue_delay_ms)
        if ack == "manual":
            self._held = got  # the caller answers them; close() REQs what is left
        return got
