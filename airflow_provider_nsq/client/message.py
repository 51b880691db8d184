"""``NSQMessage``: a delivered message that knows the connection it came on."""

from __future__ import annotations

from typing import Any, Protocol

from ..protocol.frames import Message


class _Responder(Protocol):
    def _respond(self, message: NSQMessage, command: str, delay_ms: int = 0) -> None: ...


class NSQMessage(Message):
    """A message taken off a channel: ``id`` (str), ``body`` (bytes), ``attempts``,
    ``timestamp`` (ns since the epoch, set at publish time).

    ``finish()``, ``requeue()`` and ``touch()`` answer nsqd on the connection that
    delivered it. As in go-nsq, finishing or requeueing twice is harmless: only the first
    response is sent.
    """

    __slots__ = ("_responded",)

    # The connection that delivered the message. Each connection decodes into its own
    # subclass (bound_message_class) carrying itself here, so decoding a message costs
    # no per-message assignment.
    _conn: Any = None

    def __init__(self, timestamp: int, attempts: int, raw_id: bytes, body: bytes) -> None:
        self.timestamp = timestamp
        self.attempts = attempts
        self.raw_id = raw_id
        self.body = body
        self._responded = False

    @property
    def nsqd(self) -> str | None:
        """``host:port`` of the nsqd that delivered it (``id`` is unique per nsqd, so the
        pair identifies the message); None for a message built by hand."""
        conn = self._conn
        return conn.config.address if conn is not None else None

    @property
    def responded(self) -> bool:
        """True once FIN or REQ was sent for this delivery."""
        return self._responded

    def finish(self) -> None:
        """FIN: nsqd forgets the message."""
        if not self._responded:
            self._conn._respond(self, "FIN")

    def requeue(self, delay_ms: int = 0) -> None:
        """REQ: nsqd redelivers it after ``delay_ms`` with attempts + 1."""
        if not self._responded:
            self._conn._respond(self, "REQ", delay_ms)

    def touch(self) -> None:
        """TOUCH: restart this message's in-flight timeout."""
        if not self._responded:
            self._conn._respond(self, "TOUCH")


def bound_message_class(connection: _Responder) -> type[NSQMessage]:
    """An NSQMessage subclass whose messages answer on ``connection``."""
    return type("NSQMessage", (NSQMessage,), {"__slots__": (), "_conn": connection})
