"""``NSQConsumer``: the consumer's sequences (:mod:`.sequences`), run on blocking sockets
by :class:`~..runners.blocking_runner.BlockingRunner`: every nsqd connected at once over one
selector, nsqlookupd asked with one short-lived thread per lookupd, a wait on a selector
over every connection's socket that reads what arrived, CLS, close.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..drivers.blocking_driver import NSQConnection
from ..runners.blocking_runner import BlockingRunner
from ..runners.steps import Runnable, Step, WriteStep
from .sequences import ConsumerSteps

P = ParamSpec("P")
T = TypeVar("T")


def blocking(
    steps: Callable[Concatenate[ConsumerSteps[NSQConnection], P], Runnable[Step[NSQConnection], T]],
) -> Callable[Concatenate[NSQConsumer, P], T]:
    """The sequence ``steps`` as a plain method that runs it on the blocking runner and
    returns what it returns."""

    @functools.wraps(steps)
    def call(self: NSQConsumer, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._runner.run(steps(self, *args, **kwargs))

    call.__name__ = call.__qualname__ = steps.__name__.removesuffix("_steps")
    return call


class NSQConsumer(ConsumerSteps[NSQConnection]):
    """A blocking consumer of one topic/channel over every nsqd that has it (see
    :mod:`~airflow_provider_nsq.client.consumer.sequences` for what it guarantees, and
    :class:`~.sequences.ConsumerSteps` for its arguments).

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
        across them (see :meth:`~.sequences.ConsumerSteps.start_steps`). Returns the
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
