"""``NSQEventTrigger`` turning messages into asset-event payloads: the consume workload.

Its ``run()`` is iterated directly, as the triggerer (before Airflow 3.3's ack mode)
does: each batch of up to :data:`BATCH` messages becomes one ``TriggerEvent`` whose
payload lists their records, and is FINished once the event was handed over. The clock
counts the payloads' messages. The parent sets ``AIRFLOW_HOME`` and
``AIRFLOW_CONN_NSQ_BENCH``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .base import ConsumeClock, Context, NotApplicable, fill_channel

CONN_ID = "nsq_bench"
#: Messages per event (at most nsqd's --max-rdy-count, as max_in_flight).
BATCH = 1000


def consume(ctx: Context) -> dict[str, Any]:
    from airflow_provider_nsq.triggers.nsq_event import NSQEventTrigger

    topic, channel = ctx.topic("consume"), "bench"
    clock = ConsumeClock(ctx)
    fill_channel(ctx, topic, channel, clock.total + clock.backlog)
    trigger = NSQEventTrigger(
        topic=topic,
        channel=channel,
        nsq_conn_id=CONN_ID,
        batch_size=BATCH,
        batch_timeout=0.05,
        min_event_interval=0,
        max_in_flight=2 * BATCH,
    )

    async def run() -> None:
        events = trigger.run()
        try:
            async for event in events:
                clock.add(event.payload["count"])
                if clock.done:
                    break
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    asyncio.run(run())
    result = clock.result()
    result["note"] = f"run(), events of up to {BATCH} messages"
    return result


def pub(ctx: Context) -> dict[str, Any]:
    raise NotApplicable("the trigger consumes")


mpub = connect = pub
