"""What nsqd holds, as an independent consumer sees it: a test checks what a task
published, consumed or left behind through these, never through the code under test."""

from __future__ import annotations

from typing import Any

from airflow_provider_nsq.client import ClientConfig, NSQConsumer, NSQMessage


def client_config(nsqd, **changes: Any) -> ClientConfig:
    return ClientConfig(host=nsqd.host, port=nsqd.tcp_port, **changes)


def read(nsqd, topic: str, channel: str, count: int, timeout: float = 10.0) -> list[NSQMessage]:
    """What a plain consumer gets: one window of up to ``count`` messages, FIN'd."""
    with NSQConsumer(topic, channel, config=client_config(nsqd)) as consumer:
        return consumer.consume(max_messages=count, timeout=timeout, ack="fin")


def channel_is_empty(nsqd, topic: str, channel: str) -> bool:
    stats = nsqd.channel_stats(topic, channel)
    return stats is not None and stats["depth"] == 0 and stats["in_flight_count"] == 0
