"""docs/connections.md and the connection form say what values each extra takes as the
settings description does (``client/settings/``): every special value (``-1``: off,
``0``: nsqd's default) and the bounds beside it, so the page cannot claim ``≥ 1000``
alone for a field that takes -1, and the form takes every value the page allows."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest

from airflow_provider_nsq.provider_info import CONN_FIELDS, extra_settings

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "connections.md").read_text(encoding="utf-8")
ROWS = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", PAGE, re.MULTILINE)}
SPECIAL = {name: described for name, described in extra_settings().items() if described.special}
#: The extras whose values are bounded: numbers with a minimum, a maximum or special values.
BOUNDED = {
    name: described
    for name, described in extra_settings().items()
    if described.kind in ("integer", "seconds")
    and (described.minimum is not None or described.maximum is not None or described.special)
}


def test_some_extras_take_special_values() -> None:
    assert {"heartbeat_interval_ms", "msg_timeout_ms"} <= set(SPECIAL)


@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_the_row_names_each_special_value_and_the_bounds(name: str) -> None:
    described = BOUNDED[name]
    row = ROWS[name]
    for value in described.special:
        assert f"`{value}`" in row, (value, row)
    low, high = described.minimum, described.maximum
    if low is not None and high is not None:
        assert f"{low:g}\N{EN DASH}{high:g}" in row, row  # the page writes 1-9 with an en dash
    elif low is not None:
        assert f"≥ {low:g}" in row, row
    else:
        assert f"at most {high:g}" in row, row


def _values_the_row_allows(name: str) -> set[float]:
    """The numbers the page gives as values of ``name`` (in backticks: ``-1``, ``0``, a
    default), and the setting's bounds."""
    described = BOUNDED[name]
    values = {float(v) for v in re.findall(r"`(-?\d+(?:\.\d+)?)`", ROWS[name])}
    return values | {b for b in (described.minimum, described.maximum) if b is not None}


@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_the_form_and_the_parser_take_every_value_the_page_allows(name: str) -> None:
    described = BOUNDED[name]
    schema = CONN_FIELDS[name]["schema"]
    for value in _values_the_row_allows(name):
        typed = int(value) if described.kind == "integer" else value
        jsonschema.validate(typed, schema)  # the form's check (Airflow >= 3.2)
        assert described.parse(str(typed)) == typed  # the URI form's text, read


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_the_form_says_which_values_it_takes(name: str) -> None:
    """A form's schema has no "or": it bounds the range, the description names the
    special values and the bound, in the words of the parser's error."""
    described = SPECIAL[name]
    assert CONN_FIELDS[name]["description"].endswith(f" Allowed: {described.expected()}.")
    below = (described.minimum or 0) - 1
    if below not in described.special and below >= CONN_FIELDS[name]["schema"]["minimum"]:
        with pytest.raises(ValueError, match=re.escape(f"must be {described.expected()}")):
            described.parse(str(int(below)))
