"""One consumer over every nsqd that has a topic: N connections, one in-flight budget.

Its public names are here (``__all__``); its modules are internal:

- :mod:`._sequences`: what callers see of a consumer, its life as a state table, and
  its consume windows, as steps (:mod:`..runners.steps`), with no I/O;
- :mod:`._connections`: the connections and the work on them, as steps, with no I/O:
  the pool, what they delivered and who holds it (the one TOUCH policy), a stream's
  read from end to end;
- :mod:`._rdy_split`: the RDY split over the connections (pure functions);
- :mod:`._discovery`: where the nsqds are (nsqlookupd polls) and when to retry one;
- :mod:`._consumers`: :class:`NSQConsumer` and :class:`AsyncNSQConsumer`, which run
  the sequences on blocking sockets and on the asyncio event loop.
"""

from ._connections import TOUCH_AFTER_SHARE, UNREACHABLE, Contact
from ._consumers import AsyncNSQConsumer, NSQConsumer
from ._discovery import DEFAULT_LOOKUPD_POLL_INTERVAL_S, EMPTY_POLL_INTERVAL_S
from ._rdy_split import IDLE_AFTER_S, REBALANCE_INTERVAL_S, ROTATE_INTERVAL_S, SETTLE_S
from ._sequences import (
    ACK_MODES,
    CALLING_HOLDER,
    AckMode,
    ConsumerState,
    ConsumerSteps,
    Touched,
)

__all__ = [
    "ACK_MODES",
    "CALLING_HOLDER",
    "DEFAULT_LOOKUPD_POLL_INTERVAL_S",
    "EMPTY_POLL_INTERVAL_S",
    "IDLE_AFTER_S",
    "REBALANCE_INTERVAL_S",
    "ROTATE_INTERVAL_S",
    "SETTLE_S",
    "TOUCH_AFTER_SHARE",
    "UNREACHABLE",
    "AckMode",
    "AsyncNSQConsumer",
    "ConsumerState",
    "ConsumerSteps",
    "Contact",
    "NSQConsumer",
    "Touched",
]
