"""End to end: producer DAG -> NSQSensor gate -> spark-submit (local mode) -> results and a
done message on NSQ, all through ``dag.test()`` against the test broker."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.spark.pyspark_features import needs_airflow, needs_data_source

pytestmark = [pytest.mark.spark, pytest.mark.slow, needs_airflow, needs_data_source]

DAG_FILE = Path(__file__).resolve().parents[2] / "example_dags" / "nsq_gate_spark_job.py"


def load_dag_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nsq_gate_spark_job_under_test", DAG_FILE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected_results(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for pipeline in sorted({e["pipeline"] for e in events}):
        mine = [e for e in events if e["pipeline"] == pipeline]
        out[pipeline] = {
            "pipeline": pipeline,
            "events": len(mine),
            "failed": sum(e["status"] == "failed" for e in mine),
            "rows": sum(e["rows"] for e in mine),
            "avg_duration_ms": round(sum(e["duration_ms"] for e in mine) / len(mine), 3),
            "max_duration_ms": max(e["duration_ms"] for e in mine),
            "first_event_at": min(e["emitted_at"] for e in mine),
            "last_event_at": max(e["emitted_at"] for e in mine),
        }
    return out


def test_sensor_gates_spark_job_which_publishes_one_result_per_pipeline(
    airflow_db: None,
    nsqd: Any,
    read_topic: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{nsqd.host}:{nsqd.tcp_port}")
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"})
    )
    # spark-submit and its Python workers come from this interpreter's environment.
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    tag = uuid.uuid4().hex[:8]
    topics = {
        "events_topic": f"e2e.events.{tag}",
        "results_topic": f"e2e.results.{tag}",
        "done_topic": f"e2e.done.{tag}",
    }
    module = load_dag_module()
    count, seed = 30, 11

    produced = module.producer_dag.test(
        run_conf={"events_topic": topics["events_topic"], "event_count": count, "seed": seed}
    )
    assert produced.state == "success"

    gated = module.gate_dag.test(
        run_conf={**topics, "channel": "spark-gate", "staging_dir": str(tmp_path)}
    )
    assert gated.state == "success"

    events = module.synthetic_events(count, seed, "evt")
    expected = expected_results(events)
    results = [json.loads(b) for b in read_topic(topics["results_topic"], len(expected))]
    assert len(results) == len(expected)  # one message per pipeline, no more
    by_pipeline = {r.pop("pipeline"): r for r in results}
    for pipeline, want in expected.items():
        got = by_pipeline[pipeline]
        assert got.pop("batch") == gated.run_id
        assert {"pipeline": pipeline, **got} == want

    done = [json.loads(b) for b in read_topic(topics["done_topic"], 1)]
    assert done == [
        {
            "run_id": gated.run_id,
            "events_received": count,
            "results_topic": topics["results_topic"],
            "results_published": len(expected),
        }
    ]
    # The staged file is what the job read: every event, once.
    staged = list(tmp_path.rglob("events.jsonl"))
    assert len(staged) == 1
    assert len(staged[0].read_text().splitlines()) == count
