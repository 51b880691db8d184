"""NSQ events gate a Spark job; the job's results go back out to NSQ.

Needs: the provider's ``[apache-spark]`` extra (Airflow's Spark provider and PySpark
4.2: ``pip install ".[apache-spark]"`` from a checkout), Java 17 where the Spark driver
runs, the ``spark_default`` and ``nsq_default`` connections (below), and this package in
the Python of Spark's workers. Without the Spark provider the file still imports and a
run of ``nsq_gate_spark_job`` skips at once, before the sensor takes a message, saying
what to install; ``nsq_pipeline_events_producer`` needs no extra. Keep ``jobs/`` next
to this file: its ``.airflowignore`` keeps Airflow from parsing the PySpark jobs there.

Two DAGs:

``nsq_pipeline_events_producer``
    publishes ``event_count`` synthetic pipeline events (JSON) to ``events_topic``, dealt
    round robin over the connections in ``nsq_conn_ids`` (one MPUB each): with one
    connection per nsqd, the events are spread over several nsqds, as NSQ is deployed
    (every producing host publishes to its own nsqd).

``nsq_gate_spark_job``
    1. ``wait_for_events``: an ``NSQSensor`` on the durable channel ``channel`` of
       ``events_topic`` waits until a window yields events (at most 1000);
    2. ``stage_events``: writes them to a JSON Lines file (plus the ``nsq`` data source
       options, built from the ``nsq_default`` connection, in a private file), so the job
       gets two paths as arguments, never the events on its command line;
    3. ``aggregate_events``: ``SparkSubmitOperator`` runs ``jobs/aggregate_pipeline_events.py``
       on ``spark_default``; the job aggregates per pipeline with the DataFrame API and
       publishes one JSON result per pipeline to ``results_topic`` with
       ``df.write.format("nsq")``;
    4. ``read_job_summary`` + ``announce_done``: read what the job published and announce
       it on ``done_topic``.

Connections: ``nsq_default`` (``nsq://nsqd.example.com:4150?http_port=4151``; add
``lookupd_http_addresses`` and the sensor finds the events on every nsqd through
nsqlookupd, see docs/topology.md) and
``spark_default`` (host ``local[*]`` here; a cluster's master URL in production, nothing
else changes). Spark's
Python workers use ``PYSPARK_PYTHON`` (or ``python3`` on PATH): it must have this package
installed.

Delivery is at-least-once end to end: the sensor FINs messages only after its XCom is
recorded, and a retried job may publish its results again; the job drops duplicate
events by ``event_id``, and each result carries ``batch`` (the run id) so consumers can
drop duplicate results.

The staging directory (``staging_dir`` param, else ``$NSQ_STAGING_DIR``, else the temp
dir) must be readable by the Spark driver: on the Airflow worker in client deploy mode;
on shared storage for ``deploy-mode cluster``.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import random
import re
import tempfile
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import AirflowSkipException
from airflow.sdk import dag, get_current_context, task

try:  # the [apache-spark] extra: Airflow's Spark provider
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
except ImportError:  # e.g. the quick start's install: the DAGs parse, the gate's runs skip
    SparkSubmitOperator = None

from airflow_provider_nsq.client.message import decode_record_body
from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.operators.nsq import NSQMultiPublishOperator, NSQPublishOperator
from airflow_provider_nsq.sensors.nsq import NSQSensor

log = logging.getLogger(__name__)

JOB = Path(__file__).resolve().parent / "jobs" / "aggregate_pipeline_events.py"
PIPELINES = ("ingest", "transform", "export")
STAGES = ("extract", "validate", "load")

PARAMS: dict[str, Any] = {
    "events_topic": "pipeline.events",
    "results_topic": "pipeline.results",
    "done_topic": "pipeline.done",
    # Durable (no #ephemeral): events published while no window is open wait here.
    "channel": "spark-gate",
    "staging_dir": "",
}


def synthetic_events(count: int, seed: int, prefix: str) -> list[dict[str, Any]]:
    """``count`` reproducible pipeline events (the same ``seed`` gives the same events)."""
    rng = random.Random(seed)
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return [
        {
            "event_id": f"{prefix}-{i}",
            "pipeline": PIPELINES[i % len(PIPELINES)],
            "stage": rng.choice(STAGES),
            "status": "failed" if rng.random() < 0.1 else "ok",
            "rows": rng.randint(0, 10_000),
            "duration_ms": rng.randint(5, 5_000),
            "emitted_at": (start + datetime.timedelta(seconds=i)).isoformat(),
        }
        for i in range(count)
    ]


@dag(
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={
        "events_topic": PARAMS["events_topic"],
        "event_count": 60,
        "seed": 7,
        "nsq_conn_ids": ["nsq_default"],
    },
    tags=["nsq", "spark", "example"],
)
def nsq_pipeline_events_producer():
    @task
    def make_batches() -> list[dict[str, Any]]:
        """The events dealt round robin over ``nsq_conn_ids``: one MPUB per connection."""
        params = get_current_context()["params"]
        events = synthetic_events(int(params["event_count"]), int(params["seed"]), "evt")
        conn_ids = list(params["nsq_conn_ids"]) or ["nsq_default"]
        batches = [(c, events[i :: len(conn_ids)]) for i, c in enumerate(conn_ids)]
        return [{"nsq_conn_id": c, "messages": batch} for c, batch in batches if batch]

    NSQMultiPublishOperator.partial(
        task_id="publish_events", topic="{{ params.events_topic }}"
    ).expand_kwargs(make_batches())


@task
def spark_provider_missing() -> None:
    """Stands in for the Spark parts when Airflow's Spark provider is not installed."""
    raise AirflowSkipException(
        "this DAG's Spark job needs the provider's [apache-spark] extra "
        "(Airflow's Spark provider and PySpark 4.2) and Java 17 on the worker"
    )


def _run_dir(staging_dir: str, dag_id: str, run_id: str) -> Path:
    base = staging_dir or os.environ.get("NSQ_STAGING_DIR") or tempfile.gettempdir()
    safe_run = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)
    path = Path(base) / "nsq-gate-spark-job" / dag_id / safe_run
    path.mkdir(parents=True, exist_ok=True)
    return path


@dag(
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params=PARAMS,
    default_args={"retries": 0},
    tags=["nsq", "spark", "example"],
)
def nsq_gate_spark_job():
    wait_for_events = NSQSensor(
        task_id="wait_for_events",
        topic="{{ params.events_topic }}",
        channel="{{ params.channel }}",
        min_messages=1,
        max_messages=1000,  # also what XCom carries: keep a gate's batch bounded
        window_timeout=datetime.timedelta(seconds=3),
        poke_interval=5,
        timeout=600,
    )

    @task
    def stage_events(records: list[dict[str, Any]]) -> dict[str, Any]:
        """Write the gate's messages as JSON Lines for the job; skip non-JSON bodies."""
        from airflow_provider_nsq.spark import options_from_settings

        context = get_current_context()
        params = context["params"]
        run_dir = _run_dir(params["staging_dir"], context["dag"].dag_id, context["run_id"])
        events_path = run_dir / "events.jsonl"
        staged = skipped = 0
        with events_path.open("w", encoding="utf-8") as out:
            for record in records:
                try:
                    event = json.loads(decode_record_body(record))
                except ValueError:
                    event = None
                if not isinstance(event, dict):
                    skipped += 1
                    continue
                event.update(nsq_id=record["id"], nsq_attempts=record["attempts"])
                out.write(json.dumps(event, separators=(",", ":")) + "\n")
                staged += 1
        # The data source options may hold the AUTH secret: a file only we can read. They
        # carry the connection's nsqds too: the job's publishes fail over along them.
        options_path = run_dir / "nsq-options.json"
        fd = os.open(options_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(options_from_settings(NSQHook("nsq_default").get_settings()), out)
        log.info(
            "staged %s events in %s (%s non-JSON bodies skipped)", staged, events_path, skipped
        )
        return {
            "events_path": str(events_path),
            "options_path": str(options_path),
            "summary_path": str(run_dir / "publish-summary.json"),
            "events": staged,
            "skipped": skipped,
        }

    staged = stage_events(wait_for_events.output)

    if SparkSubmitOperator is None:
        # Without the Spark provider a run skips before the sensor takes any message.
        spark_provider_missing.override(task_id="check_spark_provider")() >> wait_for_events
        aggregate_events = spark_provider_missing.override(task_id="aggregate_events")()
    else:
        aggregate_events = SparkSubmitOperator(
            task_id="aggregate_events",
            conn_id="spark_default",
            application=str(JOB),
            name="nsq-gate-aggregate-pipeline-events",
            application_args=[
                "--events",
                "{{ ti.xcom_pull(task_ids='stage_events')['events_path'] }}",
                "--nsq-options",
                "{{ ti.xcom_pull(task_ids='stage_events')['options_path'] }}",
                "--summary",
                "{{ ti.xcom_pull(task_ids='stage_events')['summary_path'] }}",
                "--topic",
                "{{ params.results_topic }}",
                "--batch",
                "{{ run_id }}",
            ],
            conf={"spark.ui.showConsoleProgress": "false"},
        )

    @task
    def read_job_summary(staged: dict[str, Any]) -> dict[str, Any]:
        """What the job published, from the summary the ``nsq`` data source committed."""
        context = get_current_context()
        summary = json.loads(Path(staged["summary_path"]).read_text("utf-8"))
        if summary["status"] != "committed":
            raise RuntimeError(f"the Spark job's NSQ write did not commit: {summary}")
        return {
            "run_id": context["run_id"],
            "events_received": staged["events"],
            "results_topic": summary["topic"],
            "results_published": summary["messages"],
        }

    announce_done = NSQPublishOperator(
        task_id="announce_done",
        topic="{{ params.done_topic }}",
        message="{{ ti.xcom_pull(task_ids='read_job_summary') | tojson }}",
    )

    summary = read_job_summary(staged)
    staged >> aggregate_events >> summary >> announce_done


producer_dag = nsq_pipeline_events_producer()
gate_dag = nsq_gate_spark_job()
