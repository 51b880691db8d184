"""``NSQProducerHook``: publishing through an ``nsq`` Connection: PUB, DPUB and MPUB over
the connection's ordered failover list of nsqds
(:class:`~airflow_provider_nsq.client.producer.NSQProducer`). The publish operators use
it, as the Kafka provider's operators use its producer hook."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ..client.bodies import encode_bodies, encode_body
from ..client.drivers.blocking_driver import NSQConnection
from ..client.producer import NSQProducer
from ..client.settings.values import Delay, delay_to_ms
from ..protocol.errors import NSQValueError
from ..protocol.value_checks import check_delay_ms
from .base import NSQBaseHook

__all__ = ["NSQProducerHook"]


class NSQProducerHook(NSQBaseHook):
    """Publish to NSQ through an Airflow Connection of type ``nsq``.

    The Connection is read once, on the first publish. Publishing calls share one
    connection to nsqd, opened on first use and kept until :meth:`close` (reopened
    transparently if nsqd closed it); a publish after :meth:`close` opens a new one.

    A process forked after the hook published (a Celery worker's task process, a
    multiprocessing child) opens a connection of its own on its first publish: it never
    writes to, reads from or closes the parent's (a PUB there would take the parent's
    replies).

    Each call checks the topic name once, in the protocol's encoder, before anything is
    written (operators check theirs when the DAG is parsed, or once rendered).

    :param nsq_conn_id: the Airflow Connection id (type ``nsq``).
    """

    def __init__(self, nsq_conn_id: str = NSQBaseHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(nsq_conn_id=nsq_conn_id, **kwargs)
        self._producer: NSQProducer | None = None
        self._producer_pid = 0  # the process the producer's connection belongs to

    def get_producer(self) -> NSQProducer:
        """The publisher over :attr:`nsqd_tcp_addresses` (created on first use, then
        reused): the first nsqd that accepts a connection takes the publishes."""
        producer = self._producer
        if producer is None or self._producer_pid != os.getpid():
            # First use, or this process was forked from the one that opened the
            # producer's connection: its socket is the parent's too. Dropped unused, this
            # process's copy closes; the parent's stays.
            settings = self.get_settings()
            producer = self._producer = NSQProducer(settings.nsqds, settings.client)
            self._producer_pid = os.getpid()
        return producer

    def get_conn(self) -> NSQConnection:
        """The publishing connection, connected (opened on first use, then reused)."""
        return self.get_producer().connection()

    def close(self) -> None:
        """Close the publishing connection (a later publish opens a new one)."""
        if self._producer is not None and self._producer_pid == os.getpid():
            self._producer.close()

    def get_server_info(self) -> dict:
        """nsqd's IDENTIFY response (``{"response": "OK"}`` without feature negotiation)."""
        return self.get_conn().server_info

    def publish(self, topic: str, message: Any) -> dict[str, Any]:
        """PUB one message; returns after nsqd's OK.

        :param topic: the topic name.
        :param message: str (sent as UTF-8), bytes, or a dict/list (sent as compact JSON).
        :return: ``{"topic": topic, "messages": 1, "bytes": <body size>}``.
        """
        body = encode_body(message)
        self.get_producer().publish(topic, body)
        # No log line: a task may publish thousands of single messages in a loop, and
        # Airflow's logger costs as much as the PUB itself; the operators log per task.
        return {"topic": topic, "messages": 1, "bytes": len(body)}

    def defer_publish(self, topic: str, message: Any, delay: Delay) -> dict[str, Any]:
        """DPUB one message that nsqd delivers ``delay`` after it is published.

        :param topic: the topic name.
        :param message: str, bytes, or a JSON-serialisable dict/list.
        :param delay: ``timedelta`` or whole milliseconds, 0 to the connection's
            ``max_req_timeout_ms`` (nsqd's --max-req-timeout, 1 h by default); never clamped.
        :return: ``{"topic", "messages": 1, "bytes", "delay_ms"}``.
        """
        delay_ms = delay_to_ms(delay)
        body = encode_body(message)
        config = self.get_client_config()
        check_delay_ms(delay_ms, config.max_req_timeout_ms, what="defer_publish delay")
        self.get_producer().defer_publish(topic, body, delay_ms)
        self.log.debug(
            "Published 1 deferred message (%s bytes, delay %s ms) to topic %s",
            *(len(body), delay_ms, topic),
        )
        return {"topic": topic, "messages": 1, "bytes": len(body), "delay_ms": delay_ms}

    def multi_publish(self, topic: str, messages: Iterable[Any]) -> dict[str, Any]:
        """MPUB a batch; returns after nsqd's OK for every frame.

        Batches bigger than nsqd's ``max_body_size`` are split into several MPUB frames;
        every body is checked before anything is sent.

        :param topic: the topic name.
        :param messages: str, bytes, or JSON-serialisable dict/list items.
        :return: ``{"topic", "messages": <count>, "bytes": <total body size>}``.
        """
        if isinstance(messages, (str, bytes, bytearray, memoryview, dict)):
            raise NSQValueError(
                f"messages must be a list of messages, got a single {type(messages).__name__}"
            )
        if not isinstance(messages, Iterable):
            raise NSQValueError(
                f"messages must be a list of messages, got {type(messages).__name__}"
            )
        bodies = encode_bodies(messages)
        if not bodies:
            raise NSQValueError("multi_publish needs at least one message")
        total = sum(map(len, bodies))
        frames = self.get_producer().multi_publish(topic, bodies)
        # debug, not info: a task may publish many batches; the operator logs once
        self.log.debug(
            "Published %s messages (%s bytes, %s MPUB frame(s)) to topic %s",
            *(len(bodies), total, frames, topic),
        )
        return {"topic": topic, "messages": len(bodies), "bytes": total}
