"""Steps: the I/O a sequence asks for, so that what both the blocking and the asyncio
client do is written once.

A sequence (the consumer's window, stream and close; nsqd's HTTP API; an nsqlookupd
lookup; a channel's depth) is a generator that yields steps and is sent their outcomes,
or has their error thrown in. It never touches a socket and never reads the clock: where
it needs the time, it asks (:data:`NOW`), or a step's outcome carries it. One runner per
I/O style performs the steps, each its own way, and is the only code that waits:

==============  ==========================================  ==============================
step            :class:`~.blocking_runner.BlockingRunner`   :class:`~.asyncio_runner.AsyncRunner`
==============  ==========================================  ==============================
Now             ``time.monotonic()``                        the same
HTTPRequest     one socket, h11 (``http.send_request``)     one stream, h11
Gather          one short-lived thread per sequence,        one task per sequence
                joined before it returns
Connect         every TCP connect and handshake at once     one task per nsqd
                over a selector, then SUB each
Wait            a selector over the sockets; reads them     the connections' wake-ups
Send            the drivers' writes (RDY, FIN, REQ, TOUCH)  the same writes (into the
                                                            transports' buffers)
StartClose      CLS each; reads what came before            CLS every connection at once
                CLOSE_WAIT
Close           close each                                  close each
Abort           drop each at once                           the same (without the loop)
==============  ==========================================  ==============================

Both runners carry the same outcomes: a connection that could not be opened is the
:class:`NSQError` that stopped it; anything else (an interrupt, a cancellation, a bug) is
raised, after closing what the step opened.

Steps are typed by the connections they name (``C``: the blocking driver's or the
asyncio driver's), and each runner takes only sequences of its own (:data:`Step`),
:meth:`~.asyncio_runner.AsyncRunner.run_now` only those that never wait
(:data:`WriteStep`): a sequence a runner cannot run is a type error, found by mypy.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, Never, Protocol, TypeAlias, TypeVar

from ...protocol.errors import NSQError
from ..message import NSQMessage, by_connection
from ..transport.http_request import HTTPRequest, HTTPResponse

if TYPE_CHECKING:
    from ..settings.client_config import ClientConfig

__all__ = [
    "NOW",
    "Abort",
    "Close",
    "Connect",
    "Gather",
    "HTTPStep",
    "HTTPSteps",
    "Now",
    "Opened",
    "Runnable",
    "Send",
    "StartClose",
    "Step",
    "Steps",
    "Verb",
    "Wait",
    "Writable",
    "Write",
    "WriteStep",
    "WriteSteps",
    "answers",
    "drive",
    "fail_on_error",
    "send",
]

#: The connections a step names: the driver of the runner that performs it
#: (:class:`~..drivers.blocking_driver.NSQConnection` or
#: :class:`~..drivers.asyncio_driver.AsyncNSQConnection`).
C = TypeVar("C", covariant=True)
#: What each sequence of a :class:`Gather` returns.
R = TypeVar("R", covariant=True)
S = TypeVar("S")
T = TypeVar("T")


class Writable(Protocol):
    """What :class:`Send` and :class:`Abort` use of a connection, the same in both
    drivers (:class:`~..drivers.base.AnsweringDriver`): the commands nsqd does not
    answer, written at once, and dropping the connection."""

    @property
    def config(self) -> ClientConfig: ...

    def ready(self, count: int) -> None: ...

    def finish(self, *messages: NSQMessage) -> None: ...

    def requeue(self, *messages: NSQMessage, delay_ms: int = 0) -> None: ...

    def touch(self, *messages: NSQMessage) -> None: ...

    def abort(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Now:
    """What time is it. Outcome: ``time.monotonic()`` seconds (a sequence never reads
    the clock itself, so a test can run it on a clock of its own)."""


#: The one :class:`Now` step.
NOW = Now()


@dataclass(frozen=True, slots=True)
class Gather(Generic[R]):
    """Run these sequences at the same time. Outcome: per sequence, in order, what it
    returned or the :class:`NSQError` that ended it (any other exception is raised).

    Only for sequences of :class:`~..transport.http_request.HTTPRequest` and
    :class:`Gather` steps (HTTP calls, :data:`HTTPStep`): the blocking runner runs each
    on a thread of its own.
    """

    sequences: tuple[Runnable[HTTPStep, R], ...]


@dataclass(frozen=True, slots=True)
class Connect(Generic[C]):
    """Open one connection per config at the same time, run its handshake and SUB it to
    ``topic``/``channel``. Outcome: :class:`Opened`, of the runner's connections (``C``).
    The asyncio runner sets each connection's ``on_wake`` (a :class:`Wait` ends when one
    wakes)."""

    configs: tuple[ClientConfig, ...]
    topic: str
    channel: str


@dataclass(frozen=True, slots=True)
class Opened(Generic[C]):
    """What :class:`Connect` did: per config, in order, the subscribed connection or the
    :class:`NSQError` that stopped it (that connection is closed); and the time it ended
    (``time.monotonic()`` seconds)."""

    results: tuple[C | NSQError, ...]
    now: float


@dataclass(frozen=True, slots=True)
class Wait(Generic[C]):
    """Wait up to ``timeout`` seconds for one of ``connections`` to deliver or fail (none
    given: just wait). The blocking runner reads what arrived (answering heartbeats as it
    does); the asyncio event loop reads all the time. Outcome: the time the wait ended
    (``time.monotonic()`` seconds)."""

    timeout: float
    connections: tuple[C, ...]


Verb = Literal["RDY", "FIN", "REQ", "TOUCH"]


@dataclass(frozen=True, slots=True)
class Write:
    """One command on one connection: ``RDY count``, or FIN, REQ (after ``count``
    milliseconds) or TOUCH of ``messages`` (all delivered on that connection), in one
    write."""

    connection: Writable
    verb: Verb
    messages: Sequence[NSQMessage] = ()
    count: int = 0


@dataclass(frozen=True, slots=True)
class Send:
    """Write these commands, none waiting for an answer (nsqd answers none of them).
    Outcome: per write, in order, None or the :class:`NSQError` it raised."""

    writes: tuple[Write, ...]


@dataclass(frozen=True, slots=True)
class StartClose(Generic[C]):
    """CLS each connection and wait for nsqd's CLOSE_WAIT (the blocking runner then reads
    what nsqd sent before it). Outcome: per connection, None or the :class:`NSQError`."""

    connections: tuple[C, ...]


@dataclass(frozen=True, slots=True)
class Close(Generic[C]):
    """Close each connection (it REQs what it still holds itself). Outcome: None."""

    connections: tuple[C, ...]


@dataclass(frozen=True, slots=True)
class Abort:
    """Drop each connection at once, answering nothing (connections that failed): no
    waiting, so both runners do it without the event loop. Outcome: None."""

    connections: tuple[Writable, ...]


# The aliases are strings: only a type checker reads them, and the module imports
# without building them (the hook imports it).

#: Every step, on connections of type ``C``: what a runner of ``C`` connections performs.
Step: TypeAlias = (
    "Now | HTTPRequest | Gather[object] | Connect[C] | Wait[C] | Send | StartClose[C]"
    " | Close[C] | Abort"
)
#: The steps of HTTP calls: either runner performs them, and they alone go in a
#: :class:`Gather`.
HTTPStep: TypeAlias = "HTTPRequest | Gather[object]"
#: The steps done without waiting: what :meth:`~.asyncio_runner.AsyncRunner.run_now`
#: performs (the asyncio drivers' writes never wait).
WriteStep: TypeAlias = "Now | Send | Abort"

#: What a runner takes: a sequence that yields steps of type ``S`` and returns a ``T``,
#: whatever it reads of the outcomes it is sent. The type of a generator cannot tie what
#: it is sent to what it yielded: each step's class names its outcome, the runners send
#: exactly that, and a sequence declares the outcome of the steps it yields itself (the
#: ones it delegates to, ``yield from``, declare theirs).
Runnable: TypeAlias = "Generator[S, Never, T]"
#: A sequence on connections of type ``C`` that returns a ``T`` and reads the time (what
#: :class:`Now` and :class:`Wait` are answered). One that reads another step's outcome
#: says so: ``Generator[Connect[C], Opened[C], T]``.
Steps: TypeAlias = "Generator[Step[C], float, T]"
#: A sequence of steps done without waiting (:data:`WriteStep`) that returns a ``T``.
WriteSteps: TypeAlias = "Generator[WriteStep, float, T]"
#: A sequence of HTTP calls that returns a ``T`` (each request answered by its
#: :class:`~..transport.http_request.HTTPResponse`).
HTTPSteps: TypeAlias = "Generator[HTTPStep, HTTPResponse, T]"


def drive(steps: Runnable[S, T], perform: Callable[[S], object]) -> T:
    """Run ``steps`` to its end where every step is done by the time ``perform`` returns
    (the blocking runner; the asyncio runner for a sequence of writes): send each
    outcome back, or throw the step's error in; return what the sequence returns."""
    # ``perform`` answers each step with the outcome its class names (see Runnable).
    sequence: Generator[S, object, T] = steps  # type: ignore[assignment]
    try:
        step = next(sequence)
        while True:
            try:
                outcome = perform(step)
            except BaseException as exc:  # also an interrupt: the sequence cleans up
                step = sequence.throw(exc)
            else:
                step = sequence.send(outcome)
    except StopIteration as done:
        return done.value


def send(step: Send) -> list[NSQError | None]:
    """Perform a :class:`Send`, the same way in both runners: the drivers' RDY, FIN, REQ
    and TOUCH write at once (asyncio: into the transport's buffer, never waiting; blocking:
    a socket write, bounded by ``read_timeout``)."""
    outcomes: list[NSQError | None] = []
    for write in step.writes:
        conn = write.connection
        try:
            if write.verb == "RDY":
                conn.ready(write.count)
            elif write.verb == "FIN":
                conn.finish(*write.messages)
            elif write.verb == "REQ":
                conn.requeue(*write.messages, delay_ms=write.count)
            else:
                conn.touch(*write.messages)
        except NSQError as exc:
            outcomes.append(exc)
        else:
            outcomes.append(None)
    return outcomes


def answers(messages: Sequence[NSQMessage], verb: Verb, delay_ms: int = 0) -> tuple[Write, ...]:
    """FIN, REQ or TOUCH ``messages`` as writes: one per connection that delivered them
    (messages of a connection that is gone are left out, with a warning; the same
    grouping as :func:`~..message.answer`, which writes at once)."""
    return tuple(Write(conn, verb, group, delay_ms) for conn, group in by_connection(messages))


def fail_on_error(outcomes: Sequence[NSQError | None]) -> None:
    """Raise the first error among a :class:`Send`'s outcomes."""
    for outcome in outcomes:
        if outcome is not None:
            raise outcome
