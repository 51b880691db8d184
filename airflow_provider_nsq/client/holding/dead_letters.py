"""Dead letters: a message set aside on a topic of its own, in one envelope.

nsqd has no max-attempts and no dead-letter queue: a consumer that gives up on a message
must publish it somewhere itself, and only then FIN it. This module writes what is
published (the envelope) and publishes it, blocking (:class:`DeadLetterPublisher`) or on
the event loop (:class:`AsyncDeadLetterPublisher`); the caller FINs the message once
``publish`` returned, that is after nsqd's OK, and REQs it when ``publish`` raised.

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
from collections.abc import Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

from ...protocol.names import validate_topic_name
from ..bodies import encode_body
from ..message import NSQMessage, message_record
from ..producer import AsyncNSQProducer, NSQProducer
from ..settings.client_config import ClientConfig

#: Why a message was set aside (the envelope's ``reason``).
Reason = Literal["max_attempts", "rejected"]
REASONS: tuple[str, ...] = ("max_attempts", "rejected")
#: The longest error text an envelope carries (characters); longer texts are cut.
MAX_ERROR_CHARS = 2000

P = TypeVar("P", NSQProducer, AsyncNSQProducer)


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


class _Publishers(Generic[P]):
    """One producer per delivering nsqd: that nsqd first, then ``nsqds``."""

    def __init__(self, topic: str, config: ClientConfig, nsqds: Sequence[str] = ()) -> None:
        validate_topic_name(topic)
        self.topic = topic
        self.config = config
        self.nsqds = list(nsqds)
        self._producers: dict[str, P] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic}>"

    def _addresses(self, envelope: Mapping[str, Any]) -> tuple[str, list[str]]:
        """The delivering nsqd, and the failover list that starts with it."""
        nsqd = str(envelope.get("nsqd") or "")
        fallback: list[str] = self.nsqds or [self.config.address]
        return nsqd, list(dict.fromkeys([nsqd, *fallback] if nsqd else fallback))

    @staticmethod
    def _body(envelope: Mapping[str, Any]) -> bytes:
        return encode_body(dict(envelope), "dead-letter envelope")

    @staticmethod
    def letter(
        message: NSQMessage,
        topic: str,
        channel: str,
        reason: Reason,
        *,
        error: BaseException | None = None,
        error_text: str | None = None,
        by: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The envelope of ``message`` (:func:`dead_letter_envelope`), for
        ``publish``."""
        return dead_letter_envelope(
            message, topic, channel, reason, error=error, error_text=error_text, by=by
        )


class DeadLetterPublisher(_Publishers[NSQProducer]):
    """Publishes envelopes to ``topic``, blocking (see the module's docstring).

    :param topic: the dead-letter topic.
    :param config: the connection settings (TLS, AUTH, limits ...).
    :param nsqds: where to publish when the delivering nsqd cannot be reached (the
        connection's nsqds, in order).
    """

    def publish(self, envelope: Mapping[str, Any]) -> None:
        """Publish one envelope; returns after nsqd's OK, raises the
        :class:`~...protocol.errors.NSQError` that stopped it otherwise (the message must
        then not be FINished)."""
        nsqd, addresses = self._addresses(envelope)
        producer = self._producers.get(nsqd)
        if producer is None:
            producer = self._producers[nsqd] = NSQProducer(addresses, self.config)
        producer.publish(self.topic, self._body(envelope))

    def close(self) -> None:
        producers, self._producers = self._producers, {}
        for producer in producers.values():
            producer.close()


class AsyncDeadLetterPublisher(_Publishers[AsyncNSQProducer]):
    """:class:`DeadLetterPublisher` on the asyncio event loop (no thread)."""

    async def publish(self, envelope: Mapping[str, Any]) -> None:
        """Publish one envelope; returns after nsqd's OK, raises the NSQError that
        stopped it otherwise (the message must then not be FINished)."""
        nsqd, addresses = self._addresses(envelope)
        producer = self._producers.get(nsqd)
        if producer is None:
            producer = self._producers[nsqd] = AsyncNSQProducer(addresses, self.config)
        await producer.publish(self.topic, self._body(envelope))

    async def close(self) -> None:
        producers, self._producers = self._producers, {}
        for producer in producers.values():
            await producer.close()
