"""Delivered messages as JSON-safe records, and the user filters that judge them.

The sensor pushes these records to XCom and the event trigger puts them in asset events,
so DAGs see one shape (the same keys, always) whichever way a message reached them. A ``message_filter`` is a
``callable(record) -> bool``; in a trigger it travels as a dotted path, resolved here.
"""

from __future__ import annotations

import base64
import pkgutil
from collections.abc import Callable
from typing import Any

from ..protocol.errors import NSQValueError
from .message import NSQMessage

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
    try:
        body, encoding = message.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(message.body).decode("ascii"), "base64"
    return {
        "id": message.id,
        "body": body,
        "body_encoding": encoding,
        "attempts": message.attempts,
        "timestamp": message.timestamp,
        "topic": topic,
        "channel": channel,
        "nsqd": nsqd if nsqd is not None else message.nsqd or "",
    }


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
