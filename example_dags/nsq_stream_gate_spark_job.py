"""NSQ events gate a Spark job that reads them itself: ``spark.readStream.format("nsq")``.

Needs: the provider's ``[apache-spark]`` extra (Airflow's Spark provider and PySpark
4.2, which the stream reader needs: ``pip install ".[apache-spark]"`` from a
checkout), Java 17 where the Spark driver runs, the ``spark_default`` connection, the
``nsq_default`` connection with nsqd's HTTP port (the gate reads the channel's depth
there)::

    export AIRFLOW_CONN_NSQ_DEFAULT='nsq://nsqd.example.com:4150?http_port=4151'

and this package in the Python of Spark's workers. Without the Spark provider the file
still imports and a run skips at once, saying what to install. Keep ``jobs/`` next to
this file: its ``.airflowignore`` keeps Airflow from parsing the PySpark jobs there.

The XCom gate (``nsq_gate_spark_job``) hands the job at most a sensor window of events
through Airflow's metadata database. This DAG moves no events through Airflow: the gate
only looks, and the Spark job drains the channel itself, however many events it holds.

``nsq_stream_gate_spark_job``
    1. ``wait_for_events``: a sensor that reads the depth of ``channel`` on
       ``events_topic`` from nsqd's HTTP ``/stats`` (``NSQHook.channel_depth``): it takes
       no message, so nothing is redelivered and nothing reaches XCom. It needs the
       ``nsq_default`` connection's ``http_port`` extra, or its nsqlookupds (then it
       sums the depth over every nsqd they list);
    2. ``stage_options``: writes the ``nsq`` data source options, built from the
       ``nsq_default`` connection, to a private file (they may hold the AUTH secret):
       its nsqds, and its nsqlookupds when it names any (the stream reader then finds
       every nsqd that has the topic through them, including nsqds that start
       publishing it while the job runs);
    3. ``drain_and_aggregate``: ``SparkSubmitOperator`` runs
       ``jobs/drain_pipeline_events.py``: ``readStream.format("nsq")`` with
       ``trigger(availableNow=True)`` lands what the channel holds as Parquet (FIN only
       after Spark committed each batch), then aggregates per pipeline and publishes the
       results to ``results_topic`` with ``df.write.format("nsq")``;
    4. ``read_job_summary`` + ``announce_done``: announce on ``done_topic``.

The channel is durable (no ``#ephemeral``): events wait there between runs. It must exist
before the first events are published, or they go to the topic's other channels only
(nsqd keeps a topic's messages for its first channel, then copies new ones to every
channel): the sensor's first check creates it (``NSQHook.channel_depth`` creates the
topic, then the channel). When events may come first, create both in advance: nsqd's
``POST /topic/create?topic=...``, then ``POST /channel/create?topic=...&channel=...``
(``/channel/create`` alone answers ``TOPIC_NOT_FOUND`` while the topic does not exist),
or ``NSQHook("nsq_default").channel_depth(topic, channel)`` once.

Delivery is at-least-once: a job that fails after the drain committed some batches has
those events staged, and its retry (same run, same staging directory) aggregates them
again; results carry ``batch`` (the run id) so consumers can drop duplicates.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowSkipException
from airflow.sdk import PokeReturnValue, dag, get_current_context, task

try:  # the [apache-spark] extra: Airflow's Spark provider
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
except ImportError:  # e.g. the quick start's install: the DAG parses, its runs skip
    SparkSubmitOperator = None

from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.operators.nsq import NSQPublishOperator

JOBS = Path(__file__).resolve().parent / "jobs"

PARAMS: dict[str, Any] = {
    "events_topic": "pipeline.events",
    "results_topic": "pipeline.results",
    "done_topic": "pipeline.done",
    # Durable, and not the XCom gate's channel: each channel gets its own copy of events.
    "channel": "spark-stream",
    "min_events": 1,
    "staging_dir": "",
}


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
    path = Path(base) / "nsq-stream-gate-spark-job" / dag_id / safe_run
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
def nsq_stream_gate_spark_job():
    @task.sensor(poke_interval=5, timeout=600, mode="poke")
    def wait_for_events() -> PokeReturnValue:
        """Done when the channel holds ``min_events``; takes nothing (nsqd's /stats)."""
        params = get_current_context()["params"]
        depth = NSQHook("nsq_default").channel_depth(params["events_topic"], params["channel"])
        if depth is None:
            raise AirflowException(
                "the nsq_default connection names neither nsqd's http_port nor nsqlookupds: "
                "this gate reads the channel's depth from nsqd's HTTP API"
            )
        ready = depth.ready >= int(params["min_events"])
        return PokeReturnValue(is_done=ready, xcom_value={"ready": depth.ready})

    @task
    def stage_options() -> dict[str, Any]:
        """The data source options for the job, in a file only this user can read."""
        from airflow_provider_nsq.spark import options_from_settings

        context = get_current_context()
        run_dir = _run_dir(
            context["params"]["staging_dir"], context["dag"].dag_id, context["run_id"]
        )
        options_path = run_dir / "nsq-options.json"
        fd = os.open(options_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        # The reader's options from nsq_default: its nsqds (where the job publishes its
        # results, failing over along them, and, without nsqlookupd, where the reader
        # reads) and its nsqlookupds (with them the reader finds every nsqd that has the
        # topic, and keeps asking while it drains; the job drops them for the writer).
        options = options_from_settings(NSQHook("nsq_default").get_settings(), "read")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(options, out)
        return {
            "stage": str(run_dir),
            "options_path": str(options_path),
            "summary_path": str(run_dir / "publish-summary.json"),
            "drain_summary_path": str(run_dir / "drain-summary.json"),
        }

    staged = stage_options()
    xcom = "ti.xcom_pull(task_ids='stage_options')"
    gate = wait_for_events()
    if SparkSubmitOperator is None:
        # Without the Spark provider a run skips at once, before the gate waits.
        spark_provider_missing.override(task_id="check_spark_provider")() >> gate
        drain_and_aggregate = spark_provider_missing.override(task_id="drain_and_aggregate")()
    else:
        drain_and_aggregate = SparkSubmitOperator(
            task_id="drain_and_aggregate",
            conn_id="spark_default",
            application=str(JOBS / "drain_pipeline_events.py"),
            py_files=str(JOBS / "aggregate_pipeline_events.py"),
            name="nsq-stream-gate-drain-pipeline-events",
            application_args=[
                "--nsq-options",
                "{{ " + xcom + "['options_path'] }}",
                "--events-topic",
                "{{ params.events_topic }}",
                "--channel",
                "{{ params.channel }}",
                "--stage",
                "{{ " + xcom + "['stage'] }}",
                "--topic",
                "{{ params.results_topic }}",
                "--batch",
                "{{ run_id }}",
                "--summary",
                "{{ " + xcom + "['summary_path'] }}",
                "--drain-summary",
                "{{ " + xcom + "['drain_summary_path'] }}",
            ],
            conf={"spark.ui.showConsoleProgress": "false"},
        )

    @task
    def read_job_summary(staged: dict[str, Any]) -> dict[str, Any]:
        """What the job drained and published."""
        context = get_current_context()
        published = json.loads(Path(staged["summary_path"]).read_text("utf-8"))
        if published["status"] != "committed":
            raise RuntimeError(f"the Spark job's NSQ write did not commit: {published}")
        drained = json.loads(Path(staged["drain_summary_path"]).read_text("utf-8"))
        return {
            "run_id": context["run_id"],
            "events_received": drained["unique"],
            "results_topic": published["topic"],
            "results_published": published["messages"],
        }

    announce_done = NSQPublishOperator(
        task_id="announce_done",
        topic="{{ params.done_topic }}",
        message="{{ ti.xcom_pull(task_ids='read_job_summary') | tojson }}",
    )

    summary = read_job_summary(staged)
    gate >> staged >> drain_and_aggregate >> summary >> announce_done


stream_gate_dag = nsq_stream_gate_spark_job()
