"""An embedded nsqd-compatible broker for tests, demos and users' own DAG tests.

It behaves like nsqd 1.3.0 as recordings of the real daemon show (the nsqd facts,
docs/nsqd-facts.md) (error codes and texts, fatal vs non-fatal
errors, RDY windows, output buffering, heartbeats, timeouts, TLS, snappy, deflate,
AUTH), the way fakeredis and moto stand in for Redis and AWS.

**Not a production broker**: everything lives in memory, there is no disk persistence
(``mem_queue_size`` is a hard bound per queue instead of a spill-to-disk threshold), and
nothing survives a restart.

- :class:`EmbeddedNSQD`: context manager, background thread, free ports.
- :class:`Broker`: the broker itself, for use inside a running asyncio loop.
- ``python -m airflow_provider_nsq.testing.broker --tcp-port 4150 --http-port 4151``.

Modules, each importing only those listed before it: ``errors``, ``message``, ``options``;
``identify`` (IDENTIFY's JSON and the settings it negotiates), ``authorization``; ``channel``,
``topic``; ``state`` (topics, clients, what they share); ``output`` (a client's output
buffer), ``timers`` (heartbeats, read and write deadlines); ``session`` (one client:
reading commands, delivering messages, upgrades); ``commands`` (the V2 commands);
``lookupd_registration``, ``api`` (the HTTP API); ``server`` (:class:`Broker`:
listeners and lifecycle); ``embedded``, ``__main__``.
"""

from .embedded import EmbeddedNSQD
from .options import NSQD_VERSION, Authorizer, BrokerOptions
from .server import Broker

__all__ = ["NSQD_VERSION", "Authorizer", "Broker", "BrokerOptions", "EmbeddedNSQD"]
