"""NSQ clients over the sans-I/O protocol core (:mod:`airflow_provider_nsq.protocol`).

Importing this package never imports Airflow: Spark executors and plain scripts use it.
Its public names (``__all__``) are imported when first used, so a module that needs only
the settings (the provider info reads them at Airflow's start) does not load the drivers
and asyncio.

Its rooms, from the bottom up:

- ``settings/``: what a connection says (``ClientConfig``, ``ConnectionSettings``), each
  setting described once, values read as users write them, ``host:port`` addresses;
- ``transport/``: TLS, one map from socket errors to the NSQError family, one HTTP/1.1
  request;
- ``drivers/``: one connection to nsqd, blocking (``NSQConnection``, with its socket)
  and asyncio (``AsyncNSQConnection``), pumping the protocol core; what both share is
  written once (``drivers/base.py``);
- ``runners/``: steps, the I/O a sequence asks for, and the two runners that perform
  them (blocking sockets, the asyncio event loop);
- ``http/``: nsqd's and nsqlookupd's HTTP APIs, and a channel's depth over every nsqd;
- ``producer/``: publishing over an ordered failover list of nsqds, written once for
  asyncio, its blocking form generated from it (``scripts/generate_blocking.py``);
- ``consumer/``: one consumer over every nsqd of a topic under one RDY budget, written
  once as steps;
- ``holding/``: messages held while user code runs: the one holder (TOUCH on time,
  answers, give-up to a dead-letter topic, close), and consume-and-apply over it;
- ``message``, ``bodies``, ``backoff``: a delivered message and its JSON-safe
  record, user values as message bodies, the one retry-wait policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_names import lazy_names

if TYPE_CHECKING:
    from .bodies import encode_body
    from .consumer import ACK_MODES, AckMode, AsyncNSQConsumer, NSQConsumer
    from .drivers.asyncio_driver import AsyncNSQConnection
    from .drivers.blocking_driver import NSQConnection
    from .message import NSQMessage
    from .producer import NSQProducer
    from .settings.client_config import COMPRESSIONS, ClientConfig, Compression
    from .settings.connection_settings import ConnectionSettings

#: Each public name and the module holding it.
_HOME = {
    "ACK_MODES": ".consumer",
    "AckMode": ".consumer",
    "AsyncNSQConnection": ".drivers.asyncio_driver",
    "AsyncNSQConsumer": ".consumer",
    "COMPRESSIONS": ".settings.client_config",
    "ClientConfig": ".settings.client_config",
    "Compression": ".settings.client_config",
    "ConnectionSettings": ".settings.connection_settings",
    "NSQConnection": ".drivers.blocking_driver",
    "NSQConsumer": ".consumer",
    "NSQMessage": ".message",
    "NSQProducer": ".producer",
    "encode_body": ".bodies",
}

__all__ = [
    "ACK_MODES",
    "COMPRESSIONS",
    "AckMode",
    "AsyncNSQConnection",
    "AsyncNSQConsumer",
    "ClientConfig",
    "Compression",
    "ConnectionSettings",
    "NSQConnection",
    "NSQConsumer",
    "NSQMessage",
    "NSQProducer",
    "encode_body",
]


__getattr__, __dir__ = lazy_names(globals(), _HOME)
