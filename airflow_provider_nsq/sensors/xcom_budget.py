"""How much of one sensor window fits in XCom: the records' size as the metadata
database stores them, and the cap on it.

Airflow keeps an XCom value in the ``xcom.value`` column as JSON (SQLAlchemy ``JSON``,
``JSONB`` on PostgreSQL; the ``XComModel`` of Airflow 3.0 to 3.3). What one value may
weigh is set by the database, not by Airflow:

- MySQL 8: a ``JSON`` document is limited by the server's ``max_allowed_packet``, 64 MiB
  by default (https://dev.mysql.com/doc/refman/8.4/en/json.html and
  https://dev.mysql.com/doc/refman/8.4/en/packet-too-large.html);
- PostgreSQL: a ``jsonb`` value holds at most 255 MiB of string data ("jsonb strings
  cannot exceed 268435455 bytes"), any field at most 1 GB;
- SQLite: a ``TEXT`` value is at most ``SQLITE_MAX_LENGTH``, 1,000,000,000 bytes by
  default (https://sqlite.org/limits.html).

The default cap, :data:`DEFAULT_MAX_XCOM_BYTES` (4 MiB), is a sixteenth of the smallest
of those (MySQL's default packet): downstream tasks load the whole value into memory and
the UI renders it, so a window's XCom stays small even where the database would take
more. A batch of big messages belongs in object storage, with its keys in XCom.

The size counted is that of the JSON text the column receives: Airflow's serde leaves a
list of plain dicts as it is, and the column type encodes it with ``json.dumps``'s
defaults (``ensure_ascii``, ``", "`` and ``": "`` separators), which this module uses too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..protocol.value_checks import check_int

#: The smallest cap: one small record must fit.
MIN_MAX_XCOM_BYTES = 256
#: A sixteenth of MySQL's default max_allowed_packet (64 MiB), the smallest limit of the
#: metadata databases Airflow supports (see the module docstring).
DEFAULT_MAX_XCOM_BYTES = 4 * 1024 * 1024


def record_bytes(record: dict[str, Any]) -> int:
    """One record's size in the stored JSON list (without its separator)."""
    return len(json.dumps(record).encode())


def list_bytes(sizes: Iterable[int]) -> int:
    """The stored size of a JSON list whose items have these sizes: ``[`` and ``]``,
    and ``", "`` between items."""
    sizes = list(sizes)
    return 2 + sum(sizes) + 2 * max(len(sizes) - 1, 0)


def records_that_fit(sizes: Sequence[int], max_bytes: int) -> int:
    """How many leading records (in delivery order) fit in one XCom value of at most
    ``max_bytes``; 0 when even the first does not."""
    total = 2  # the brackets
    for count, size in enumerate(sizes):
        total += size + (2 if count else 0)
        if total > max_bytes:
            return count
    return len(sizes)


def check_max_xcom_bytes(value: object) -> int:
    """``max_xcom_bytes`` as an int: at least one small record must fit."""
    return check_int(value, "max_xcom_bytes", minimum=MIN_MAX_XCOM_BYTES)
