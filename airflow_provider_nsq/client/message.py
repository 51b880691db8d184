"""``NSQMessage``: a delivered message that knows the connection it came on; answering
messages in batches (one write per connection); and the JSON-safe record DAGs see of a
message, with the user filters that judge it.

The sensor pushes records to XCom and the event trigger puts them in asset events, so
DAGs see one shape (the same keys, always) whichever way a message reached them. A
``message_filter`` is a ``callable(record) -> bool``; in a trigger it travels as a
dotted path, resolved by :func:`import_callable`.
"""

from __future__ import annotations

import base64
import logging
import pkgutil
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Literal, Protocol

from ..protocol.errors import NSQError, NSQValueError
from ..protocol.frames import Message

__all__ = [
    "Answer",
    "MessageFilter",
    "NSQMessage",
    "Responder",
    "answer",
    "answer_or_log",
    "bound_message_class",
    "by_connection",
    "decode_record_body",
    "import_callable",
    "message_record",
    "message_records",
    "on_live_connections",
]

log = logging.getLogger(__name__)

#: How a message is answered: FIN (done), REQ (redeliver), TOUCH (restart its timeout).
Answer = Literal["FIN", "REQ", "TOUCH"]


class Responder(Protocol):
    """What a message needs of the connection that delivered it: its answers, one
    message or many (one write for all of them), and whether it can still send them."""

    @property
    def alive(self) -> bool: ...

    def respond(self, message: NSQMessage, command: Answer, delay_ms: int = 0) -> None: ...

    def finish(self, *messages: NSQMessage) -> None: ...

    def requeue(self, *messages: NSQMessage, delay_ms: int = 0) -> None: ...

    def touch(self, *messages: NSQMessage) -> None: ...


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
    #: Each connection decodes into its own subclass (:func:`bound_message_class`)
    #: carrying itself here, so decoding a message costs no per-message assignment.
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


def bound_message_class(connection: Any) -> type[NSQMessage]:
    """An NSQMessage subclass whose messages answer on ``connection`` (a
    :class:`Responder` with a ``config``) and name its nsqd (``nsqd``, read once here,
    not per message)."""
    fields = {"__slots__": (), "connection": connection, "nsqd": connection.config.address}
    return type("NSQMessage", (NSQMessage,), fields)


# -- answering many at once --------------------------------------------------------------

_CONNECTION = attrgetter("connection")


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
    live: list[tuple[Any, Sequence[NSQMessage]]] = []
    lost = 0
    for conn, group in groups.items():
        if conn is not None and conn.alive:
            live.append((conn, group))
        else:
            lost += len(group)
    if lost:
        log.warning(
            "%s message(s) came on a connection that is gone: nsqd redelivers them "
            "after its msg_timeout",
            lost,
        )
    return live


def answer(messages: Sequence[NSQMessage], verb: Answer, delay_ms: int = 0) -> None:
    """FIN, REQ (after ``delay_ms``) or TOUCH ``messages`` now, each on the connection
    that delivered it, one write per connection: the batch form of the messages' own
    ``finish()``, ``requeue(delay_ms)`` and ``touch()`` (those of a connection that is
    gone are left out, with a warning). Raises the first write's error, after trying
    every connection."""
    error: NSQError | None = None
    for conn, group in by_connection(messages):
        try:
            if verb == "FIN":
                conn.finish(*group)
            elif verb == "REQ":
                conn.requeue(*group, delay_ms=delay_ms)
            else:
                conn.touch(*group)
        except NSQError as exc:
            error = error or exc
    if error is not None:
        raise error


def on_live_connections(messages: Sequence[NSQMessage]) -> list[NSQMessage]:
    """The messages whose connection is still alive (only those can be answered)."""
    return [m for m in messages if m.connection is not None and m.connection.alive]


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


# -- the record DAGs see -----------------------------------------------------------------

MessageFilter = Callable[[dict[str, Any]], bool]


def message_record(
    message: NSQMessage, topic: str, channel: str, *, nsqd: str | None = None
) -> dict[str, Any]:
    """One delivered message as a JSON-safe dict, always with the same keys: ``id``,
    ``body``, ``body_encoding``, ``attempts``, ``timestamp``, ``topic``, ``channel``,
    ``nsqd``.

    ``body`` is the text when the body is valid UTF-8 (``body_encoding="utf-8"``),
    otherwise base64 text (``body_encoding="base64"``); ``timestamp`` is nanoseconds
    since the epoch, set by nsqd at publish; ``nsqd`` is the ``host:port`` of the nsqd
    that delivered it (``id`` is unique per nsqd, so the pair identifies the message).

    :param message: the delivered message.
    :param topic: the topic it was read from.
    :param channel: the channel it was read from.
    :param nsqd: the nsqd to name (default: the one that delivered it,
        ``message.nsqd``; ``""`` for a message built by hand).
    """
    record = message_records([message], topic, channel)[0]
    if nsqd is not None:
        record["nsqd"] = nsqd
    return record


def message_records(
    messages: Sequence[NSQMessage], topic: str, channel: str
) -> list[dict[str, Any]]:
    """:func:`message_record` of each of ``messages``, in order; the nsqd of each
    connection looked up once, not per message (what a batch, a window or a hand-off
    of many messages pays)."""
    nsqds: dict[Any, str] = {}
    records: list[dict[str, Any]] = []
    append = records.append
    for message in messages:
        conn = message.connection
        nsqd = nsqds.get(conn)
        if nsqd is None:
            nsqd = nsqds[conn] = message.nsqd or ""
        body = message.body
        try:
            text, encoding = body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(body).decode("ascii"), "base64"
        # Written out, not a call per message: this runs once per message of a batch.
        append(
            {
                "id": message.raw_id.decode("ascii", "replace"),  # what ``message.id`` says
                "body": text,
                "body_encoding": encoding,
                "attempts": message.attempts,
                "timestamp": message.timestamp,
                "topic": topic,
                "channel": channel,
                "nsqd": nsqd,
            }
        )
    return records


def decode_record_body(record: dict[str, Any]) -> bytes:
    """The original bytes of a record's body (for downstream tasks)."""
    if record.get("body_encoding") == "base64":
        return base64.b64decode(record["body"])
    return str(record["body"]).encode("utf-8")


def import_callable(path: str, what: str = "message_filter") -> MessageFilter:
    """Resolve ``"package.module.function"`` (or ``"package.module:function"``) to the
    function, as :func:`pkgutil.resolve_name` reads it.

    :param path: the dotted path.
    :param what: the option's name, for the error message.
    """
    if not isinstance(path, str) or not ("." in path or ":" in path):
        raise NSQValueError(f"{what} {path!r} is not a dotted path (module.function)")
    try:
        target = pkgutil.resolve_name(path)
    except (ImportError, AttributeError, ValueError) as exc:
        raise NSQValueError(f"{what} {path!r} cannot be imported: {exc}") from None
    if not callable(target):
        raise NSQValueError(f"{what} {path!r} is not callable")
    return target
