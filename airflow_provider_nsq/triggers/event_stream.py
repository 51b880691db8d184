"""``NSQEventStreamProducer``: the broker side of one NSQ event stream, shared by the event
triggers on one (connection, topic, channel): in ack mode (Airflow >= 3.3) the shared
stream's producer, before that what :meth:`~.nsq_event.NSQEventTrigger.run` drives
itself. See :mod:`~airflow_provider_nsq.triggers.nsq_event` for the whole flow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Hashable, Sequence
from functools import partial
from typing import Any

from ..client import AsyncNSQConsumer, NSQMessage
from ..client.consumer import DEFAULT_LOOKUPD_POLL_INTERVAL_S
from ..client.holding.asyncio_dead_letters import AsyncDeadLetterPublisher
from ..client.holding.holder import AsyncMessageHolder
from ..client.message import answer_or_log
from ..client.records import message_record
from ..hooks.nsq import NSQHook
from ..metrics import emitter
from ..protocol.value_checks import check_delay_ms
from .ack_mode import AdvanceItem, SharedStreamProducer
from .consumer_start import start_holder
from .event_batches import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TIMEOUT_S,
    DEFAULT_MIN_EVENT_INTERVAL_S,
    EventBatcher,
    MessageBatch,
)
from .health import HealthReports, TriggerHealth

log = logging.getLogger(__name__)
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
    The consumer is held by an
    :class:`~airflow_provider_nsq.client.holding.holder.AsyncMessageHolder`, which
    TOUCHes the messages meanwhile (collecting or waiting for the store), so nsqd does
    not redeliver them early, and publishes the dead letters.

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
        self.holder: AsyncMessageHolder | None = None
        self.health: TriggerHealth | None = None
        self._reports: HealthReports | None = None

    @property
    def consumer(self) -> AsyncNSQConsumer | None:
        """The stream's consumer while it runs (held: read it, never call it)."""
        return None if self.holder is None else self.holder.consumer

    def _record(self, message: NSQMessage) -> dict[str, Any]:
        return message_record(message, self.topic, self.channel)

    def _tags(self) -> dict[str, str]:
        return {"topic": self.topic, "channel": self.channel}

    async def open_stream(self) -> AsyncGenerator[tuple[MessageBatch, MessageBatch], None]:
        hook = NSQHook(nsq_conn_id=self.nsq_conn_id)
        settings = await hook.aget_settings()
        config = settings.client
        check_delay_ms(self.requeue_delay_ms, config.max_req_timeout_ms, what="requeue_delay")
        dead_letter_topic = self.dead_letter_topic

        def dead_letters() -> AsyncDeadLetterPublisher | None:
            if not dead_letter_topic:
                return None
            return AsyncDeadLetterPublisher(dead_letter_topic, config, nsqds=settings.nsqds)

        # A short msg_timeout of its own: what a dead triggerer held comes back soon.
        options = hook.held_consumer_options()
        health = self.health = TriggerHealth(
            "event",
            _METRICS,
            nsqds=() if options["lookupd_http_addresses"] else options["nsqd_tcp_addresses"],
            **self._tags(),
        )
        self.holder = holder = await start_holder(
            options,
            self.topic,
            self.channel,
            self.max_in_flight,
            self.lookupd_poll_interval,
            dead_letters,
        )
        self._reports = HealthReports(health, lambda: self.consumer)
        self._reports.start()
        while True:
            # What the consumer delivers stays held (and TOUCHed) until it is answered.
            batch = await self.batcher.next_batch(holder.read)
            _METRICS.incr("nsq.event.received", len(batch.messages), **self._tags())
            # The batch is both the raw event (its records, and the marks each trigger's
            # filter leaves on it) and what settling it needs.
            yield batch, batch

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
        holder = self.holder
        if holder is None:
            return
        done = not failed and (acked > 0 or rejected > 0)
        if acked > 0 and batch.messages:
            # Publish (nsqd's timestamp) to the asset event stored, for the oldest message.
            oldest_ns = min(m.timestamp for m in batch.messages)
            _METRICS.timing("nsq.event.delay", time.time() - oldest_ns / 1e9, **self._tags())
        answered = {"finished": 0, "requeued": 0, "dead_lettered": 0}
        for index, message in enumerate(batch.messages):
            if done and not batch.accepted(index) and self.dead_letter_topic:
                # Published, then FINished by the holder; left unanswered when it failed.
                given_up = await self._give_up(holder, message)
                answered["dead_lettered" if given_up else "requeued"] += 1
                answered["finished"] += given_up
                if given_up:
                    continue
            elif done:
                answer_or_log(message, "FIN", partial(holder.finish, message))
                answered["finished"] += 1
                continue
            requeue = partial(holder.requeue, message, delay_ms=self.requeue_delay_ms)
            answer_or_log(message, "REQ", requeue)
            if not done:
                answered["requeued"] += 1
        for what, count in answered.items():
            _METRICS.incr(f"nsq.event.{what}", count, **self._tags())

    async def _give_up(self, holder: AsyncMessageHolder, message: NSQMessage) -> bool:
        """Publish a message every filter rejected to ``dead_letter_topic`` (the one
        dead-letter envelope, ``"reason": "rejected"``), then FIN it; False (logged, the
        message left for a REQ) when the publish failed."""
        by = {"trigger": "NSQEventTrigger", "nsq_conn_id": self.nsq_conn_id}
        failed = await holder.give_up(message, "rejected", by=by)
        if failed is None:
            return True
        log.warning(
            "Could not publish message %s from %s to the dead-letter topic %s (%s); "
            "requeueing it instead",
            message.id,
            message.nsqd,
            self.dead_letter_topic,
            failed,
        )
        return False

    async def aclose(self) -> None:
        """Stop reporting; CLS, REQ what is still unanswered (redelivered at once), close."""
        reports, self._reports = self._reports, None
        if reports is not None:
            reports.stop()
        holder, self.holder = self.holder, None
        if holder is not None:
            await holder.close()  # stops its TOUCH; CLS (RDY 0), REQ, close, dead letters
