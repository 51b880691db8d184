"""Publishing over an ordered failover list of nsqds: :class:`NSQProducer` (blocking) and
:class:`AsyncNSQProducer` (asyncio), one failover policy. It is written once, in
:mod:`.asyncio_producer`; :mod:`.blocking_producer` is generated from it."""

from .asyncio_producer import AsyncNSQProducer
from .blocking_producer import NSQProducer

__all__ = ["AsyncNSQProducer", "NSQProducer"]
