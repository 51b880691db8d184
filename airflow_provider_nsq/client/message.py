"""``NSQMessage``: a delivered message that knows the connection it came on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Literal, Protocol

from ..protocol.errors import NSQError
from ..protocol.frames import Message

log = logging.getLogger(__name__)

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


_CONNECTION = attrgetter("connection")


def _alive(conn: Any) -> bool:
    return conn is not None and conn.alive


def by_connection(messages: Sequence[NSQMessage]) -> list[tuple[Any, Sequence[NSQMessage]]]:
    """``messages`` grouped by the connection that delivered them (each group in their
    order), leaving out (with a warning) those whose connection is gone: nsqd redelivers
    them after its msg_timeout, and no other connection may answer them."""
    conns = set(map(_CONNECTION, messages))  # one pass in C: usually a single connection
    groups: dict[Any, Sequence[NSQMessage]]
    if len(conns) == 1:
        groups = {conns.pop(): messages}
    else:
        lists: dict[Any, list[NSQMessage]] = {conn: [] for conn in conns}
        for m in messages:
            lists[m.connection].append(m)
        groups = dict(lists)
    lost = sum(len(ms) for conn, ms in groups.items() if not _alive(conn))
    if lost:
        log.warning(
            "%s message(s) came on a connection that is gone: nsqd redelivers them "
            "after its msg_timeout",
            lost,
        )
    return [(conn, ms) for conn, ms in groups.items() if _alive(conn)]


def on_live_connections(messages: Sequence[NSQMessage]) -> list[NSQMessage]:
    """The messages whose connection is still alive (only those can be answered)."""
    return [m for m in messages if _alive(m.connection)]


def answer_or_log(message: NSQMessage, what: str, respond: Callable[[], None]) -> None:
    """FIN or REQ one message (``respond`` does it, ``what`` names it in the log); a
    connection that is gone is logged, not raised: nsqd redelivers its messages after
    msg_timeout, and nothing else may answer them."""
    try:
        respond()
    except NSQError as exc:
        log.warning(
            "Could not %s message %s on %s (%s): nsqd redelivers it after its msg_timeout",
            what,
            message.id,
            message.nsqd,
            exc,
        )
