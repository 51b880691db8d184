"""A consume window (SUB, RDY, collect, CLS) as both drivers run it: the arguments'
checks and how the window's messages are settled at its end."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..protocol.errors import NSQValueError
from .message import NSQMessage

AckMode = Literal["fin", "req", "manual"]
ACK_MODES: tuple[str, ...] = ("fin", "req", "manual")


def check_window(max_messages: object, timeout: object, ack: object, max_rdy_count: int) -> None:
    """Validate a consume window's arguments, naming the bad one."""
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise NSQValueError(f"max_messages must be an int >= 1, got {max_messages!r}")
    if max_messages > max_rdy_count:
        raise NSQValueError(
            f"max_messages={max_messages} exceeds nsqd's max RDY count of {max_rdy_count} "
            "(--max-rdy-count): a window holds all its messages in flight until it ends"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise NSQValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    if ack not in ACK_MODES:
        raise NSQValueError(f"ack must be one of {', '.join(ACK_MODES)}, got {ack!r}")


@dataclass(frozen=True, slots=True)
class Window:
    """One consume window: the arguments :meth:`consume` took, and the messages it got."""

    topic: str
    channel: str
    max_messages: int
    timeout: float
    ack: AckMode
    requeue_delay_ms: int
    got: list[NSQMessage] = field(default_factory=list)

    def waits(self) -> Iterator[float]:
        """How long each wait may last: until the window holds ``max_messages`` or
        ``timeout`` seconds have passed since the first wait."""
        deadline = time.monotonic() + self.timeout
        while len(self.got) < self.max_messages:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            yield remaining


class _Acknowledger(Protocol):
    def finish(self, *messages: NSQMessage) -> None: ...

    def requeue(self, *messages: NSQMessage, delay_ms: int = 0) -> None: ...


def settle(
    got: list[NSQMessage], stragglers: list[NSQMessage], max_messages: int
) -> tuple[list[NSQMessage], list[NSQMessage]]:
    """How a consume window ends: the messages it returns (what it got, and the
    stragglers nsqd sent before it read CLS, while they fit ``max_messages``) and the
    stragglers beyond that (to REQ)."""
    room = max_messages - len(got)
    return got + stragglers[:room], stragglers[room:]


def settle_window(
    driver: _Acknowledger,
    got: list[NSQMessage],
    stragglers: list[NSQMessage],
    max_messages: int,
    ack: AckMode,
    requeue_delay_ms: int,
) -> list[NSQMessage]:
    """End a consume window (:func:`settle`): REQ the stragglers beyond
    ``max_messages``, then apply ``ack`` to the window's messages."""
    got, extra = settle(got, stragglers, max_messages)
    if extra:
        driver.requeue(*extra)
    if ack == "fin":
        driver.finish(*got)
    elif ack == "req":
        driver.requeue(*got, delay_ms=requeue_delay_ms)
    return got
