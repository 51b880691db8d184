"""Airflow 3.3's shared-stream ack mode (``airflow/triggers/shared_stream.py``), when this
Airflow has it: the event trigger's messages are FINished only after their asset events
are stored. On Airflow 3.0-3.2 :data:`ACK_MODE` is False and the producer's base is a
plain ``object``.
"""

from __future__ import annotations

from typing import Any

try:
    from airflow.triggers.shared_stream import (
        AdvanceItem,
        SharedStreamProducer,
        reject_shared_stream_event,
    )

    #: True on Airflow >= 3.3: the triggerer FINs through the shared-stream ack channel.
    ACK_MODE = True
except ImportError:  # pragma: no cover - Airflow 3.0-3.2
    ACK_MODE = False
    SharedStreamProducer = object  # type: ignore[assignment,misc]
    # The names other modules import exist on every Airflow; before 3.3 nothing calls
    # them (shared_stream_key() is None there, so the triggerer never filters a stream).
    AdvanceItem = Any  # type: ignore[assignment,misc]

    def reject_shared_stream_event() -> None:
        """No shared stream before Airflow 3.3: nothing to reject."""


__all__ = ["ACK_MODE", "AdvanceItem", "SharedStreamProducer", "reject_shared_stream_event"]
