"""An embedded nsqlookupd-compatible server for tests, demos and users' own DAG tests.

It behaves like nsqlookupd 1.3.0 as recordings of the real daemon show (the nsqlookupd
facts, docs/nsqlookupd-facts.md): the ``"  V1"`` TCP protocol nsqds
register with (IDENTIFY, REGISTER, UNREGISTER, PING, the exact error texts, producers
dropped when their connection ends, ``#ephemeral`` keys, tombstones, the
inactive-producer timeout) and the HTTP API consumers use (``/lookup``, ``/topics``,
``/channels``, ``/nodes``, the admin POSTs, ``/debug``, with nsqlookupd's status codes,
headers and routing). Deliberate differences are listed in docs/testing.md.

- :class:`EmbeddedNSQLookupd`: context manager, background thread, free ports.
- :class:`Lookupd`: the server itself, for use inside a running asyncio loop.
- ``python -m airflow_provider_nsq.testing.lookupd --tcp-port 4160 --http-port 4161``.
"""

from .embedded import EmbeddedNSQLookupd
from .options import NSQLOOKUPD_VERSION, LookupdOptions
from .server import Lookupd

__all__ = ["NSQLOOKUPD_VERSION", "EmbeddedNSQLookupd", "Lookupd", "LookupdOptions"]
