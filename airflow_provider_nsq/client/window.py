"""A consume window's arguments (checked, each named when wrong), the messages it got,
and how they are settled at its end. The consumer runs windows
(:mod:`.consumer.windows`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..protocol.errors import NSQValueError
from ..protocol.value_checks import check_int, check_seconds
from .message import NSQMessage

AckMode = Literal["fin", "req", "manual"]
ACK_MODES: tuple[str, ...] = ("fin", "req", "manual")


def check_window(max_messages: object, timeout: object, ack: object, max_rdy_count: int) -> None:
    """Validate a consume window's arguments, naming the bad one."""
    count = check_int(max_messages, "max_messages", minimum=1)
    if count > max_rdy_count:
        raise NSQValueError(
            f"max_messages={count} exceeds nsqd's max RDY count of {max_rdy_count} "
            "(--max-rdy-count): a window holds all its messages in flight until it ends"
        )
    check_seconds(timeout, "timeout")
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


def settle(
    got: list[NSQMessage], stragglers: list[NSQMessage], max_messages: int
) -> tuple[list[NSQMessage], list[NSQMessage]]:
    """How a consume window ends: the messages it returns (what it got, and the
    stragglers nsqd sent before it read CLS, while they fit ``max_messages``) and the
    stragglers beyond that (to REQ)."""
    room = max_messages - len(got)
    return got + stragglers[:room], stragglers[room:]
