"""Plain values checked one way in every layer: booleans, whole numbers, seconds, delays.

Python's ``bool`` is an ``int`` (``isinstance(True, int)`` holds, and JSON's ``true``
decodes to it), so every "is this a whole number?" must leave booleans out. This module
is the one place that does; the encoders here, the client, the Airflow classes and the
Spark options all ask it.

Two forms of each check:

- predicates (:func:`is_bool`, :func:`is_int`, :func:`is_number`, :func:`is_seconds`)
  for code that branches on a value's type or words its own error (a field of a server's
  answer, a setting's description);
- checkers (:func:`check_bool`, :func:`check_int`, :func:`check_seconds`,
  :func:`check_delay_ms`) that return the value or raise
  :class:`~.errors.NSQValueError` naming ``what`` and the value given:
  ``max_messages must be an int >= 1, got True``.

A duration given as a ``timedelta`` or as text is read by the client's setting values
(``client/setting_values.py``), which ask :func:`check_seconds` for the number.
"""

from __future__ import annotations

import math
from typing import TypeGuard

from .errors import NSQValueError


def is_bool(value: object) -> TypeGuard[bool]:
    """True for ``True`` and ``False`` only (not ``0`` or ``1``)."""
    return isinstance(value, bool)


def is_int(value: object) -> TypeGuard[int]:
    """True for an ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """True for an ``int`` or ``float`` that is not a ``bool`` (NaN and inf included)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_seconds(value: object) -> TypeGuard[int | float]:
    """True for a number of seconds a wait can take: finite and > 0 (not a ``bool``)."""
    return is_number(value) and math.isfinite(value) and value > 0


def int_range(minimum: int | None = None, maximum: int | None = None) -> str:
    """The bounds of a whole number in words: ``1-9``, ``>= 1``, ``<= 2500``, or ``""``."""
    if minimum is not None and maximum is not None:
        return f"{minimum}-{maximum}"
    if minimum is not None:
        return f">= {minimum}"
    if maximum is not None:
        return f"<= {maximum}"
    return ""


def check_bool(value: object, what: str) -> bool:
    """``value`` if it is ``True`` or ``False``.

    :param value: the value given.
    :param what: what it is, for the error (``"tls"``, ``"deferrable"``).
    :raises NSQValueError: ``<what> must be true or false, got <value>``.
    """
    if not is_bool(value):
        raise NSQValueError(f"{what} must be true or false, got {value!r}")
    return value


def check_int(
    value: object, what: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) within the bounds given.

    :param value: the value given.
    :param what: what it is, for the error (``"max_messages"``, ``"RDY count"``).
    :param minimum: the smallest value allowed (None: no lower bound).
    :param maximum: the largest value allowed (None: no upper bound).
    :raises NSQValueError: ``<what> must be an int 1-2500, got 0``.
    """
    if (
        not is_int(value)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        span = int_range(minimum, maximum)
        raise NSQValueError(f"{what} must be an int{' ' + span if span else ''}, got {value!r}")
    return value


def check_seconds(value: object, what: str, *, maximum: float | None = None) -> float:
    """``value`` as float seconds if it is a finite number > 0 (not a ``bool``), and at
    most ``maximum``.

    :param value: the value given (a number; see the module docstring for timedeltas).
    :param what: what it is, for the error (``"timeout"``, ``"lookupd_poll_interval"``).
    :param maximum: the longest wait allowed, in seconds (None: no upper bound).
    :raises NSQValueError: ``<what> must be a number of seconds > 0, got 'soon'``.
    """
    if not is_seconds(value) or (maximum is not None and value > maximum):
        most = "" if maximum is None else f" and at most {maximum:g}"
        raise NSQValueError(f"{what} must be a number of seconds > 0{most}, got {value!r}")
    return float(value)


def check_delay_ms(delay_ms: object, max_delay_ms: int, what: str = "DPUB delay") -> int:
    """``delay_ms`` if it is whole milliseconds (an ``int``) in ``0..max_delay_ms`` (nsqd's
    ``--max-req-timeout``, the connection's ``max_req_timeout_ms``); never clamped.

    :param delay_ms: the delay given.
    :param max_delay_ms: the longest delay nsqd accepts, in milliseconds.
    :param what: what it is, for the error (``"DPUB delay"``, ``"requeue_delay"``).
    :raises NSQValueError: ``<what> 5000 ms is out of range 0-1000 ms (nsqd --max-req-timeout)``.
    """
    if not is_int(delay_ms):
        raise NSQValueError(f"{what} must be whole milliseconds (int), got {delay_ms!r}")
    if not 0 <= delay_ms <= max_delay_ms:
        raise NSQValueError(
            f"{what} {delay_ms} ms is out of range 0-{max_delay_ms} ms (nsqd --max-req-timeout)"
        )
    return delay_ms
