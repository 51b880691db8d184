"""Setting values as users write them, read the same way everywhere: a connection's
extras and URI query, Spark options, operator and sensor arguments, command-line flags.

Each function takes the value as given (text, or already the Python type) and raises
:class:`NSQValueError` saying what it expected and what it got; the caller names the
setting (``extra 'tls'``, ``option 'read_timeout'``, ``window``).
"""

from __future__ import annotations

import datetime
import math

from ..protocol.errors import NSQValueError

# Go's strconv.ParseBool, which nsqd's own flags use: one set of words everywhere.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(value: object) -> bool:
    """``True``/``False``, or the text ``true``/``false`` (also ``1``/``0``, ``t``/``f``,
    ``TRUE``/``FALSE``, ``True``/``False``, as Go reads a flag); the numbers 1 and 0 too,
    as Airflow >= 3.1 hands over a connection URI's ``?tls_verify=1`` (it decodes query
    values as JSON)."""
    if isinstance(value, bool):
        return value
    if type(value) is int and value in (0, 1):
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
    if isinstance(value, int) and not isinstance(value, bool):
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
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = float(value.strip())
        except ValueError:
            pass
    if not math.isfinite(seconds) or seconds <= 0:
        raise NSQValueError(f"must be a number of seconds > 0, got {value!r}")
    return seconds
