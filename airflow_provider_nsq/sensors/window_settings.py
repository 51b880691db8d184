"""The sizes of a sensor's consume window (``min_messages``, ``max_messages``,
``window_timeout``), checked the same way when the DAG is parsed (literal values) and
when the task runs (values rendered from templates, which arrive as strings such as
``"10"`` or ``"2.5"``)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from ..client.settings.values import duration_to_seconds, is_templated
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT
from ..protocol.errors import NSQValueError
from ..protocol.value_checks import is_int

#: nsqd's default --max-rdy-count: a window holds all its messages in flight at once.
MAX_WINDOW_MESSAGES = DEFAULT_MAX_RDY_COUNT

WindowTimeout = datetime.timedelta | float | str


@dataclass(frozen=True, slots=True)
class WindowSettings:
    """Checked window sizes."""

    min_messages: int
    max_messages: int
    window_timeout: float  # seconds


def message_count(name: str, value: object) -> int:
    """A message count: an int >= 1, or a rendered string of digits."""
    count = value
    if isinstance(value, str) and value.strip().isdigit():
        count = int(value.strip())
    if not is_int(count) or count < 1:  # the error shows the value as given ('0')
        raise NSQValueError(f"{name} must be an int >= 1, got {value!r}")
    return count


def window_timeout_seconds(value: object) -> float:
    """``window_timeout`` as float seconds: a number, a ``timedelta`` or a rendered
    number."""
    return duration_to_seconds(value, "window_timeout")


def check_window_settings(
    min_messages: object, max_messages: object, window_timeout: object
) -> WindowSettings:
    """All three checked, and against each other; the error names the bad value."""
    low = message_count("min_messages", min_messages)
    high = message_count("max_messages", max_messages)
    if high > MAX_WINDOW_MESSAGES:
        raise NSQValueError(
            f"max_messages={high} exceeds nsqd's max RDY count of "
            f"{MAX_WINDOW_MESSAGES}: a window holds all its messages in flight"
        )
    if low > high:
        raise NSQValueError(f"min_messages={low} is more than max_messages={high}")
    return WindowSettings(low, high, window_timeout_seconds(window_timeout))


def check_literal_window_settings(
    min_messages: object, max_messages: object, window_timeout: object
) -> None:
    """At DAG parse: check what is not a template now (each value, and the pair when
    both are literal); templated values are checked once rendered."""
    literal = {
        name: value
        for name, value in (
            ("min_messages", min_messages),
            ("max_messages", max_messages),
            ("window_timeout", window_timeout),
        )
        if not is_templated(value)
    }
    if len(literal) == 3:
        check_window_settings(min_messages, max_messages, window_timeout)
        return
    for name in ("min_messages", "max_messages"):
        if name in literal:
            message_count(name, literal[name])
    if "window_timeout" in literal:
        window_timeout_seconds(literal["window_timeout"])
    if "max_messages" in literal:
        check_window_settings(1, literal["max_messages"], 1.0)


def stored_window_timeout(window_timeout: WindowTimeout) -> float | str:
    """What the sensor keeps for ``window_timeout`` until it runs: seconds, or the
    template."""
    if isinstance(window_timeout, str) and is_templated(window_timeout):
        return window_timeout
    return window_timeout_seconds(window_timeout)
