"""docs/connections.md says what values each extra takes as the settings description does
(``client/config.py``): every special value (``-1``: off, ``0``: nsqd's default) and the
bound beside it, so the page cannot claim ``≥ 1000`` alone for a field that takes -1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_provider_nsq.provider_info import extra_settings

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "connections.md").read_text(encoding="utf-8")
ROWS = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", PAGE, re.MULTILINE)}
SPECIAL = {name: described for name, described in extra_settings().items() if described.special}


def test_some_extras_take_special_values() -> None:
    assert {"heartbeat_interval_ms", "msg_timeout_ms"} <= set(SPECIAL)


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_the_row_names_each_special_value_and_the_bound(name: str) -> None:
    described = SPECIAL[name]
    row = ROWS[name]
    for value in described.special:
        assert f"`{value}`" in row, (value, row)
    if described.minimum is not None:
        assert f"≥ {described.minimum:g}" in row, row
