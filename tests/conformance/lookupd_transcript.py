"""Reading the recorded nsqlookupd conversations (lookupd_transcripts/README.md).

Also the comparisons the replays share: which values change from run to run
(README.md "Values that change from run to run") and how to compare them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRANSCRIPTS = Path(__file__).parent / "lookupd_transcripts"
FILES = sorted(TRANSCRIPTS.glob("*.json"))
DEFAULT_CONN = "client1"
REMOTE_ADDRESS = re.compile(r"127\.0\.0\.1:\d+")


@dataclass
class LookupdTranscript:
    name: str
    data: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> LookupdTranscript:
        return cls(path.stem, json.loads(path.read_text()))

    @property
    def kind(self) -> str:
        """``http``, ``v1``, ``nsqd`` or ``timing``: the file name prefix."""
        return self.name.split("_", 1)[0]

    @property
    def steps(self) -> list[dict[str, Any]]:
        return list(self.data["steps"])

    @property
    def ports(self) -> dict[str, int]:
        return dict(self.data["ports"])

    def flag_ms(self, flag: str) -> int | None:
        """A duration flag of ``nsqlookupd_flags`` (``--tombstone-lifetime=2s``) in ms."""
        for item in self.data["nsqlookupd_flags"]:
            name, _, value = item.partition("=")
            if name == f"--{flag}":
                return duration_ms(value)
        return None


def duration_ms(text: str) -> int:
    match = re.fullmatch(r"(\d+)(ms|s|m)", text)
    assert match, f"unexpected duration {text!r}"
    return int(match.group(1)) * {"ms": 1, "s": 1000, "m": 60_000}[match.group(2)]


def load(kind: str) -> list[LookupdTranscript]:
    return [t for t in map(LookupdTranscript.load, FILES) if t.kind == kind]


# -- comparing JSON documents modulo what changes between runs --------------------------

_ORDERLESS = {"topics", "channels", "producers"}


def normalise(doc: Any, remote_addresses: set[str] | None = None) -> Any:
    """A document with every list built from a Go map sorted, and each
    ``remote_address`` replaced by ``"<remote>"`` after checking its shape (and, when
    ``remote_addresses`` is given, that it is one of those)."""
    if isinstance(doc, dict):
        out: dict[str, Any] = {}
        for key, value in doc.items():
            if key == "remote_address":
                assert REMOTE_ADDRESS.fullmatch(value), value
                if remote_addresses is not None:
                    assert value in remote_addresses, (value, remote_addresses)
                out[key] = "<remote>"
            else:
                out[key] = normalise(value, remote_addresses)
        if "topics" in out and "tombstones" in out:  # /nodes: parallel arrays
            pairs = sorted(zip(out["topics"], out["tombstones"], strict=True))
            out["topics"] = [p[0] for p in pairs]
            out["tombstones"] = [p[1] for p in pairs]
        else:
            for key in _ORDERLESS & out.keys():
                if isinstance(out[key], list):
                    out[key] = sorted(out[key], key=lambda v: json.dumps(v, sort_keys=True))
        return out
    if isinstance(doc, list):
        return [normalise(v, remote_addresses) for v in doc]
    return doc


def with_ports(doc: Any, recorded: dict[str, int], actual: dict[str, int]) -> Any:
    """``doc`` with every recorded port number (an int value under a ``*_port`` key)
    replaced by the port now behind the same role."""
    mapping = {recorded[role]: actual[role] for role in recorded if role in actual}
    if isinstance(doc, dict):
        return {
            k: (
                mapping.get(v, v)
                if k.endswith("_port") and isinstance(v, int)
                else with_ports(v, recorded, actual)
            )
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [with_ports(v, recorded, actual) for v in doc]
    return doc
