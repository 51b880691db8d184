"""Dead letters: a message that keeps failing, set aside on a topic of its own.

nsqd has no max-attempts and no dead-letter queue: a consumer that gives up on a message
must publish it somewhere itself, and only then FIN it. This module writes what it
publishes (the envelope) and publishes it; the caller FINs the message once
:meth:`DeadLetterPublisher.publish` returned, that is after nsqd's OK.

The envelope is the message's record (:func:`~..records.message_record`: ``id``,
``body``, ``body_encoding``, ``attempts``, ``timestamp``, ``topic``, ``channel``,
``nsqd``, the keys the sensor's XCom and the event trigger's asset events carry; so
:func:`~..records.decode_record_body` gives the original bytes back) and what happened:

- ``error``: ``{"type": <exception class>, "message": <its text>}``, the text as the
  caller gives it (masked of secrets) and cut to :data:`MAX_ERROR_CHARS`;
- ``failed_at``: when the last attempt failed, in nanoseconds since the epoch, beside
  ``timestamp`` (nsqd's, at publish: the first attempt cannot be earlier);
- ``by``: who gave up on it (for an Airflow task: ``dag_id``, ``task_id``, ``run_id``).

It is compact JSON, published as one message: a body too large for nsqd's
``--max-msg-size`` once wrapped (base64 grows by a third) cannot be dead-lettered, and
the publish error says so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ...protocol.names import validate_topic_name
from ..bodies import encode_body
from ..message import NSQMessage
from ..producer import NSQProducer
from ..records import message_record
from ..settings.client_config import ClientConfig

#: The longest error text an envelope carries (characters); longer texts are cut.
MAX_ERROR_CHARS = 2000


def dead_letter_envelope(
    message: NSQMessage,
    topic: str,
    channel: str,
    error: BaseException,
    *,
    error_text: str | None = None,
    by: Mapping[str, Any] | None = None,
    failed_at_ns: int | None = None,
) -> dict[str, Any]:
    """What is published to the dead-letter topic for ``message`` (see the module's
    docstring for the keys).

    :param message: the delivered message.
    :param topic: the topic it was read from.
    :param channel: the channel it was read from.
    :param error: what the last attempt raised.
    :param error_text: the error's text as it may be shown (secrets masked); default
        ``str(error)``.
    :param by: who gave up on it (JSON-safe values).
    :param failed_at_ns: when the last attempt failed (default: now).
    """
    text = str(error) if error_text is None else error_text
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return {
        **message_record(message, topic, channel),
        "error": {"type": type(error).__name__, "message": text},
        "failed_at": time.time_ns() if failed_at_ns is None else failed_at_ns,
        "by": dict(by or {}),
    }


class DeadLetterPublisher:
    """Publishes envelopes to ``topic`` on the nsqd that delivered each message (known to
    be up, and NSQ's way: publish where the data is), failing over to ``nsqds`` (the
    connection's own) when it cannot be reached. One connection per delivering nsqd,
    kept until :meth:`close`.

    :param topic: the dead-letter topic.
    :param config: the connection settings (TLS, AUTH, limits ...).
    :param nsqds: where to publish when the delivering nsqd cannot be reached.
    """

    def __init__(self, topic: str, config: ClientConfig, nsqds: Sequence[str] = ()) -> None:
        validate_topic_name(topic)
        self.topic = topic
        self.config = config
        self.nsqds = list(nsqds)
        self._producers: dict[str, NSQProducer] = {}

    def __repr__(self) -> str:
        return f"<DeadLetterPublisher {self.topic}>"

    def publish(self, envelope: Mapping[str, Any]) -> None:
        """Publish one envelope; returns after nsqd's OK, raises the
        :class:`~...protocol.errors.NSQError` that stopped it otherwise (the message must
        then not be FINished)."""
        nsqd = str(envelope.get("nsqd") or "")
        producer = self._producers.get(nsqd)
        if producer is None:
            addresses = [nsqd, *self.nsqds] if nsqd else self.nsqds or [self.config.address]
            producer = self._producers[nsqd] = NSQProducer(addresses, self.config)
        producer.publish(self.topic, encode_body(dict(envelope), "dead-letter envelope"))

    def close(self) -> None:
        producers, self._producers = self._producers, {}
        for producer in producers.values():
            producer.close()
