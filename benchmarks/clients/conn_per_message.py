"""The model this project replaces: a new connection + IDENTIFY for every request.

Run with this project's blocking client, so the difference to the ``blocking`` row is
the connection model alone (TCP connect, magic, IDENTIFY and its JSON reply, close),
not a different codec.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_nsq.client import NSQConnection

from .base import BODY, MPUB_BATCH, Context, NotApplicable, project_config, timed_calls


def pub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("pub")
    config = project_config(ctx)

    def once() -> None:
        with NSQConnection(config) as conn:
            conn.publish(topic, BODY)

    return timed_calls(ctx, "pub", once)


def mpub(ctx: Context) -> dict[str, Any]:
    topic = ctx.topic("mpub")
    config = project_config(ctx)
    batch = [BODY] * MPUB_BATCH

    def once() -> None:
        with NSQConnection(config) as conn:
            conn.multi_publish(topic, batch)

    return timed_calls(ctx, "mpub", once)


def consume(ctx: Context) -> dict[str, Any]:
    raise NotApplicable("a consumer holds its connection for the subscription")


def connect(ctx: Context) -> dict[str, Any]:
    raise NotApplicable("same as the blocking client's connect")
