"""The copy of the nsqlookupd recordings must equal ../shared/nsqlookupd-transcripts."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from tests.conformance.lookupd_transcript import FILES, TRANSCRIPTS

SHARED = Path(__file__).resolve().parents[3] / "shared" / "nsqlookupd-transcripts"


@pytest.mark.skipif(
    not SHARED.is_dir(), reason="../shared/nsqlookupd-transcripts is not beside the checkout"
)
def test_copy_equals_shared_recordings() -> None:
    ours = sorted(p.name for p in TRANSCRIPTS.iterdir())
    theirs = sorted(p.name for p in SHARED.iterdir())
    assert ours == theirs, (
        "the set of recordings changed: copy ../shared/nsqlookupd-transcripts again"
    )
    _, mismatch, errors = filecmp.cmpfiles(SHARED, TRANSCRIPTS, theirs, shallow=False)
    assert not mismatch and not errors, (
        f"re-recorded files differ from our copy: {mismatch + errors}"
    )


def test_every_recording_is_present() -> None:
    assert len(FILES) == 63
    assert (TRANSCRIPTS / "FACTS.md").is_file()
    assert (TRANSCRIPTS / "README.md").is_file()
