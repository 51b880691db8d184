"""How a consumer shares one in-flight budget (RDY) across its nsqd connections.

go-nsq, pynsq and gnsq give each connection ``max(1, max_in_flight // connections)``;
go-nsq drops the remainder (go-nsq #378), gnsq spreads it. Here the remainder is spread
too (starting at a rotating offset, so no connection always gets the short share), and
the split follows where the messages are:

- what a connection holds unanswered stays counted against the budget (its RDY never
  drops below it), so the messages in flight across all connections never exceed the
  budget;
- every connection keeps at least one RDY beyond what it holds while the budget allows
  it (``budget >= connections``), so a producer that was quiet is noticed as soon as it
  has messages again: none is starved;
- the rest goes to the *busy* connections (a message arrived recently, or everything
  they were allowed is in flight): an nsqd with a backlog is not held to an even share
  while the others are empty;
- with fewer spare RDY than connections, they go one each in turn from the offset
  (callers advance it now and then, so every producer gets its turn; a window serves
  the busy ones first);
- never above any nsqd's ``max_rdy_count`` (from its IDENTIFY response).
"""

from __future__ import annotations

from collections.abc import Sequence


def _spread(counts: list[int], limits: Sequence[int], takers: Sequence[int], spare: int) -> int:
    """Share ``spare`` evenly over ``takers`` (in their order), within ``limits``;
    returns what could not be placed."""
    while spare > 0:
        room = [i for i in takers if counts[i] < limits[i]]
        if not room:
            break
        base, extra = divmod(spare, len(room))
        for k, i in enumerate(room):
            add = min(base + (1 if k < extra else 0), limits[i] - counts[i])
            counts[i] += add
            spare -= add
    return spare


def plan_ready(
    budget: int,
    in_flight: Sequence[int],
    limits: Sequence[int],
    busy: Sequence[bool],
    offset: int = 0,
    *,
    keep_one_each: bool = True,
) -> list[int]:
    """The RDY count for each connection.

    :param budget: messages that may be in flight across all connections.
    :param in_flight: per connection, messages delivered and not yet answered.
    :param limits: per connection, nsqd's ``max_rdy_count``.
    :param busy: per connection, whether it has been delivering (it gets the spare).
    :param offset: where the round-robin starts (rotate it to share remainders).
    :param keep_one_each: give quiet connections one RDY beyond what they hold (long-lived
        consumers: never starve a producer). Off for a short window, where every RDY
        parked on an empty nsqd is a message the window cannot take from a busy one.
    """
    n = len(limits)
    if n == 0:
        return []
    spare = budget - sum(max(f, 0) for f in in_flight)
    if spare <= 0:
        return [0] * n  # full (or the budget was lowered): no more deliveries anywhere
    # What a connection holds stays counted: RDY is a cap on its messages in flight.
    counts = [min(max(f, 0), lim) for f, lim in zip(in_flight, limits, strict=True)]
    order = [(offset + k) % n for k in range(n)]
    takers = [i for i in order if busy[i]]
    if spare < n:
        # One each, in turn (a window serves the busy ones first: they have messages).
        if not keep_one_each:
            order = takers + [i for i in order if not busy[i]]
        for i in order:
            if spare == 0:
                break
            if counts[i] < limits[i]:
                counts[i] += 1
                spare -= 1
        return counts
    if keep_one_each or not takers:
        for i in order:
            if counts[i] < limits[i]:
                counts[i] += 1
                spare -= 1
    spare = _spread(counts, limits, takers or order, spare)
    _spread(counts, limits, order, spare)  # what the takers' limits left over
    return counts
