"""The messages a connection delivered and their answers: RDY, FIN, REQ, TOUCH.

What an owner of many connections (the consumer) reads of one is public and small, in
the spirit of go-nsq's connection delegate: :meth:`AnsweringDriver.take_messages`,
:attr:`~AnsweringDriver.messages_waiting`, :attr:`~AnsweringDriver.in_flight`,
:attr:`~AnsweringDriver.has_news`, and from the layer below ``failure``, ``alive``,
``on_wake`` and ``abort()``; the blocking driver adds ``fileno()`` and
``read_available()`` for a selector.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...protocol.connection import ConnectionState
from ...protocol.errors import NSQError
from ..message import Answer, NSQMessage, bound_message_class
from .base import CLOSED_STATES, DriverBase

ANSWERING_STATES = (ConnectionState.SUBSCRIBED, ConnectionState.CLOSING)


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
        """Before closing: REQ what was delivered and never taken, so nsqd redelivers it
        at once instead of after msg_timeout (it does not requeue on disconnect).
        Messages already taken are their owner's to answer (the consumer REQs those it
        holds before it closes)."""
        core = self._core
        if core is None or core.state not in ANSWERING_STATES:
            return
        held = [m for m in self._messages if not m.responded]
        try:
            if held:
                self._respond_all(held, "REQ")
            self._flush()
        except NSQError:
            pass  # closing anyway; nsqd's msg_timeout redelivers them
