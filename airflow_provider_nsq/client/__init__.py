"""NSQ clients: a blocking and an asyncio driver over the sans-I/O protocol core.

Importing this package never imports Airflow: Spark executors and plain scripts use it.
"""

from .aio import AsyncNSQConnection
from .blocking import NSQConnection
from .bodies import encode_body
from .config import COMPRESSIONS, ClientConfig, Compression
from .message import NSQMessage
from .window import ACK_MODES, AckMode

__all__ = [
    "ACK_MODES",
    "COMPRESSIONS",
    "AckMode",
    "AsyncNSQConnection",
    "ClientConfig",
    "Compression",
    "NSQConnection",
    "NSQMessage",
    "encode_body",
]
