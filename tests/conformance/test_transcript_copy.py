"""The project's copy of the recordings must equal ../shared/nsqd-transcripts when present."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from tests.conformance.transcript import FILES, TRANSCRIPTS

SHARED = Path(__file__).resolve().parents[3] / "shared" / "nsqd-transcripts"


@pytest.mark.skipif(
    not SHARED.is_dir(), reason="../shared/nsqd-transcripts is not beside the checkout"
)
def test_copy_equals_shared_recordings() -> None:
    ours = sorted(p.name for p in TRANSCRIPTS.iterdir())
    theirs = sorted(p.name for p in SHARED.iterdir())
    assert ours == theirs, "the set of recordings changed: copy ../shared/nsqd-transcripts again"
    _, mismatch, errors = filecmp.cmpfiles(SHARED, TRANSCRIPTS, theirs, shallow=False)
    assert not mismatch and not errors, (
        f"re-recorded files differ from our copy: {mismatch + errors}"
    )


def test_every_recording_is_present() -> None:
    assert len(FILES) >= 70
    assert (TRANSCRIPTS / "FACTS.md").is_file()
