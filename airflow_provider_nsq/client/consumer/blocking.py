"""``NSQConsumer``: the consumer core's sequences, run on blocking sockets.

Everything the consumer decides is in :mod:`.core`; this module only does the I/O each
step asks for: connect one nsqd after the other, ask nsqlookupd (one short-lived thread
per lookupd, :class:`~..lookupd.LookupdClient`), wait on a selector over every
connection's socket and read what arrived, CLS, close.
"""

from __future__ import annotations

import functools
import selectors
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from ...protocol.errors import NSQError
from ..blocking import NSQConnection
from ..config import ClientConfig
from .core import ConsumerCore
from .steps import CloseConnections, Connect, Lookup, StartClose, Step, Steps, Wait

P = ParamSpec("P")
T = TypeVar("T")


def blocking(
    steps: Callable[Concatenate[ConsumerCore[Any], P], Steps[T]],
) -> Callable[Concatenate[NSQConsumer, P], T]:
    """The core's sequence ``steps`` as a blocking method that returns its result."""

    @functools.wraps(steps)
    def call(self: NSQConsumer, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(steps(self, *args, **kwargs))

    call.__name__ = call.__qualname__ = steps.__name__.removesuffix("_steps")
    return call


class NSQConsumer(ConsumerCore[NSQConnection]):
    """A blocking consumer of one topic/channel over every nsqd that has it (see
    :mod:`~airflow_provider_nsq.client.consumer.core` for what it guarantees, and
    :class:`~.core.ConsumerCore` for its arguments).

    No threads (nsqlookupd is asked with one short-lived thread per lookupd): safe in
    tasks, forked workers and Spark executors. Not thread-safe.

    Every connection answers nsqd's heartbeats only while the consumer is reading:
    inside :meth:`consume` and :meth:`read`, or when :meth:`pump` is called. nsqd drops a
    client that has not answered for two heartbeat intervals (30 s each by default; the
    connection's ``heartbeat_interval_ms``).
    """

    def __init__(self, topic: str, channel: str, **kwargs: Any) -> None:
        super().__init__(topic, channel, **kwargs)
        self._selector: selectors.BaseSelector | None = None  # made at the first wait
        self._watched: tuple[NSQConnection, ...] = ()

    def __enter__(self) -> NSQConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    consume = blocking(ConsumerCore.consume_steps)
    read = blocking(ConsumerCore.read_steps)
    pump = blocking(ConsumerCore.pump_steps)

    def start(self, max_in_flight: int) -> NSQConsumer:
        """Connect to every nsqd, SUB, and allow ``max_in_flight`` messages in flight
        across them (see :meth:`~.core.ConsumerCore.start_steps`). Returns the consumer."""
        self._run(self.start_steps(max_in_flight))
        return self

    def close(self) -> None:
        """CLS (RDY 0), REQ everything delivered and unanswered, close every connection.
        Idempotent."""
        try:
            self._run(self.close_steps())
        finally:
            if self._selector is not None:
                self._selector.close()
                self._selector = None

    # -- the runner ----------------------------------------------------------------------

    def _run(self, steps: Steps[T]) -> T:
        """Drive one of the core's sequences to its end: do each step's I/O, send back its
        outcome (or throw its error in), return what the sequence returns."""
        try:
            step = next(steps)
            while True:
                try:
                    outcome = self._do(step)
                except BaseException as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(outcome)
        except StopIteration as done:
            return done.value

    def _do(self, step: Step) -> Any:
        if isinstance(step, Wait):
            return self._wait_for(step)
        if isinstance(step, Connect):
            return self._open_all(step)
        if isinstance(step, Lookup):
            return step.lookupd.lookup(step.topic)
        if isinstance(step, StartClose):
            return [self._start_close(conn) for conn in step.connections]
        assert isinstance(step, CloseConnections)
        for conn in step.connections:
            conn.close()
        return None

    def _wait_for(self, step: Wait) -> None:
        """Wait on every socket at once; read from each that has bytes (messages,
        heartbeats answered at once, nsqd's close)."""
        conns = step.connections
        if not conns:
            time.sleep(max(step.timeout, 0.0))
            return
        selector = self._selector
        if selector is None or conns is not self._watched:
            selector = self._watch(conns)
        # TLS may hold decrypted bytes the socket no longer shows as readable.
        ready = [c for c in conns if c.has_buffered_input] if self.config.tls else []
        if not ready:
            ready = [key.data for key, _ in selector.select(max(step.timeout, 0.0))]
        for conn in ready:
            try:
                conn.read_available()
            except NSQError:
                pass  # recorded as the connection's failure: the core drops it

    def _watch(self, conns: tuple[NSQConnection, ...]) -> selectors.BaseSelector:
        """A selector over exactly ``conns`` (new ones since the last wait)."""
        if self._selector is not None:
            self._selector.close()
        selector = self._selector = selectors.DefaultSelector()
        for conn in conns:
            if conn.fileno() >= 0:
                selector.register(conn, selectors.EVENT_READ, conn)
        self._watched = conns
        return selector

    def _open_all(self, step: Connect) -> list[NSQConnection | NSQError]:
        """One nsqd after the other; an NSQError is that nsqd's outcome, anything else
        (an interrupt) closes what this step opened and is raised."""
        outcomes: list[NSQConnection | NSQError] = []
        try:
            for config in step.configs:
                outcomes.append(_open(config, step.topic, step.channel))
        except BaseException:
            for outcome in outcomes:
                if isinstance(outcome, NSQConnection):
                    outcome.close()
            raise
        return outcomes

    def _start_close(self, conn: NSQConnection) -> NSQError | None:
        try:
            conn.start_close()
            conn.read_available()  # what nsqd sent before it read the CLS
        except NSQError as exc:
            return exc
        return None


def _open(config: ClientConfig, topic: str, channel: str) -> NSQConnection | NSQError:
    """A connection SUB'd to ``topic``/``channel``, or the NSQError that stopped it."""
    conn = NSQConnection(config)
    try:
        conn.connect()
        conn.subscribe(topic, channel)
    except BaseException as exc:
        conn.close()
        if isinstance(exc, NSQError):
            return exc
        raise
    return conn
