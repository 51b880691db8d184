"""Pieces both drivers share: building the protocol core from a config, the consume
window's checks, and the idle deadline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from ..protocol.connection import ClientConnection
from ..protocol.errors import NSQError, NSQServerError, NSQValueError
from ..protocol.frames import Message
from .config import ClientConfig
from .message import NSQMessage

AckMode = Literal["fin", "req", "manual"]
ACK_MODES: tuple[str, ...] = ("fin", "req", "manual")


def new_core(config: ClientConfig, message_class: type[Message]) -> ClientConnection:
    secret = config.auth_secret.encode() if config.auth_secret else None
    return ClientConnection(
        identify=config.identify_fields(),
        auth_secret=secret,
        max_msg_size=config.max_msg_size,
        max_body_size=config.max_body_size,
        max_req_timeout_ms=config.max_req_timeout_ms,
        message_class=message_class,
    )


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


def idle_limit_s(config: ClientConfig) -> float | None:
    """Seconds of client silence after which nsqd may already have dropped us.

    nsqd closes a connection it has not read a command from for 2 x heartbeat_interval
    (FACTS.md section 7); we stop trusting it a margin before that.
    """
    hb = config.effective_heartbeat_interval_ms
    if hb <= 0:
        return None
    margin = min(hb / 2, 5000)
    return (2 * hb - margin) / 1000


def with_context(exc: NSQError, suffix: str) -> NSQError:
    """A copy of ``exc`` (same class, same code) whose message ends with ``suffix``."""
    if isinstance(exc, NSQServerError):
        return type(exc)(exc.code, f"{exc.description} {suffix}".strip())
    return type(exc)(f"{exc} {suffix}")


def respond_all(
    core: ClientConnection, messages: Sequence[NSQMessage], command: str, delay_ms: int = 0
) -> None:
    """Queue FIN, REQ or TOUCH for every message not yet FIN'd or REQ'd (one write)."""
    todo = [m for m in messages if not m._responded]
    if not todo:
        return
    if command == "FIN":
        core.fin_many([m.raw_id for m in todo])
    elif command == "REQ":
        for m in todo:
            core.req(m.raw_id, delay_ms)
    else:
        for m in todo:
            core.touch(m.raw_id)
        return
    for m in todo:
        m._responded = True


class _Acknowledger(Protocol):
    def finish(self, *messages: NSQMessage) -> None: ...

    def requeue(self, *messages: NSQMessage, delay_ms: int = 0) -> None: ...


def settle_window(
    driver: _Acknowledger,
    got: list[NSQMessage],
    stragglers: list[NSQMessage],
    max_messages: int,
    ack: AckMode,
    requeue_delay_ms: int,
) -> list[NSQMessage]:
    """End a consume window: keep stragglers that fit (nsqd sent them before it read
    CLS), REQ any beyond ``max_messages``, then apply ``ack`` to the window's messages."""
    room = max_messages - len(got)
    got = got + stragglers[:room]
    if stragglers[room:]:
        driver.requeue(*stragglers[room:])
    if ack == "fin":
        driver.finish(*got)
    elif ack == "req":
        driver.requeue(*got, delay_ms=requeue_delay_ms)
    return got
