"""The one exponential backoff every retry in the provider uses."""

from __future__ import annotations

import pytest

from airflow_provider_nsq.client.backoff import Backoff
from airflow_provider_nsq.protocol.errors import NSQValueError


def test_waits_grow_by_the_factor_up_to_the_cap_and_reset_starts_again() -> None:
    backoff = Backoff(1.0, 10.0)
    assert [backoff.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    backoff.reset()
    assert backoff.next() == 1.0
    slower = Backoff(2.0, 30.0, factor=1.5)
    assert [slower.next() for _ in range(3)] == [2.0, 3.0, 4.5]


def test_a_first_wait_above_the_cap_waits_the_cap() -> None:
    backoff = Backoff(400.0, 300.0)
    assert [backoff.next(), backoff.next()] == [300.0, 300.0]


@pytest.mark.parametrize(
    ("start", "cap", "factor"), [(0, 1, 2), (1, 0, 2), (1, 2, 0.5), (-1, 2, 2)]
)
def test_nonsense_is_an_error_naming_the_values(start, cap, factor) -> None:
    with pytest.raises(NSQValueError, match=f"start={start!r}"):
        Backoff(start, cap, factor)


def test_the_nth_wait_is_what_the_nth_next_returns():
    backoff = Backoff(4, 300)
    waits = [backoff.next() for _ in range(9)]
    assert waits == [Backoff(4, 300).nth(n) for n in range(1, 10)]
    assert waits[:4] == [4, 8, 16, 32] and waits[-1] == 300
    with pytest.raises(NSQValueError, match="n=1"):
        backoff.nth(0)
