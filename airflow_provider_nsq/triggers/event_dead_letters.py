"""Where the event trigger publishes a message that every trigger's filter rejected: its
``dead_letter_topic``, on the nsqd that delivered the message."""

from __future__ import annotations

import logging

from ..client import AsyncNSQConnection, ClientConfig, NSQMessage
from ..protocol.errors import NSQError

log = logging.getLogger(__name__)


class EventDeadLetters:
    """Publishes rejected messages to ``topic`` on the nsqd that delivered them (known
    to be up, and NSQ's way: publish where the data is), one connection of its own per
    nsqd, one message at a time."""

    def __init__(self, config: ClientConfig, topic: str) -> None:
        self.topic = topic
        self.config = config
        self._conns: dict[str, AsyncNSQConnection] = {}

    def _connection(self, nsqd: str) -> AsyncNSQConnection:
        conn = self._conns.get(nsqd)
        if conn is None:
            conn = self._conns[nsqd] = AsyncNSQConnection(self.config.for_nsqd(nsqd))
        return conn

    async def publish(self, message: NSQMessage, nsqd: str) -> bool:
        """True once nsqd accepted the copy; False (logged) when it did not."""
        try:
            await self._connection(nsqd).publish(self.topic, message.body)
        except NSQError as exc:
            log.warning(
                "Could not publish message %s from %s to the dead-letter topic %s (%s); "
                "requeueing it instead",
                message.id,
                nsqd,
                self.topic,
                exc,
            )
            return False
        return True

    async def close(self) -> None:
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            await conn.close()
