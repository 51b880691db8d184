"""A consumer's in-flight budget (RDY) split over its nsqd connections: the policy, as
pure functions (:func:`plan_ready`, :func:`keep_within`, both in :func:`split`). The
consumer core (:mod:`._core`) keeps what they need between plans (who was busy, whose
RDY was lowered and may still deliver, whose turn it is) and calls :func:`split` only
when one of those changed: never per message.

go-nsq, pynsq and gnsq give each connection ``max(1, max_in_flight // connections)``;
go-nsq drops the remainder (go-nsq #378), gnsq spreads it. Here the remainder is spread
too (starting at a rotating offset, so no connection always gets the short share), and
the split follows where the messages are:

- what a connection holds unanswered stays counted against the budget (its RDY never
  drops below it), so the messages in flight across all connections stay within the
  budget (but see the last point);
- a stream (``keep_one_each``) gives every connection at least one RDY beyond what it
  holds while the budget allows it (what is not held covers one per connection), so a
  producer that was quiet is noticed as soon as it has messages again: none is starved;
- the rest goes to the *busy* connections (a message arrived recently, or everything
  they were allowed is in flight): an nsqd with a backlog is not held to an even share
  while the others are empty;
- with fewer spare RDY than connections, they go one each in turn from the offset
  (callers advance it now and then, so every producer gets its turn); a window serves
  the busy ones first, a stream the ones that hold nothing (a connection holding
  messages keeps its RDY for them, and nsqd refills it as they are answered), so no
  connection is left at RDY 0 while the spare covers every one that holds nothing;
- never above any nsqd's ``max_rdy_count`` (from its IDENTIFY response);
- moving RDY from one connection to another takes two steps (:func:`keep_within`): nsqd
  may already have sent a connection what its old RDY allowed, so what is taken away is
  given to another only once that has had time to arrive. NSQ does not acknowledge RDY,
  so "had time" is a delay (the consumer's ``SETTLE_S``): an nsqd stalled for longer than
  that can still deliver its old allowance, and the budget is then exceeded by at most
  that much until those messages are answered.
"""

from __future__ import annotations

from collections.abc import Sequence

#: How often the RDY split is looked at (only changes are sent).
REBALANCE_INTERVAL_S = 0.1
#: A connection that delivered nothing for this long is quiet: it keeps its share only
#: while no other connection is busy.
IDLE_AFTER_S = 0.25
#: After a connection's RDY is lowered, what nsqd may already have sent it at the old RDY
#: stays counted this long before it is given to another connection.
SETTLE_S = 0.25
#: With fewer spare RDY than connections, the turn moves on this often (the first time
#: this long after the first plan: a share just given is not taken away at once).
ROTATE_INTERVAL_S = 1.0


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
    if budget <= 0:
        return [0] * n  # paused
    held = [max(f, 0) for f in in_flight]
    counts = _keep_held(budget, held, limits)
    spare = budget - sum(held)
    if spare <= 0:
        return counts  # full: no more deliveries until messages are answered
    order = [(offset + k) % n for k in range(n)]
    takers = [i for i in order if busy[i]]
    if spare < n:
        # One each, in turn. A window serves the busy ones first: they have messages. A
        # stream serves first the connections that hold nothing: the others keep RDY
        # for what they hold, which nsqd refills as those are answered, so none is left
        # at RDY 0 (starved) while the spare could give it one.
        if keep_one_each:
            turn = [i for i in order if not held[i]] + [i for i in order if held[i]]
        else:
            turn = takers + [i for i in order if not busy[i]]
        _one_each(counts, limits, turn, spare)
        return counts
    if keep_one_each or not takers:
        spare = _one_each(counts, limits, order, spare)
    spare = _spread(counts, limits, takers or order, spare)
    _spread(counts, limits, order, spare)  # what the takers' limits left over
    return counts


def _keep_held(budget: int, held: Sequence[int], limits: Sequence[int]) -> list[int]:
    """Each connection's RDY for what it holds: RDY is a cap on its messages in flight,
    so nsqd refills a connection by itself as its messages are answered."""
    counts = []
    left = budget
    for h, limit in zip(held, limits, strict=True):
        counts.append(min(h, limit, left))
        left -= counts[-1]
    return counts


def _one_each(counts: list[int], limits: Sequence[int], order: Sequence[int], spare: int) -> int:
    """One more RDY for each connection in ``order`` while ``spare`` lasts and its limit
    allows; returns what is left of ``spare``."""
    for i in order:
        if spare == 0:
            break
        if counts[i] < limits[i]:
            counts[i] += 1
            spare -= 1
    return spare


def keep_within(budget: int, planned: Sequence[int], committed: Sequence[int]) -> list[int]:
    """``planned`` with its raises trimmed so that nothing nsqd may send exceeds ``budget``.

    ``committed[i]`` is what connection ``i`` may still receive whatever its new RDY: what
    it holds, and the RDY it had (nsqd may have sent up to that before it reads a lower
    one; a lowered RDY stays committed for a while). A lowered connection frees its share
    only for a later plan; a raise is kept only where the budget has room now. The largest
    raises give way first.
    """
    counts = list(planned)
    over = sum(max(c, k) for c, k in zip(counts, committed, strict=True)) - budget
    if over <= 0:
        return counts
    raised = sorted(
        (i for i, (c, k) in enumerate(zip(counts, committed, strict=True)) if c > k),
        key=lambda i: counts[i] - committed[i],
        reverse=True,
    )
    for i in raised:
        take = min(over, counts[i] - committed[i])
        counts[i] -= take
        over -= take
        if over == 0:
            break
    return counts


def split(
    budget: int,
    in_flight: Sequence[int],
    limits: Sequence[int],
    busy: Sequence[bool],
    committed: Sequence[int],
    offset: int = 0,
    *,
    keep_one_each: bool = True,
) -> list[int]:
    """The RDY count to send each connection: :func:`plan_ready`'s split, trimmed by
    :func:`keep_within` to what ``committed`` leaves of ``budget`` now (the arguments are
    theirs).

    With one connection the split is ``min(budget, limits[0])`` whatever it holds, is
    busy or has committed: a caller re-plans it only when the budget or the connection
    changes."""
    planned = plan_ready(budget, in_flight, limits, busy, offset, keep_one_each=keep_one_each)
    return keep_within(budget, planned, committed)
