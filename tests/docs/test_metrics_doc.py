"""docs/metrics.md lists exactly the metrics the provider sends, with their types."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_provider_nsq.metrics import METRICS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_the_metrics_table_is_the_list_the_provider_sends():
    rows = re.findall(r"^\| `(nsq\.[a-z0-9_.]+)` \| (\w+) \|", PAGE.read_text(), re.MULTILINE)
    assert sorted(rows) == sorted((m.name, m.type) for m in METRICS.values())
