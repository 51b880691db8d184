"""The event producer in a real Airflow (api-server, scheduler, dag-processor;
LocalExecutor, SQLite, loopback only): configured only through the environment, as the
issue asks (``AIRFLOW__NSQ_EVENT_PRODUCER__DAG_RUN_EVENTS=True``, ``..._TASK_INSTANCE_
EVENTS=True``, ``..._TOPIC=airflow.events``), a run of a two-task DAG puts every state
change of the run (from the scheduler) and of its tasks (from their processes) on the
topic, read back here in order. Skipped only when Airflow cannot start here."""

from __future__ import annotations

import json
import os
import secrets
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConsumer
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.airflow_runs import TEST_DAGS

from .real_airflow import RealAirflow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DAG_FILE = TEST_DAGS / "nsq_event_producer_dags.py"
DAG_ID = "nsq_event_producer_small"
TOPIC = "airflow.events"


ROOT = Path(__file__).resolve().parents[2]


def _plugin_entry_point_installed() -> bool:
    return any(
        ep.value.startswith("airflow_provider_nsq.") for ep in entry_points(group="airflow.plugins")
    )


def _entry_point_as_installed(where: Path) -> Path:
    """A distribution's metadata declaring pyproject.toml's ``airflow.plugins`` entry
    point, for a checkout whose installed metadata predates it (an editable install
    made earlier): Airflow loads the plugin from there, as from the wheel. (Through the
    provider info alone, Airflow 3.3 loads provider plugins only with lazy provider
    discovery off, and then skips those listed after one it loaded already.)"""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    info = where / "nsq_event_producer_entry_point-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nsq-event-producer-entry-point\nVersion: 0\n"
    )
    lines = [f"{name} = {value}" for name, value in declared["airflow.plugins"].items()]
    (info / "entry_points.txt").write_text("[airflow.plugins]\n" + "\n".join(lines) + "\n")
    return where


def test_every_state_change_of_a_run_is_on_the_topic_in_order(nsqd, tmp_path, monkeypatch):
    channel = f"e2e_{secrets.token_hex(3)}"
    nsqd.create_channel(TOPIC, channel)  # what is published from now on waits here
    source = f"e2e-{secrets.token_hex(3)}"
    env = {
        "AIRFLOW_CONN_NSQ_DEFAULT": f"nsq://{nsqd.tcp_address}",
        "AIRFLOW__NSQ_EVENT_PRODUCER__DAG_RUN_EVENTS": "True",
        "AIRFLOW__NSQ_EVENT_PRODUCER__TASK_INSTANCE_EVENTS": "True",
        "AIRFLOW__NSQ_EVENT_PRODUCER__TOPIC": TOPIC,
        "AIRFLOW__NSQ_EVENT_PRODUCER__SOURCE": source,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",  # the API: no login
    }
    if not _plugin_entry_point_installed():
        path = _entry_point_as_installed(tmp_path / "entry-point")
        monkeypatch.setenv("PYTHONPATH", f"{path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    (tmp_path / "airflow").mkdir()
    airflow = RealAirflow(tmp_path / "airflow", [DAG_FILE], env)
    airflow.migrate()
    try:
        airflow.start_all(("api-server", "scheduler", "dag-processor"))
        wait_for(
            lambda: (
                airflow.check_alive() or airflow.query("SELECT 1 FROM dag WHERE dag_id = ?", DAG_ID)
            ),
            180,
            1,
            message="the DAG is parsed",
        )
        run = airflow.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None})
        run_id = run["dag_run_id"]

        def finished() -> str | None:
            airflow.check_alive()
            rows = airflow.query(
                "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id
            )
            return rows[0][0] if rows and rows[0][0] in ("success", "failed") else None

        assert wait_for(finished, 240, 1, message="the run finishes") == "success"
        config = ClientConfig(host=nsqd.host, port=nsqd.tcp_port)
        with NSQConsumer(TOPIC, channel, config=config) as consumer:
            bodies = [m.body for m in consumer.consume(max_messages=20, timeout=10)]
    finally:
        airflow.stop_all()
    events = [json.loads(body) for body in bodies]
    mine = [e for e in events if e["source"] == source and e["run_id"] == run_id]
    assert [(e["kind"], e["task_id"], e["state"]) for e in mine] == [
        ("dag_run", None, "running"),
        ("task_instance", "extract", "running"),
        ("task_instance", "extract", "success"),
        ("task_instance", "load", "running"),
        ("task_instance", "load", "success"),
        ("dag_run", None, "success"),
    ], os.linesep.join(map(str, events))
    assert all(e["dag_id"] == DAG_ID for e in mine)
    assert {e["try_number"] for e in mine if e["kind"] == "task_instance"} == {1}
    assert all(e["logical_date"] is None for e in mine)  # triggered with logical_date None
    assert mine[-1]["end_date"] is not None
