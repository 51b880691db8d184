"""``NSQMessageTrigger``: wait, in the triggerer, until a channel has a message.

It never takes a message away: it subscribes with ``RDY 1``, and on the first delivery
it sends ``RDY 0`` (so nsqd sends nothing more to it), REQs the message with no delay (so
it is back on the channel at once, attempts + 1), closes the connection and fires. The
deferred task then consumes for real, with the same code path as a poke.

It runs on the asyncio driver: no threads, and cancelling it (task timeout, task cleared,
triggerer shutdown) closes the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..client import AsyncNSQConnection, ClientConfig
from ..hooks.nsq import NSQHook
from ..protocol.errors import NSQConnectionError, NSQError, NSQTimeoutError, NSQTLSError
from .nsq_event import NSQEventTrigger as NSQEventTrigger  # event-driven DAGs; own module

#: Reconnect backoff after a dropped connection: first and longest wait, seconds.
_BACKOFF_START_S = 1.0
_BACKOFF_MAX_S = 30.0


class NSQMessageTrigger(BaseTrigger):
    """Fire once ``channel`` on ``topic`` has a message ready, without consuming it.

    The event payload is ``{"status": "message", "topic", "channel", "attempts"}`` (the
    peeked message's attempts after the REQ), or ``{"status": "error", "message": ...}``
    when nsqd refuses the subscription (bad name, AUTH), TLS cannot be set up, or the
    connection's settings are invalid. A refused or dropped connection is retried with
    backoff (nsqd may be restarting); the task's ``timeout`` bounds the whole wait.

    :param topic: the topic name.
    :param channel: the channel name.
    :param nsq_conn_id: the ``nsq`` Connection to use.
    :param read_timeout: seconds per wait for a delivery before checking the connection
        again (heartbeats keep it alive meanwhile).
    """

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        nsq_conn_id: str = NSQHook.default_conn_name,
        read_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.channel = channel
        self.nsq_conn_id = nsq_conn_id
        self.read_timeout = read_timeout
        self.connection: AsyncNSQConnection | None = None  # the live one, for tests

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topic": self.topic,
                "channel": self.channel,
                "nsq_conn_id": self.nsq_conn_id,
                "read_timeout": self.read_timeout,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            config = await NSQHook(nsq_conn_id=self.nsq_conn_id).aget_client_config()
        except NSQError as exc:
            yield TriggerEvent({"status": "error", "message": str(exc)})
            return
        backoff = _BACKOFF_START_S
        while True:
            try:
                attempts = await self._peek(config)
            except NSQTLSError as exc:  # a settings problem: retrying will not fix it
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            except (NSQConnectionError, NSQTimeoutError) as exc:
                self.log.warning(
                    "NSQ connection to %s lost while waiting on %s/%s (%s); retrying in %gs",
                    config.address,
                    self.topic,
                    self.channel,
                    exc,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
                continue
            except NSQError as exc:
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            break
        self.log.info("A message is ready on %s/%s", self.topic, self.channel)
        yield TriggerEvent(
            {
                "status": "message",
                "topic": self.topic,
                "channel": self.channel,
                "attempts": attempts,
            }
        )

    async def _peek(self, config: ClientConfig) -> int:
        """Subscribe with RDY 1, wait for one delivery, hand it back; its attempts."""
        conn = self.connection = AsyncNSQConnection(config)
        try:
            await conn.connect()
            await conn.subscribe(self.topic, self.channel)
            conn.ready(1)
            self.log.info(
                "Waiting for a message on %s/%s at %s", self.topic, self.channel, config.address
            )
            while True:
                messages = await conn.read_messages(self.read_timeout)
                if messages:
                    break
            conn.ready(0)  # before the REQ, so nsqd does not hand the message straight back
            conn.requeue(*messages, delay_ms=0)
            return max(m.attempts for m in messages) + 1
        finally:
            # Also on cancellation: the connection never outlives the trigger.
            await conn.close()
            self.connection = None
