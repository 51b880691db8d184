"""One consumer over every nsqd that has a topic: N connections, one in-flight budget.

- :mod:`.core`: what the consumer knows and decides, and its life (a window, a stream,
  close) written once, as steps;
- :mod:`.steps`: those steps, the I/O the core asks for;
- :mod:`.ledger`: who holds which message, and the one TOUCH policy;
- :mod:`.blocking`: :class:`NSQConsumer`, which runs the steps on sockets;
- :mod:`.aio`: :class:`AsyncNSQConsumer`, which runs them on the asyncio event loop.
"""

from .aio import AsyncNSQConsumer
from .blocking import NSQConsumer
from .core import (
    DEFAULT_LOOKUPD_POLL_INTERVAL_S,
    EMPTY_POLL_INTERVAL_S,
    IDLE_AFTER_S,
    REBALANCE_INTERVAL_S,
    RECONNECT_MAX_S,
    RECONNECT_START_S,
    ROTATE_INTERVAL_S,
    SETTLE_S,
    UNREACHABLE,
    ConsumerCore,
    Touched,
    by_connection,
)
from .ledger import TOUCH_AFTER_SHARE

#: The name this base had before the sequences were written as steps.
ConsumerBase = ConsumerCore

__all__ = [
    "DEFAULT_LOOKUPD_POLL_INTERVAL_S",
    "EMPTY_POLL_INTERVAL_S",
    "IDLE_AFTER_S",
    "REBALANCE_INTERVAL_S",
    "RECONNECT_MAX_S",
    "RECONNECT_START_S",
    "ROTATE_INTERVAL_S",
    "SETTLE_S",
    "TOUCH_AFTER_SHARE",
    "UNREACHABLE",
    "AsyncNSQConsumer",
    "ConsumerBase",
    "ConsumerCore",
    "NSQConsumer",
    "Touched",
    "by_connection",
]
