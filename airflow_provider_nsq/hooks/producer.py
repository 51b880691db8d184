"""``NSQProducerHook``: publishing through an ``nsq`` Connection: PUB, DPUB and MPUB over
the connection's ordered failover list of nsqds (:class:`~..client.producer.NSQProducer`),
on one connection kept for the life of the hook."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..client.bodies import encode_bodies, encode_body
from ..client.drivers.blocking_driver import NSQConnection
from ..client.producer import NSQProducer
from ..client.settings.values import Delay, delay_to_ms
from ..protocol.errors import NSQValueError
from ..protocol.names import validate_topic_name
from ..protocol.value_checks import check_delay_ms
from .base import NSQBaseHook


class NSQProducerHook(NSQBaseHook):
    """Publish to NSQ through an Airflow Connection of type ``nsq``.

    Publishing calls share one connection, opened on first use and kept for the life of
    the hook (reopened transparently if nsqd closed it); :meth:`close` closes it.

    :param nsq_conn_id: the Airflow Connection id (type ``nsq``).
    """

    def __init__(self, nsq_conn_id: str = NSQBaseHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(nsq_conn_id=nsq_conn_id, **kwargs)
        self._publisher: NSQProducer | None = None

    def get_producer(self) -> NSQProducer:
        """The publisher over :attr:`nsqd_tcp_addresses` (created on first use, then
        reused): the first nsqd that accepts a connection takes the publishes."""
        self._in_own_process()
        if self._publisher is None:
            self._publisher = NSQProducer(self.nsqd_tcp_addresses, self.get_client_config())
        return self._publisher

    def get_conn(self) -> NSQConnection:
        """The publishing connection, connected (opened on first use, then reused)."""
        return self.get_producer().connection()

    def _forget_connections(self) -> None:
        self._publisher = None
        super()._forget_connections()

    def close(self) -> None:
        """Close the publishing connection (after what the other roles close)."""
        self._in_own_process()
        super().close()
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def get_server_info(self) -> dict:
        """nsqd's IDENTIFY response (``{"response": "OK"}`` without feature negotiation)."""
        return self.get_conn().server_info

    def publish(self, topic: str, message: Any) -> dict[str, Any]:
        """PUB one message; returns after nsqd's OK.

        :param topic: the topic name.
        :param message: str (sent as UTF-8), bytes, or a dict/list (sent as compact JSON).
        :return: ``{"topic": topic, "messages": 1, "bytes": <body size>}``.
        """
        validate_topic_name(topic)  # a bad name is refused before connecting
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
        validate_topic_name(topic)
        delay_ms = delay_to_ms(delay)
        body = encode_body(message)
        config = self.get_client_config()
        check_delay_ms(delay_ms, config.max_req_timeout_ms, what="defer_publish delay")
        self.get_producer().defer_publish(topic, body, delay_ms)
        self.log.debug(
            "Published 1 deferred message (%s bytes, delay %s ms) to topic %s",
            len(body),
            delay_ms,
            topic,
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
        validate_topic_name(topic)
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
            len(bodies),
            total,
            frames,
            topic,
        )
        return {"topic": topic, "messages": len(bodies), "bytes": total}
