"""A consumer's life as a state table (as h11's ``_state.py`` keeps HTTP's): every call
that changes or needs the state is one lookup here, and an illegal one is one clear
error naming the call and the state.

::

                 consume                    window ended
    NEW ──────────────────────► WINDOWING ──────────────► IDLE
     │                              ▲                      │
     │ start                        └────── consume ───────┘
     ▼            started
    STARTING ───────────────► STREAMING ⟲ read, pump, set_max_in_flight

    any state ── close ──► CLOSING ── closed ──► CLOSED   (close again: nothing to do)

``touch_held`` is possible in every state (it TOUCHes what is held, if anything). A
consumer runs windows or one stream, never both; a window that fails still ends
(IDLE), a start that fails does not (close that consumer).
"""

from __future__ import annotations

import enum
from contextvars import ContextVar, Token

from ...protocol.errors import NSQStateError


class ConsumerState(enum.Enum):
    """Where a consumer is in its life."""

    NEW = "new"
    WINDOWING = "windowing"  # a consume window is running
    IDLE = "idle"  # between windows
    STARTING = "starting"  # start() is connecting
    STREAMING = "streaming"
    CLOSING = "closing"
    CLOSED = "closed"


NEW, WINDOWING, IDLE = ConsumerState.NEW, ConsumerState.WINDOWING, ConsumerState.IDLE
STARTING, STREAMING = ConsumerState.STARTING, ConsumerState.STREAMING
CLOSING, CLOSED = ConsumerState.CLOSING, ConsumerState.CLOSED

#: (state, call) -> the state after it. A pair that is not here is an illegal call.
TRANSITIONS: dict[tuple[ConsumerState, str], ConsumerState] = {
    (NEW, "consume"): WINDOWING,
    (IDLE, "consume"): WINDOWING,
    (WINDOWING, "window ended"): IDLE,
    (NEW, "start"): STARTING,
    (STARTING, "started"): STREAMING,
    (STREAMING, "read"): STREAMING,
    (STREAMING, "pump"): STREAMING,
    (STREAMING, "set_max_in_flight"): STREAMING,
    **{(state, "touch_held"): state for state in ConsumerState},
    **{(state, "close"): CLOSING for state in (NEW, WINDOWING, IDLE, STARTING, STREAMING)},
    (CLOSING, "close"): CLOSING,
    (CLOSED, "close"): CLOSED,
    (CLOSING, "closed"): CLOSED,
}

_WINDOWS_OR_STREAM = "a consumer runs windows or one stream"
#: Why a call is illegal in a state, for the error.
_WHY: dict[tuple[ConsumerState, str], str] = {
    (WINDOWING, "consume"): "a window is running: one at a time",
    (STARTING, "consume"): f"{_WINDOWS_OR_STREAM}: this one streams",
    (STREAMING, "consume"): f"{_WINDOWS_OR_STREAM}: this one streams",
    (WINDOWING, "start"): f"{_WINDOWS_OR_STREAM}: use a new consumer for the stream",
    (IDLE, "start"): f"{_WINDOWS_OR_STREAM}: use a new consumer for the stream",
    (STARTING, "start"): "start() was called already",
    (STREAMING, "start"): "start() was called already",
}
_WHY_IN: dict[ConsumerState, str] = {
    NEW: "call start() before read(), pump() or set_max_in_flight()",
    WINDOWING: "call start() before read(), pump() or set_max_in_flight()",
    IDLE: "call start() before read(), pump() or set_max_in_flight()",
    STARTING: "start() did not complete: close this consumer",
    CLOSING: "the consumer is closed",
    CLOSED: "the consumer is closed",
}


#: The calls a holder makes for its consumer (the consumer's public methods that do I/O).
HELD_CALLS = frozenset(
    {"consume", "start", "read", "pump", "set_max_in_flight", "touch_held", "close"}
)
#: Who is calling the consumer now: a holder sets itself here around each of its calls
#: (:class:`CallingAs`). A context variable, so another thread or another asyncio task
#: that calls the consumer meanwhile is not taken for the holder.
_CALLER: ContextVar[object | None] = ContextVar("nsq_consumer_caller", default=None)


class CallingAs:
    """``with CallingAs(holder):`` the consumer calls made inside are the holder's.

    One instance per ``with``: calls of one holder may overlap (an asyncio read waiting
    while another task TOUCHes), and each restores its own task's context."""

    __slots__ = ("_token", "holder")

    def __init__(self, holder: object) -> None:
        self.holder = holder
        self._token: Token[object | None] | None = None

    def __enter__(self) -> None:
        self._token = _CALLER.set(self.holder)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _CALLER.reset(self._token)
            self._token = None


class Lifecycle:
    """A consumer's :class:`ConsumerState`, changed only through :meth:`do`, and who
    holds it (:attr:`holder`: while one does, only it may call the consumer)."""

    __slots__ = ("holder", "state")

    def __init__(self) -> None:
        self.state = NEW
        self.holder: object | None = None

    def do(self, call: str) -> ConsumerState:
        """Move the state on for ``call`` (a public method's name, or an internal
        ``"window ended"``, ``"started"``, ``"closed"``): the state before it.
        :class:`NSQStateError` naming both when the call is not possible now, or naming
        the holder when a held consumer is called by anyone else."""
        holder = self.holder
        if holder is not None and call in HELD_CALLS and _CALLER.get() is not holder:
            raise NSQStateError(
                f"{call}() was called on a consumer that {holder!r} holds: while a holder "
                "holds a consumer, only the holder calls it (it reads, TOUCHes, answers "
                "and closes); call the holder instead"
            )
        before = self.state
        try:
            self.state = TRANSITIONS[before, call]
        except KeyError:
            why = _WHY.get((before, call)) or _WHY_IN.get(before, "not possible")
            raise NSQStateError(
                f"{call}() is not possible while the consumer is {before.value}: {why}"
            ) from None
        return before
