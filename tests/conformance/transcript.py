"""Reading the recorded nsqd conversations (see transcripts/README.md for the format)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_nsq.protocol import encode_frame

TRANSCRIPTS = Path(__file__).parent / "transcripts"
FILES = sorted(TRANSCRIPTS.glob("*.json"))
DEFAULT_CONN = "main"


@dataclass
class Transcript:
    name: str
    data: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Transcript:
        data = json.loads(path.read_text())
        return cls(path.stem, data, data["steps"])

    @property
    def flags(self) -> list[str]:
        return list(self.data["nsqd_flags"])

    @property
    def connections(self) -> list[str]:
        return list(self.data.get("connections", [DEFAULT_CONN]))

    def steps_of(self, conn: str) -> list[dict[str, Any]]:
        return [s for s in self.steps if s.get("conn", DEFAULT_CONN) == conn]

    @property
    def observed(self) -> dict[str, Any]:
        return dict(self.data["observed"])


def sent_plain(step: dict[str, Any]) -> bytes:
    """The uncompressed bytes a send step carried."""
    return bytes.fromhex(step.get("send_plain_hex") or step["send_hex"])


def recv_wire(step: dict[str, Any]) -> bytes:
    """The bytes the client read in a recv step, as they came off the (decrypted) wire."""
    if "raw_hex" in step:
        return bytes.fromhex(step["raw_hex"])
    return b"".join(
        encode_frame(f["frame_type"], bytes.fromhex(f["data_hex"])) for f in step["recv"]
    )


def load_all() -> list[Transcript]:
    return [Transcript.load(p) for p in FILES]
