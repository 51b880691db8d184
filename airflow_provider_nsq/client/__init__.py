"""NSQ clients: a blocking and an asyncio driver over the sans-I/O protocol core.

Importing this package never imports Airflow: Spark executors and plain scripts use it.
"""

from .aio import AsyncNSQConnection
from .blocking import NSQConnection
from .bodies import encode_body
from .config import COMPRESSIONS, ClientConfig, Compression
from .message import NSQMessage
from .producer import NSQProducer
from .window import ACK_MODES, AckMode

# After the drivers: the consumer is built on them.
from .consumer import AsyncNSQConsumer, NSQConsumer  # isort: skip

__all__ = [
    "ACK_MODES",
    "COMPRESSIONS",
    "AckMode",
    "AsyncNSQConnection",
    "AsyncNSQConsumer",
    "ClientConfig",
    "Compression",
    "NSQConnection",
    "NSQConsumer",
    "NSQMessage",
    "NSQProducer",
    "encode_body",
]
