"""``NSQConsumer`` and ``AsyncNSQConsumer``: the consumer's sequences
(:mod:`._sequences`) run in each I/O style.

- :class:`NSQConsumer` runs them on blocking sockets
  (:class:`~..runners.blocking_runner.BlockingRunner`): every nsqd connected at once over
  one selector, nsqlookupd asked with one short-lived thread per lookupd, a wait on a
  selector over every connection's socket that reads what arrived, CLS, close.
- :class:`AsyncNSQConsumer` runs them on the asyncio event loop
  (:class:`~..runners.asyncio_runner.AsyncRunner`), without threads: every nsqd
  connected at once, a wait that ends when a connection wakes it (messages arrived, or
  it failed), every connection CLS'd at once. Heartbeats are answered by the event loop
  as they arrive, whatever the caller is doing.

Their methods that wait are the sequences made methods by the runner
(:func:`~..runners.blocking_runner.blocking`, :func:`~..runners.asyncio_runner.awaitable`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from ..drivers.asyncio_driver import AsyncNSQConnection
from ..drivers.blocking_driver import NSQConnection
from ..runners.asyncio_runner import AsyncRunner, awaitable
from ..runners.blocking_runner import BlockingRunner, blocking
from ..runners.steps import Runnable, WriteStep
from ._sequences import ConsumerSteps

T = TypeVar("T")


class NSQConsumer(ConsumerSteps[NSQConnection]):
    """A blocking consumer of one topic/channel over every nsqd that has it (see
    :mod:`~airflow_provider_nsq.client.consumer._sequences` for what it guarantees, and
    :class:`~._sequences.ConsumerSteps` for its arguments).

    No threads (nsqlookupd is asked with one short-lived thread per lookupd): safe in
    tasks, forked workers and Spark executors. Not thread-safe.

    Every connection answers nsqd's heartbeats only while the consumer is reading:
    inside :meth:`consume` and :meth:`read`, or when :meth:`pump` is called. nsqd drops a
    client that has not answered for two heartbeat intervals (30 s each by default; the
    connection's ``heartbeat_interval_ms``).
    """

    def __init__(self, topic: str, channel: str, **kwargs: Any) -> None:
        super().__init__(topic, channel, **kwargs)
        self._runner = BlockingRunner()

    def __enter__(self) -> NSQConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    consume = blocking(ConsumerSteps.consume_steps)
    read = blocking(ConsumerSteps.read_steps)
    pump = blocking(ConsumerSteps.pump_steps)

    def run_now(self, steps: Runnable[WriteStep, T]) -> T:
        """Run a sequence that only writes on the blocking runner."""
        return self._runner.run(steps)

    def start(self, max_in_flight: int) -> NSQConsumer:
        """Connect to every nsqd, SUB, and allow ``max_in_flight`` messages in flight
        across them (see :meth:`~._sequences.ConsumerSteps.start_steps`). Returns the
        consumer."""
        self._runner.run(self.start_steps(max_in_flight))
        return self

    def close(self) -> None:
        """CLS (RDY 0), REQ everything delivered and unanswered, close every connection.
        Idempotent."""
        try:
            self._runner.run(self.close_steps())
        finally:
            self._runner.close()


class AsyncNSQConsumer(ConsumerSteps[AsyncNSQConnection]):
    """The asyncio consumer: the same sequences and guarantees as :class:`NSQConsumer`
    (await ``consume``, ``start``, ``read`` and ``close``; ``set_max_in_flight``,
    ``touch_held`` and ``contact`` are plain calls).

    Heartbeats are answered by the event loop as they arrive; re-polling nsqlookupd,
    reconnecting and re-planning RDY happen inside :meth:`read`.
    """

    def __init__(self, topic: str, channel: str, **kwargs: Any) -> None:
        super().__init__(topic, channel, **kwargs)
        self._runner = AsyncRunner()

    async def __aenter__(self) -> AsyncNSQConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    consume = awaitable(ConsumerSteps.consume_steps)
    read = awaitable(ConsumerSteps.read_steps)
    close = awaitable(ConsumerSteps.close_steps)

    def run_now(self, steps: Runnable[WriteStep, T]) -> T:
        """Run a sequence that only writes, at once (the asyncio drivers' writes never
        wait); the others are awaited (``consume``, ``start``, ``read``, ``close``)."""
        return self._runner.run_now(steps)

    async def start(self, max_in_flight: int) -> AsyncNSQConsumer:
        """See :meth:`NSQConsumer.start`."""
        await self._runner.run(self.start_steps(max_in_flight))
        return self
