"""The one exponential backoff every retry in the provider uses, and the one reconnect
policy: full jitter, each wait drawn from 0 to its exponential ceiling."""

from __future__ import annotations

import random
import statistics

import pytest

from airflow_provider_nsq.client.backoff import (
    RECONNECT_MAX_S,
    RECONNECT_START_S,
    Backoff,
    reconnect_backoff,
)
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


def test_a_huge_n_waits_the_cap() -> None:
    assert Backoff(1, 60).nth(5000) == 60.0
    assert Backoff(1, 60).ceiling(5000) == 60.0


def test_full_jitter_draws_each_wait_from_zero_to_its_ceiling() -> None:
    backoff = Backoff(1.0, 60.0, jitter=True, rng=random.Random(25))
    ceilings = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    for _ in range(200):
        waits = [backoff.next() for _ in ceilings]
        assert all(0.0 <= wait <= ceiling for wait, ceiling in zip(waits, ceilings, strict=True))
        backoff.reset()
    # Spread over the whole range, not stuck at either end: 2000 draws under a 60 s
    # ceiling, seeded, land in every tenth of it, with a mean near half of it.
    draws = [backoff.nth(10) for _ in range(2000)]
    assert {int(wait // 6) for wait in draws} == set(range(10))
    assert 27.0 < statistics.mean(draws) < 33.0


def test_the_same_seed_draws_the_same_waits_and_nth_leaves_the_sequence_alone() -> None:
    first = Backoff(1.0, 60.0, jitter=True, rng=random.Random(7))
    second = Backoff(1.0, 60.0, jitter=True, rng=random.Random(7))
    assert [first.next() for _ in range(5)] == [second.next() for _ in range(5)]
    assert 0.0 <= first.nth(3) <= 4.0  # a draw below the 3rd ceiling ...
    second.rng.uniform(0.0, 4.0)  # (the same draw)
    # ... after which the sequence goes on at its 6th wait, below 32 s
    sixth = first.next()
    assert sixth == second.next() and 0.0 <= sixth <= 32.0


def test_the_reconnect_policy_is_one_jittered_backoff() -> None:
    backoff = reconnect_backoff(random.Random(1))
    assert (backoff.start, backoff.cap, backoff.jitter) == (
        RECONNECT_START_S,
        RECONNECT_MAX_S,
        True,
    )
    assert (RECONNECT_START_S, RECONNECT_MAX_S) == (1.0, 60.0)
    assert [backoff.ceiling(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert 0.0 <= backoff.next() <= 1.0
    assert "jitter=True" in repr(backoff)


def test_without_an_rng_the_draws_come_from_the_random_module() -> None:
    random.seed(3)
    drawn = Backoff(1.0, 8.0, jitter=True).nth(4)
    random.seed(3)
    assert drawn == random.uniform(0.0, 8.0)
