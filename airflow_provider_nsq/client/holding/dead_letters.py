"""Dead letters: a message set aside on a topic of its own, in one envelope.

nsqd has no max-attempts and no dead-letter queue: a consumer that gives up on a message
must publish it somewhere itself, and only then FIN it. This module writes what is
published (the envelope); :mod:`.asyncio_dead_letters` publishes it on the event loop
(:class:`~.asyncio_dead_letters.AsyncDeadLetterPublisher`), and the blocking
:class:`~.blocking_dead_letters.DeadLetterPublisher` is generated from that module. The
caller FINs the message once ``publish`` returned, that is after nsqd's OK, and REQs it
when ``publish`` raised.

A message is set aside for one of two reasons (the envelope's ``reason``):

- ``"max_attempts"``: processing it failed on its ``max_attempts``-th delivery (the
  consume operator); ``error`` says what the last attempt raised;
- ``"rejected"``: every filter rejected it (the event trigger: no asset event wanted
  it); ``error`` is null.

The envelope is the message's record (:func:`~..message.message_record`: ``id``,
``body``, ``body_encoding``, ``attempts``, ``timestamp``, ``topic``, ``channel``,
``nsqd``, the keys the sensor's XCom and the event trigger's asset events carry; so
:func:`~..message.decode_record_body` gives the original bytes back) and what happened:

- ``reason``: ``"max_attempts"`` or ``"rejected"``, as above;
- ``error``: ``{"type": <exception class>, "message": <its text>}`` or null, the text as
  the caller gives it (masked of secrets) and cut to :data:`MAX_ERROR_CHARS`;
- ``failed_at``: when it was given up, in nanoseconds since the epoch, beside
  ``timestamp`` (nsqd's, at publish);
- ``by``: who gave up on it (for an Airflow task: ``dag_id``, ``task_id``, ``run_id``;
  for a trigger: ``trigger``, ``nsq_conn_id``).

It is compact JSON, published as one message on the nsqd that delivered the message
(known to be up, and NSQ's way: publish where the data is), failing over along the
connection's own nsqds when that one cannot be reached (the producers' failover policy:
never to a second nsqd once the first may have taken it). A body too large for nsqd's
``--max-msg-size`` once wrapped (base64 grows by a third) cannot be dead-lettered, and
the publish error says so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

from ..message import NSQMessage, message_record

__all__ = ["MAX_ERROR_CHARS", "REASONS", "Reason", "dead_letter_envelope"]

#: Why a message was set aside (the envelope's ``reason``).
Reason = Literal["max_attempts", "rejected"]
REASONS: tuple[str, ...] = ("max_attempts", "rejected")
#: The longest error text an envelope carries (characters); longer texts are cut.
MAX_ERROR_CHARS = 2000


def dead_letter_envelope(
    message: NSQMessage,
    topic: str,
    channel: str,
    reason: Reason,
    *,
    error: BaseException | None = None,
    error_text: str | None = None,
    by: Mapping[str, Any] | None = None,
    failed_at_ns: int | None = None,
) -> dict[str, Any]:
    """What is published to the dead-letter topic for ``message`` (see the module's
    docstring for the keys).

    :param message: the delivered message.
    :param topic: the topic it was read from.
    :param channel: the channel it was read from.
    :param reason: why it is set aside: ``"max_attempts"`` or ``"rejected"``.
    :param error: what the last attempt raised (None: nothing raised, it was rejected).
    :param error_text: the error's text as it may be shown (secrets masked); default
        ``str(error)``.
    :param by: who gave up on it (JSON-safe values).
    :param failed_at_ns: when it was given up (default: now).
    """
    if reason not in REASONS:
        raise ValueError(f"reason must be one of {', '.join(REASONS)}, got {reason!r}")
    described = None
    if error is not None:
        text = str(error) if error_text is None else error_text
        if len(text) > MAX_ERROR_CHARS:
            text = text[: MAX_ERROR_CHARS - 3] + "..."
        described = {"type": type(error).__name__, "message": text}
    return {
        **message_record(message, topic, channel),
        "reason": reason,
        "error": described,
        "failed_at": time.time_ns() if failed_at_ns is None else failed_at_ns,
        "by": dict(by or {}),
    }
