"""This project's consumer over a topology: ``NSQConsumer`` draining one topic
spread over several nsqds, found through nsqlookupd, under one in-flight budget.

Only ``consume``: publishing to a topology is publishing to one nsqd (the other rows).
The budget is the single-connection row's RDY (2500) shared by every connection, so
the ratio to that row says what reading N nsqds at once costs.
"""

from __future__ import annotations

from typing import Any

from .base import MAX_RDY, ConsumeClock, Context, NotApplicable, fill_channel


def consume(ctx: Context) -> dict[str, Any]:
    from airflow_provider_nsq.client.consumer import NSQConsumer

    if not ctx.nsqds or not ctx.lookupd:
        raise NotApplicable("needs a topology (nsqlookupd and several nsqds)")
    topic, channel = ctx.topic("consume"), "bench"
    clock = ConsumeClock(ctx)
    # Every nsqd holds an even share of the run plus its own backlog (see ConsumeClock).
    share = -(-clock.total // len(ctx.nsqds))
    for nsqd in ctx.nsqds:
        fill_channel(ctx, topic, channel, share + clock.backlog, nsqd=nsqd)
    consumer = NSQConsumer(topic, channel, lookupd_http_addresses=[ctx.lookupd])
    with consumer:
        consumer.start(MAX_RDY)
        if len(consumer.connections) != len(ctx.nsqds):
            raise RuntimeError(f"lookupd listed {len(consumer.connections)} of {len(ctx.nsqds)}")
        # The loop a streaming consumer writes: read what arrived, FIN it.
        while not clock.done:
            messages = consumer.read(10.0)
            if not messages:
                raise TimeoutError(f"no message for 10 s after {clock.got} of {clock.total}")
            consumer.finish(*messages)
            clock.add(len(messages))
        return clock.result()


def _not_applicable(ctx: Context) -> dict[str, Any]:
    raise NotApplicable("the topology row measures consume only")


pub = mpub = connect = _not_applicable
