"""``NSQEventStreamProducer``: the broker side of one NSQ event stream, shared by the event
triggers on one (connection, topic, channel): in ack mode (Airflow >= 3.3) the shared
stream's producer, before that what :meth:`~.nsq_event.NSQEventTrigger.run` drives
itself. See :mod:`~airflow_provider_nsq.triggers.nsq_event` for the whole flow.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Hashable, Sequence
from functools import partial
from typing import Any

from ..client import AsyncNSQConsumer, NSQMessage
from ..client.consumer import DEFAULT_LOOKUPD_POLL_INTERVAL_S
from ..client.message import answer_or_log
from ..client.records import message_record
from ..hooks.nsq import NSQHook
from ..metrics import emitter
from ..protocol.value_checks import check_delay_ms
from .ack_mode import AdvanceItem, SharedStreamProducer
from .consumer_start import start_consumer
from .event_batches import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TIMEOUT_S,
    DEFAULT_MIN_EVENT_INTERVAL_S,
    EventBatcher,
    MessageBatch,
)
from .event_dead_letters import EventDeadLetters
from .failover import trigger_consumer_options
from .health import TriggerHealth

_METRICS = emitter("triggerer")

#: ``max_in_flight`` when not given: this, or ``batch_size`` when larger (a batch can only
#: hold messages in flight).
DEFAULT_MAX_IN_FLIGHT = 100
DEFAULT_REQUEUE_DELAY_MS = 5_000


class NSQEventStreamProducer(SharedStreamProducer):
    """The broker side of one NSQ stream: in ack mode (Airflow >= 3.3) the shared
    stream's producer, before that what :meth:`NSQEventTrigger.run` drives itself.

    Owns the subscription for one (connection, topic, channel): one
    :class:`~airflow_provider_nsq.client.consumer.AsyncNSQConsumer` over every nsqd of
    the connection (discovered through nsqlookupd when the connection names any), with
    one ``max_in_flight`` budget split across them. Yields one raw event per batch of
    messages (:class:`~airflow_provider_nsq.triggers.event_batches.MessageBatch`, from
    an :class:`~airflow_provider_nsq.triggers.event_batches.EventBatcher`); answers
    nsqd only in :meth:`settle` (through :meth:`advance` in ack mode), after Airflow
    stored every event derived from the batch, on the nsqd that delivered each message.
    Meanwhile the consumer TOUCHes the messages it holds (collecting or waiting for
    the store; ``touch_held()``), so nsqd does not redeliver them early.

    Keyword arguments are :class:`NSQEventTrigger`'s (``message_filter`` is per trigger
    and ignored here).
    """

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        nsq_conn_id: str = NSQHook.default_conn_name,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        requeue_delay: int = DEFAULT_REQUEUE_DELAY_MS,
        dead_letter_topic: str | None = None,
        lookupd_poll_interval: float = DEFAULT_LOOKUPD_POLL_INTERVAL_S,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_timeout: float = DEFAULT_BATCH_TIMEOUT_S,
        min_event_interval: float = DEFAULT_MIN_EVENT_INTERVAL_S,
        **_: Any,
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.nsq_conn_id = nsq_conn_id
        self.max_in_flight = max_in_flight
        self.requeue_delay_ms = requeue_delay
        self.dead_letter_topic = dead_letter_topic
        self.lookupd_poll_interval = lookupd_poll_interval
        self.batcher = EventBatcher(
            batch_size=batch_size,
            batch_timeout=batch_timeout,
            min_event_interval=min_event_interval,
            to_record=self._record,
        )
        self.consumer: AsyncNSQConsumer | None = None
        self.health: TriggerHealth | None = None
        self._dead_letters: EventDeadLetters | None = None
        self._toucher: asyncio.Task[None] | None = None

    def _record(self, message: NSQMessage) -> dict[str, Any]:
        return message_record(message, self.topic, self.channel)

    def _tags(self) -> dict[str, str]:
        return {"topic": self.topic, "channel": self.channel}

    async def open_stream(self) -> AsyncGenerator[tuple[MessageBatch, MessageBatch], None]:
        hook = NSQHook(nsq_conn_id=self.nsq_conn_id)
        config = await hook.aget_client_config()
        check_delay_ms(self.requeue_delay_ms, config.max_req_timeout_ms, what="requeue_delay")
        if self.dead_letter_topic:
            self._dead_letters = EventDeadLetters(config, self.dead_letter_topic)
        # A short msg_timeout of its own: what a dead triggerer held comes back soon.
        options = trigger_consumer_options(hook)
        self.health = TriggerHealth(
            "event",
            _METRICS,
            nsqds=() if options["lookupd_http_addresses"] else options["nsqd_tcp_addresses"],
            **self._tags(),
        )
        self.consumer = await start_consumer(
            options, self.topic, self.channel, self.max_in_flight, self.lookupd_poll_interval
        )
        self._toucher = asyncio.create_task(self._keep_held_alive())
        while True:
            # What the consumer delivers stays held (and TOUCHed) until it is answered.
            batch = await self.batcher.next_batch(self._read)
            _METRICS.incr("nsq.event.received", len(batch.messages), **self._tags())
            # The batch is both the raw event (its records, and the marks each trigger's
            # filter leaves on it) and what settling it needs.
            yield batch, batch

    async def _read(self, timeout: float) -> list[NSQMessage]:
        """The consumer's deliveries within ``timeout`` seconds."""
        assert self.consumer is not None
        return await self.consumer.read(timeout)

    def get_advance_lane(self, broker_payload: MessageBatch) -> Hashable:
        # FIN is per message (no cumulative offset): one lane per batch, so a batch still
        # waiting for a slow subscriber never holds back the FIN of later ones.
        return broker_payload.number

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        """Settle each resolved batch (see :meth:`settle`). Never raises."""
        for item in batch:
            outcome = item.outcome
            await self.settle(
                item.broker_payload,
                acked=outcome.acked,
                rejected=outcome.rejected,
                failed=outcome.failed,
            )

    async def settle(self, batch: MessageBatch, *, acked: int, rejected: int, failed: int) -> None:
        """Answer nsqd for every message of a batch, on the nsqd that delivered it, given
        how many triggers stored events of it (``acked``), rejected all of it, or failed:

        - a trigger failed (ack timeout, overflow), or no trigger was online: REQ every
          message after ``requeue_delay``, so they come back;
        - otherwise a message some trigger's filter accepted (and so stored): FIN;
        - a message every trigger's filter rejected: publish it to ``dead_letter_topic``
          (when set), then FIN; if that publish fails, REQ it instead.

        Never raises: a FIN/REQ that cannot be sent (connection gone) leaves the message
        to nsqd's msg_timeout, which redelivers it.
        """
        self.batcher.settled(batch, stored=acked > 0)
        consumer = self.consumer
        if consumer is None:
            return
        done = not failed and (acked > 0 or rejected > 0)
        if acked > 0 and batch.messages:
            # Publish (nsqd's timestamp) to the asset event stored, for the oldest message.
            oldest_ns = min(m.timestamp for m in batch.messages)
            _METRICS.timing("nsq.event.delay", time.time() - oldest_ns / 1e9, **self._tags())
        answered = {"finished": 0, "requeued": 0, "dead_lettered": 0}
        for index, message in enumerate(batch.messages):
            finish = done
            if done and not batch.accepted(index) and self._dead_letters is not None:
                finish = await self._dead_letters.publish(message, message.nsqd or "")
                answered["dead_lettered"] += int(finish)
            if finish:
                answer_or_log(message, "FIN", partial(consumer.finish, message))
            else:
                requeue = partial(consumer.requeue, message, delay_ms=self.requeue_delay_ms)
                answer_or_log(message, "REQ", requeue)
            answered["finished" if finish else "requeued"] += 1
        for what, count in answered.items():
            _METRICS.incr(f"nsq.event.{what}", count, **self._tags())

    async def _keep_held_alive(self) -> None:
        """TOUCH what the stream holds (collecting, or waiting for the store) as the
        consumer decides (``touch_held()``: a third of msg_timeout after delivery
        or the last TOUCH), and report the stream's health
        (:mod:`~airflow_provider_nsq.triggers.health`), until cancelled."""
        while self.consumer is not None:
            _, next_in = self.consumer.touch_held()
            if self.health is not None:
                if self.health.seconds_to_report() == 0:
                    self.health.report(self.consumer)
                next_in = min(next_in, self.health.seconds_to_report())
            await asyncio.sleep(next_in)

    async def aclose(self) -> None:
        """Stop touching; REQ what is still unanswered (redelivered at once); close."""
        toucher, self._toucher = self._toucher, None
        if toucher is not None:
            toucher.cancel()
            try:
                await toucher
            except asyncio.CancelledError:
                pass
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            await consumer.close()  # CLS (RDY 0), REQ every unanswered message, close
        dead_letters, self._dead_letters = self._dead_letters, None
        if dead_letters is not None:
            await dead_letters.close()
