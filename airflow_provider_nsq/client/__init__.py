"""NSQ clients: a blocking and an asyncio driver over the sans-I/O protocol core.

Importing this package never imports Airflow: Spark executors and plain scripts use it.
Its names are imported when first used, so a module that needs only the settings
(``client.config``, ``client.connection_settings``; the provider info reads them at
Airflow's start) does not load the drivers and asyncio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_names import lazy_names

if TYPE_CHECKING:
    from .aio import AsyncNSQConnection
    from .blocking import NSQConnection
    from .bodies import encode_body
    from .config import COMPRESSIONS, ClientConfig, Compression
    from .connection_settings import ConnectionSettings
    from .consumer import AsyncNSQConsumer, NSQConsumer
    from .message import NSQMessage
    from .producer import NSQProducer
    from .window import ACK_MODES, AckMode

#: Each public name and the module holding it.
_HOME = {
    "ACK_MODES": ".window",
    "AckMode": ".window",
    "AsyncNSQConnection": ".aio",
    "AsyncNSQConsumer": ".consumer",
    "COMPRESSIONS": ".config",
    "ClientConfig": ".config",
    "Compression": ".config",
    "ConnectionSettings": ".connection_settings",
    "NSQConnection": ".blocking",
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
