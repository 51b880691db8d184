"""End to end: producer DAG -> depth-only gate -> spark-submit draining the channel with
``readStream.format("nsq")`` (availableNow) -> results and a done message on NSQ."""

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

from tests.spark.pyspark_features import needs_airflow, needs_stream_reader
from tests.spark.test_gate_spark_dag import expected_results

pytestmark = [pytest.mark.spark, pytest.mark.slow, needs_airflow, needs_stream_reader]

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gate_only_looks_and_the_job_drains_the_channel_itself(
    airflow_db: None,
    nsqd: Any,
    read_topic: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT",
        f"nsq://{nsqd.host}:{nsqd.tcp_port}?http_port={nsqd.http_port}",
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"})
    )
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    tag = uuid.uuid4().hex[:8]
    topics = {
        "events_topic": f"e2e.events.{tag}",
        "results_topic": f"e2e.results.{tag}",
        "done_topic": f"e2e.done.{tag}",
    }
    producer = load("nsq_gate_spark_job")
    gate = load("nsq_stream_gate_spark_job")
    nsqd.create_channel(topics["events_topic"], "spark-stream")  # before the first events
    count, seed = 3000, 5  # more than any sensor window could carry through XCom

    produced = producer.producer_dag.test(
        run_conf={"events_topic": topics["events_topic"], "event_count": count, "seed": seed}
    )
    assert produced.state == "success"

    gated = gate.stream_gate_dag.test(
        run_conf={**topics, "channel": "spark-stream", "staging_dir": str(tmp_path)}
    )
    assert gated.state == "success"

    events = producer.synthetic_events(count, seed, "evt")
    expected = expected_results(events)
    results = [json.loads(b) for b in read_topic(topics["results_topic"], len(expected))]
    assert len(results) == len(expected)
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
    # The job drained the channel and FIN'd everything: nothing waits, nothing in flight.
    stats = nsqd.channel_stats(topics["events_topic"], "spark-stream")
    assert (stats["depth"], stats["in_flight_count"], stats["requeue_count"]) == (0, 0, 0)
    # No event went through XCom: the gate pushed only the depth it saw.
    gate_xcom = gated.get_task_instance("wait_for_events").xcom_pull(task_ids="wait_for_events")
    assert gate_xcom == {"ready": count}
