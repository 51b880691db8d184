"""``NSQMessage``: a delivered message that knows the connection it came on."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from ..protocol.frames import Message

#: How a message is answered: FIN (done), REQ (redeliver), TOUCH (restart its timeout).
Answer = Literal["FIN", "REQ", "TOUCH"]


class Responder(Protocol):
    """What a message needs of the connection that delivered it."""

    def respond(self, message: NSQMessage, command: Answer, delay_ms: int = 0) -> None: ...


class NSQMessage(Message):
    """A message taken off a channel: ``id`` (str), ``body`` (bytes), ``attempts``,
    ``timestamp`` (ns since the epoch, set at publish time).

    ``finish()``, ``requeue()`` and ``touch()`` answer nsqd on the connection that
    delivered it (:attr:`connection`). As in go-nsq, finishing or requeueing twice is
    harmless: only the first response is sent. :attr:`responded` is True once FIN or
    REQ was sent for this delivery (set by the connection; read it, do not set it).
    """

    __slots__ = ("responded",)

    #: The connection that delivered the message (None for a message built by hand).
    #: Each connection decodes into its own subclass (bound_message_class) carrying
    #: itself here, so decoding a message costs no per-message assignment.
    connection: Any = None

    def __init__(self, timestamp: int, attempts: int, raw_id: bytes, body: bytes) -> None:
        self.timestamp = timestamp
        self.attempts = attempts
        self.raw_id = raw_id
        self.body = body
        self.responded = False

    @property
    def nsqd(self) -> str | None:
        """``host:port`` of the nsqd that delivered it (``id`` is unique per nsqd, so the
        pair identifies the message); None for a message built by hand."""
        conn = self.connection
        return conn.config.address if conn is not None else None

    def finish(self) -> None:
        """FIN: nsqd forgets the message."""
        if not self.responded:
            self.connection.respond(self, "FIN")

    def requeue(self, delay_ms: int = 0) -> None:
        """REQ: nsqd redelivers it after ``delay_ms`` with attempts + 1."""
        if not self.responded:
            self.connection.respond(self, "REQ", delay_ms)

    def touch(self) -> None:
        """TOUCH: restart this message's in-flight timeout."""
        if not self.responded:
            self.connection.respond(self, "TOUCH")


def bound_message_class(connection: Responder) -> type[NSQMessage]:
    """An NSQMessage subclass whose messages answer on ``connection``."""
    return type("NSQMessage", (NSQMessage,), {"__slots__": (), "connection": connection})
