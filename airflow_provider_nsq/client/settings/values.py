"""Setting values as users write them, read the same way everywhere: a connection's
extras and URI query, Spark options, operator and sensor arguments, command-line flags.

Each function takes the value as given (text, or already the Python type) and raises
:class:`NSQValueError` saying what it expected and what it got; the caller names the
setting (``extra 'tls'``, ``option 'read_timeout'``, ``window_timeout``).
"""

from __future__ import annotations

import datetime
import math

from ...protocol.errors import NSQValueError
from ...protocol.value_checks import is_bool, is_int, is_number, is_seconds

__all__ = [
    "delay_to_ms",
    "duration_to_seconds",
    "parse_bool",
    "parse_int",
    "parse_seconds",
]

#: A delay as users give it: whole milliseconds (NSQ's unit) or a timedelta.
Delay = datetime.timedelta | int
#: A wait as users give it: seconds (Airflow's unit) or a timedelta.
Duration = datetime.timedelta | float

# Go's strconv.ParseBool, which nsqd's own flags use: one set of words everywhere.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(value: object) -> bool:
    """``True``/``False``, or the text ``true``/``false`` (also ``1``/``0``, ``t``/``f``,
    ``TRUE``/``FALSE``, ``True``/``False``, as Go reads a flag); the numbers 1 and 0 too,
    as Airflow >= 3.1 hands over a connection URI's ``?tls_verify=1`` (it decodes query
    values as JSON)."""
    if is_bool(value):
        return value
    if is_int(value) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise NSQValueError(f"must be true or false, got {value!r}")


def parse_int(value: object) -> int:
    """A whole number: an int, or its decimal text."""
    if is_int(value):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            pass
    raise NSQValueError(f"must be a whole number, got {value!r}")


def parse_seconds(value: object) -> float:
    """A duration in seconds, finite and > 0: a number, its decimal text, or a
    ``timedelta``."""
    seconds = math.nan
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif is_number(value):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = float(value.strip())
        except ValueError:
            pass
    if not is_seconds(seconds):
        raise NSQValueError(f"must be a number of seconds > 0, got {value!r}")
    return seconds


def delay_to_ms(delay: object, what: str = "delay") -> int:
    """A DPUB or REQ delay as whole milliseconds: an int (ms) or a ``timedelta``.

    Only the type and sign are checked here; the upper bound is the connection's
    ``max_req_timeout_ms`` (nsqd's --max-req-timeout), checked before sending.
    """
    if isinstance(delay, datetime.timedelta):
        one_ms = datetime.timedelta(milliseconds=1)
        if delay % one_ms:
            raise NSQValueError(f"{what} {delay!r} is not a whole number of milliseconds")
        ms = delay // one_ms
    elif is_int(delay):
        ms = delay
    else:
        raise NSQValueError(
            f"{what} must be a timedelta or whole milliseconds (int), got {delay!r}"
        )
    if ms < 0:
        raise NSQValueError(f"{what} must not be negative, got {ms} ms")
    return ms


def duration_to_seconds(value: object, what: str) -> float:
    """A wait as float seconds: a number of seconds or a ``timedelta``; must be > 0."""
    try:
        return parse_seconds(value)
    except NSQValueError as exc:
        raise NSQValueError(f"{what} {exc}") from None
