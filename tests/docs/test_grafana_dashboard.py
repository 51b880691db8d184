"""The Grafana dashboard the docs ship (docs/grafana/nsq-dashboard.json) loads, and every
metric it queries is one the provider sends, named as Prometheus's statsd_exporter
exposes it; the trigger health metrics, what alerts are set on, all have a panel."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airflow_provider_nsq.metrics import METRICS

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "nsq-dashboard.json"
#: ``[metrics] statsd_prefix`` as docs/metrics.md sets it.
PREFIX = "airflow"
#: What statsd_exporter may add to a name: counters (OpenMetrics), timers (summaries).
SUFFIXES = ("", "_total", "_sum", "_count", "_bucket")


def _prometheus_names() -> dict[str, str]:
    """Each metric's name as statsd_exporter exposes it -> the provider's name."""
    return {
        f"{PREFIX}_{name.replace('.', '_')}{suffix}": name
        for name in METRICS
        for suffix in SUFFIXES
    }


def _exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query", "definition") and isinstance(value, str):
                yield value
            else:
                yield from _exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _exprs(item)


def test_the_dashboard_loads_and_queries_only_metrics_the_provider_sends():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels and all(p["targets"] for p in panels)
    known = _prometheus_names()
    used = {
        name
        for expr in _exprs(dashboard)
        for name in re.findall(rf"\b{PREFIX}_nsq_[a-z0-9_]+", expr)
    }
    unknown = used - set(known)
    assert not unknown, f"the dashboard queries metrics the provider never sends: {unknown}"
    covered = {known[name] for name in used}
    health = {name for name in METRICS if ".health." in name}
    assert health <= covered, f"no panel for {sorted(health - covered)}"
    assert covered == set(METRICS), f"no panel for {sorted(set(METRICS) - covered)}"
