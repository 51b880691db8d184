"""The one check of booleans, whole numbers and seconds every layer uses: a bool is never
a number, and each error names what was checked and the value given."""

from __future__ import annotations

import datetime
import math

import pytest

from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.protocol.value_checks import (
    check_bool,
    check_int,
    check_seconds,
    int_range,
    is_bool,
    is_int,
    is_number,
    is_seconds,
)


@pytest.mark.parametrize(
    ("value", "as_bool", "as_int", "as_number", "as_seconds"),
    [
        (True, True, False, False, False),
        (False, True, False, False, False),
        (0, False, True, True, False),
        (1, False, True, True, True),
        (-3, False, True, True, False),
        (2.5, False, False, True, True),
        (math.inf, False, False, True, False),
        (math.nan, False, False, True, False),
        ("1", False, False, False, False),
        (None, False, False, False, False),
        (datetime.timedelta(seconds=1), False, False, False, False),
    ],
)
def test_a_bool_is_never_a_number(value, as_bool, as_int, as_number, as_seconds) -> None:
    assert (is_bool(value), is_int(value), is_number(value), is_seconds(value)) == (
        as_bool,
        as_int,
        as_number,
        as_seconds,
    )


def test_check_int_returns_the_value_within_its_bounds() -> None:
    assert check_int(0, "n") == 0
    assert check_int(5, "n", minimum=1, maximum=5) == 5
    assert check_int(-(2**70), "n") == -(2**70)


@pytest.mark.parametrize(
    ("value", "bounds", "says"),
    [
        (True, {}, "max_messages must be an int, got True"),
        (0, {"minimum": 1}, "max_messages must be an int >= 1, got 0"),
        (2501, {"maximum": 2500}, "max_messages must be an int <= 2500, got 2501"),
        (1.0, {"minimum": 1, "maximum": 9}, "max_messages must be an int 1-9, got 1.0"),
        ("3", {"minimum": 1, "maximum": 9}, "max_messages must be an int 1-9, got '3'"),
    ],
)
def test_check_int_names_what_and_the_value(value, bounds, says) -> None:
    with pytest.raises(NSQValueError) as caught:
        check_int(value, "max_messages", **bounds)
    assert str(caught.value) == says


def test_check_seconds_returns_float_seconds() -> None:
    assert check_seconds(2, "timeout") == 2.0
    assert isinstance(check_seconds(2, "timeout"), float)
    assert check_seconds(0.5, "timeout", maximum=0.5) == 0.5


@pytest.mark.parametrize(
    ("value", "maximum", "says"),
    [
        (False, None, "timeout must be a number of seconds > 0, got False"),
        (0, None, "timeout must be a number of seconds > 0, got 0"),
        (math.inf, None, "timeout must be a number of seconds > 0, got inf"),
        ("5", None, "timeout must be a number of seconds > 0, got '5'"),
        (3601, 3600, "timeout must be a number of seconds > 0 and at most 3600, got 3601"),
    ],
)
def test_check_seconds_names_what_and_the_value(value, maximum, says) -> None:
    with pytest.raises(NSQValueError) as caught:
        check_seconds(value, "timeout", maximum=maximum)
    assert str(caught.value) == says


def test_check_bool_takes_only_true_and_false() -> None:
    assert check_bool(True, "tls") is True
    assert check_bool(False, "tls") is False
    for value in (0, 1, "true", None):
        with pytest.raises(NSQValueError, match=f"tls must be true or false, got {value!r}"):
            check_bool(value, "tls")


def test_int_range_words() -> None:
    assert [int_range(1, 9), int_range(1), int_range(maximum=5), int_range()] == [
        "1-9",
        ">= 1",
        "<= 5",
        "",
    ]
