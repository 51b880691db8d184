"""Publishing dead-letter envelopes (:mod:`.dead_letters`) to their topic, asyncio first:
:class:`AsyncDeadLetterPublisher`. The blocking
:class:`~.blocking_dead_letters.DeadLetterPublisher` is generated from this module
(``scripts/generate_blocking.py``): change it here.

Each envelope goes to the nsqd that delivered its message (known to be up, and NSQ's
way: publish where the data is), failing over along the connection's own nsqds when
that one cannot be reached: one producer per delivering nsqd, with the producers'
failover policy (never to a second nsqd once the first may have taken it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...protocol.names import validate_topic_name
from ..bodies import encode_body
from ..message import NSQMessage
from ..producer.asyncio_producer import AsyncNSQProducer
from ..settings.client_config import ClientConfig
from .dead_letters import Reason, dead_letter_envelope

__all__ = ["AsyncDeadLetterPublisher"]


class AsyncDeadLetterPublisher:
    """Publishes envelopes to ``topic`` (see the module's docstring).

    :param topic: the dead-letter topic.
    :param config: the connection settings (TLS, AUTH, limits ...).
    :param nsqds: where to publish when the delivering nsqd cannot be reached (the
        connection's nsqds, in order).
    """

    def __init__(self, topic: str, config: ClientConfig, nsqds: Sequence[str] = ()) -> None:
        validate_topic_name(topic)
        self.topic = topic
        self.config = config
        self.nsqds = list(nsqds)
        self._producers: dict[str, AsyncNSQProducer] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic}>"

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
        """The envelope of ``message`` (:func:`~.dead_letters.dead_letter_envelope`), for
        ``publish``."""
        return dead_letter_envelope(
            message, topic, channel, reason, error=error, error_text=error_text, by=by
        )

    async def publish(self, envelope: Mapping[str, Any]) -> None:
        """Publish one envelope; returns after nsqd's OK, raises the
        :class:`~airflow_provider_nsq.protocol.errors.NSQError` that stopped it otherwise
        (the message must then not be FINished)."""
        nsqd = str(envelope.get("nsqd") or "")
        producer = self._producers.get(nsqd)
        if producer is None:
            fallback: list[str] = self.nsqds or [self.config.address]
            addresses = list(dict.fromkeys([nsqd, *fallback] if nsqd else fallback))
            producer = self._producers[nsqd] = AsyncNSQProducer(addresses, self.config)
        await producer.publish(self.topic, encode_body(dict(envelope), "dead-letter envelope"))

    async def close(self) -> None:
        """Close every producer opened so far."""
        producers, self._producers = self._producers, {}
        for producer in producers.values():
            await producer.close()
