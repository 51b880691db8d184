"""One consumer over every nsqd that has a topic: N connections, one in-flight budget.

- :mod:`.sequences`: :class:`ConsumerSteps`, what callers see of a consumer and its
  life (a window, a stream, close) written once, as steps (:mod:`..runners.steps`);
- :mod:`.state`: that life as a state table;
- :mod:`.connections`: the work on its connections, as steps, over
  :mod:`.discovery` (where the nsqds are; retries), :mod:`.pool` (the connections),
  :mod:`.rdy_plan` (the RDY split) and :mod:`.deliveries` (messages in, and
  :mod:`.ledger`: who holds what, the one TOUCH policy);
- :mod:`.blocking_consumer`: :class:`NSQConsumer`, which runs the steps on sockets;
- :mod:`.asyncio_consumer`: :class:`AsyncNSQConsumer`, which runs them on the asyncio event loop.
"""

from ..message import by_connection
from .asyncio_consumer import AsyncNSQConsumer
from .blocking_consumer import NSQConsumer
from .connections import UNREACHABLE
from .discovery import DEFAULT_LOOKUPD_POLL_INTERVAL_S, EMPTY_POLL_INTERVAL_S
from .ledger import TOUCH_AFTER_SHARE
from .pool import Contact
from .rdy_plan import IDLE_AFTER_S, REBALANCE_INTERVAL_S, ROTATE_INTERVAL_S, SETTLE_S
from .sequences import ConsumerSteps, Touched
from .state import CallingAs, ConsumerState

__all__ = [
    "DEFAULT_LOOKUPD_POLL_INTERVAL_S",
    "EMPTY_POLL_INTERVAL_S",
    "IDLE_AFTER_S",
    "REBALANCE_INTERVAL_S",
    "ROTATE_INTERVAL_S",
    "SETTLE_S",
    "TOUCH_AFTER_SHARE",
    "UNREACHABLE",
    "AsyncNSQConsumer",
    "CallingAs",
    "ConsumerState",
    "ConsumerSteps",
    "Contact",
    "NSQConsumer",
    "Touched",
    "by_connection",
]
