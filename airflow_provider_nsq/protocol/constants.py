"""Wire constants of the NSQ TCP protocol ("  V2"), as nsqd 1.3.0 has them.

Sources: the nsqd facts (docs/nsqd-facts.md) (section numbers below) and the
recordings beside it.

Server frame (docs/nsqd-facts.md section 1)::

    [ u32be size ][ u32be frame_type ][ payload ... ]      size = 4 + len(payload)

Message payload (frame_type 2)::

    [ i64be timestamp_ns ][ u16be attempts ][ 16 bytes id (ASCII hex) ][ body ... ]
"""

from __future__ import annotations

import enum

MAGIC_V2 = b"  V2"


class FrameType(enum.IntEnum):
    RESPONSE = 0
    ERROR = 1
    MESSAGE = 2


HEARTBEAT = b"_heartbeat_"
OK = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"

FRAME_HEADER_SIZE = 8  # size + frame type
MESSAGE_HEADER_SIZE = 26  # timestamp (8) + attempts (2) + id (16)
MESSAGE_ID_LENGTH = 16

# nsqd defaults (docs/nsqd-facts.md section 6); every one is a flag a
# server may change.
DEFAULT_MAX_MSG_SIZE = 1_048_576  # --max-msg-size
DEFAULT_MAX_BODY_SIZE = 5_242_880  # --max-body-size
DEFAULT_MAX_RDY_COUNT = 2500  # --max-rdy-count
DEFAULT_MAX_REQ_TIMEOUT_MS = 3_600_000  # --max-req-timeout (1h): DPUB and REQ delay
DEFAULT_MSG_TIMEOUT_MS = 60_000  # --msg-timeout
DEFAULT_MAX_MSG_TIMEOUT_MS = 900_000  # --max-msg-timeout
DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000
DEFAULT_MAX_HEARTBEAT_INTERVAL_MS = 60_000  # --max-heartbeat-interval
MIN_HEARTBEAT_INTERVAL_MS = 1000
MIN_MSG_TIMEOUT_MS = 1000
DEFAULT_OUTPUT_BUFFER_SIZE = 16_384
DEFAULT_MAX_OUTPUT_BUFFER_SIZE = 65_536  # --max-output-buffer-size
MIN_OUTPUT_BUFFER_SIZE = 64
DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS = 250
MIN_OUTPUT_BUFFER_TIMEOUT_MS = 25  # --min-output-buffer-timeout
MAX_OUTPUT_BUFFER_TIMEOUT_MS = 30_000  # --max-output-buffer-timeout
DEFAULT_DEFLATE_LEVEL = 6
DEFAULT_MAX_DEFLATE_LEVEL = 6  # --max-deflate-level

# Largest frame a client must accept with nsqd's defaults: a 1 MiB message plus the
# frame type and message header.
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MSG_SIZE + 4 + MESSAGE_HEADER_SIZE

# The ASCII bytes "HTTP" read as a frame size: the peer answered with HTTP. Often nsqd's
# HTTP port (4151) given where its TCP port (4150) was meant, but any HTTP server (a
# proxy, a load balancer) answers so: the error says what it saw and asks.
HTTP_AS_FRAME_SIZE = int.from_bytes(b"HTTP", "big")

# Only these three error codes leave the connection open
# (docs/nsqd-facts.md section 3).
NON_FATAL_ERROR_CODES = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})
