"""``plan_ready``: one in-flight budget over several nsqd connections."""

from __future__ import annotations

import itertools

import pytest

from airflow_provider_nsq.client.consumer._rdy_split import keep_within, plan_ready


def test_an_even_split_spreads_the_remainder_as_gnsq_does() -> None:
    assert plan_ready(10, [0, 0, 0], [2500] * 3, [True] * 3) == [4, 3, 3]
    assert plan_ready(10, [0, 0, 0], [2500] * 3, [True] * 3, offset=1) == [3, 4, 3]
    assert plan_ready(3, [0, 0, 0], [2500] * 3, [True] * 3) == [1, 1, 1]


def test_never_above_an_nsqds_max_rdy_count_the_rest_goes_elsewhere() -> None:
    assert plan_ready(100, [0, 0], [10, 2500], [True, True]) == [10, 90]
    assert plan_ready(100, [0, 0], [10, 20], [True, True]) == [10, 20]


def test_busy_connections_take_the_spare_quiet_ones_keep_one() -> None:
    # A stream (keep_one_each): the quiet nsqd keeps 1 so it is noticed when it has messages.
    assert plan_ready(30, [0, 0, 0], [2500] * 3, [True, False, True]) == [15, 1, 14]
    # A window: RDY parked on an empty nsqd is a message the window cannot take elsewhere.
    assert plan_ready(30, [5, 10, 10], [2500] * 3, [False, False, True], keep_one_each=False) == [
        5,
        10,
        15,
    ]


def test_what_is_held_stays_counted_and_a_full_budget_stops_delivery() -> None:
    assert plan_ready(10, [6, 0], [2500] * 2, [True, True]) == [8, 2]
    # Full: each keeps what it holds, so nsqd refills it as its messages are answered.
    assert plan_ready(10, [6, 4], [2500] * 2, [True, True]) == [6, 4]
    assert plan_ready(5, [6, 4], [2500] * 2, [True, True]) == [5, 0]  # the budget was lowered
    assert plan_ready(0, [3, 0], [2500] * 2, [True, True]) == [0, 0]  # paused


def test_rdy_taken_from_one_connection_goes_to_another_only_later() -> None:
    # RDY 6 -> 2 on the first: nsqd may have sent it 6 already, so the second waits.
    assert keep_within(10, [2, 8], [6, 4]) == [2, 4]
    assert keep_within(10, [2, 8], [2, 4]) == [2, 8]  # once that has settled
    assert keep_within(10, [5, 5, 0], [0, 0, 0]) == [5, 5, 0]  # nothing committed yet
    # Raises give way largest first; lowering is always possible.
    assert keep_within(6, [4, 3, 1], [2, 2, 2]) == [2, 2, 1]


def test_fewer_rdy_than_connections_go_in_turn() -> None:
    turns = [plan_ready(1, [0, 0, 0], [2500] * 3, [True] * 3, offset=o) for o in range(3)]
    assert turns == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    # A stream serves first the one that holds nothing: the others keep their share.
    assert plan_ready(6, [2, 0, 2], [2500] * 3, [True] * 3, offset=2) == [2, 1, 3]
    # A window serves a busy one first.
    assert plan_ready(1, [0, 0, 0], [9] * 3, [False, False, True], keep_one_each=False) == [0, 0, 1]


@pytest.mark.parametrize("keep_one_each", [True, False])
def test_the_sum_never_exceeds_the_budget_and_no_producer_starves(keep_one_each) -> None:
    for budget, n, offset in itertools.product(range(0, 40), range(1, 5), range(4)):
        for busy in itertools.product([True, False], repeat=n):
            for held in itertools.product([0, 3], repeat=n):
                counts = plan_ready(
                    budget, list(held), [7] * n, list(busy), offset, keep_one_each=keep_one_each
                )
                assert sum(counts) <= max(budget, 0)
                assert all(0 <= c <= 7 for c in counts)
                spare = budget - sum(held)
                if keep_one_each and spare >= n:
                    # every connection can take at least one more message
                    assert all(c > h or c == 7 for c, h in zip(counts, held, strict=True))
                if keep_one_each and spare >= held.count(0):
                    # a stream never leaves a connection that holds nothing at RDY 0
                    # while the spare could give each of them one (issue 25's flake)
                    assert all(c > 0 for c, h in zip(counts, held, strict=True) if h == 0)


def test_keep_within_never_lets_more_arrive_than_the_budget() -> None:
    for budget in range(0, 12):
        for planned in itertools.product(range(0, 7, 2), repeat=3):
            for committed in itertools.product(range(0, 7, 3), repeat=3):
                counts = keep_within(budget, planned, committed)
                assert all(c <= p for c, p in zip(counts, planned, strict=True))
                assert all(
                    c >= min(p, k) for c, p, k in zip(counts, planned, committed, strict=True)
                )
                if sum(committed) <= budget:
                    assert sum(map(max, counts, committed)) <= budget
