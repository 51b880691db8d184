"""CeleryExecutor, shown: a real Airflow as Airflow's docker-compose and Helm chart run it
(PostgreSQL, a Redis broker, two Celery workers of concurrency 2 that fork a process per
task; everything on 127.0.0.1), running tests/e2e/celery_dags/nsq_celery.py against
the test nsqd:

- (a) the publish, deferred-publish and batch operators and a consume task that applies
  what they published, on the workers: every message applied once;
- (a) a sensor in reschedule mode whose worker is drained (warm shutdown) after its
  first poke: the next poke runs on the other worker, and the sensor hands on every
  message it waited for;
- a worker that cannot reach nsqd fails its tasks, naming each address and what was
  tried;
- (b) the worker running ``NSQConsumeOperator`` SIGKILLed whole mid-batch (its process
  group and every process it started, the task's own group included), as the OOM killer
  ends a container: Airflow retries the task on the other worker
  (``[scheduler] task_instance_heartbeat_timeout`` 12 s here), nothing published is
  lost, duplicates are at most what the dead task held, and what it held is back on the
  channel within the operator's 10 s msg_timeout, so that the retry applies the whole
  batch in the same DAG run.

One Airflow serves every test (``pytest -s`` prints the figures). The worker-kill
scenario runs ``NSQ_CELERY_KILL_ROUNDS`` times (default 1), each on a fresh topic, a new
worker started after each kill. ``NSQ_CELERY_MSG_TIMEOUT_MS=60000`` gives the
connection nsqd's default msg_timeout, which the task then keeps: the failover as it was
before the operator asked for its own (the retry ends with the held messages still on
the channel, and the test fails). Skipped where PostgreSQL or Redis cannot be had (naming
what is missing), and where ``NSQ_E2E_CELERY=0`` (the version matrix: the main suite
runs it).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection
from airflow_provider_nsq.hooks.base import HELD_MSG_TIMEOUT_MS
from airflow_provider_nsq.testing.polling import wait_for

from .real_airflow import RealAirflow, gone, utc_timestamp

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("NSQ_E2E_CELERY") == "0",
        reason="NSQ_E2E_CELERY=0: the Celery end-to-end runs in the main suite",
    ),
]

DAG_FILE = Path(__file__).parent / "celery_dags" / "nsq_celery.py"
DAG_IDS = ("nsq_celery_flow", "nsq_celery_sensor", "nsq_celery_kill", "nsq_celery_unreachable")
WORKERS = ("worker#1", "worker#2")
FLOW_BATCH = 20
SENSOR_MESSAGES = 3
KILL_MESSAGES = 200
#: Seconds the kill scenario's function takes per message: the batch takes 4 s.
APPLY_SECONDS = 0.02
#: Messages applied before the worker is killed.
KILL_AFTER_APPLIED = 30
#: Airflow fails a task whose heartbeats stopped this long ago (300 s by default); a
#: task heartbeats every 2 s here (5 s by default).
HEARTBEAT_TIMEOUT_S = 12
KILL_ROUNDS = int(os.environ.get("NSQ_CELERY_KILL_ROUNDS", "1"))
#: The connection's msg_timeout_ms: unset (the operator asks for its own 10 s) unless the
#: environment says, to compare (60000: nsqd's default, as before the operator asked).
CONNECTION_MSG_TIMEOUT_MS = os.environ.get("NSQ_CELERY_MSG_TIMEOUT_MS", "")
#: Seconds from the kill until the held messages are back that the test accepts: the
#: task's msg_timeout, and nsqd's scan of in-flight messages, on a busy machine.
REDELIVERY_BOUND_S = int(CONNECTION_MSG_TIMEOUT_MS or HELD_MSG_TIMEOUT_MS) / 1000 + 8
#: ... and until the retried task has finished: the heartbeat timeout, the scheduler,
#: a task process's start, the batch and the task's idle window.
RETRY_BOUND_S = HEARTBEAT_TIMEOUT_S + 75


def _closed_port() -> int:
    with socket.socket() as s:  # nothing listens there once it is closed
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _publish(nsqd, topic: str, bodies: list[bytes]) -> None:
    with NSQConnection(ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        conn.multi_publish(topic, bodies)


@dataclass
class KillFigures:
    """What one worker-kill round measured."""

    published: int
    applied: int
    lost: int
    duplicates: int
    held_at_kill: int
    applied_at_kill: int
    redelivered_s: float
    retry_started_s: float
    retry_finished_s: float
    notes: list[str] = field(default_factory=list)

    def row(self, n: int) -> str:
        return (
            f"| {n} | {self.published} | {self.applied} | {self.lost} | {self.duplicates} | "
            f"{self.applied_at_kill} | {self.held_at_kill} | {self.redelivered_s:.1f} | "
            f"{self.retry_started_s:.1f} | {self.retry_finished_s:.1f} |"
        )


class Deployment:
    """The Airflow of this module, the test nsqd, and what the tests read from them."""

    def __init__(self, airflow: RealAirflow, nsqd, topics: dict[str, str], sink: Path) -> None:
        self.airflow = airflow
        self.nsqd = nsqd
        self.topics = topics
        self.sink = sink
        self.runs: dict[str, str] = {}
        self.kills: list[KillFigures] = []
        self.timings: list[str] = []
        self._workers_started = len(WORKERS)

    # -- workers ---------------------------------------------------------------------------

    def workers(self) -> list[str]:
        return sorted(n for n in self.airflow.processes if n.startswith("worker#"))

    def ready(self, name: str) -> bool:
        """Celery says the worker is consuming (``NAME@host ready.``)."""
        self.airflow.check_alive()
        log = self.airflow.root / f"{name}.log"
        marker = f"{self.airflow.hostname(name)}@"
        return log.exists() and any(
            marker in line and " ready." in line
            for line in log.read_text(errors="replace").splitlines()
        )

    def start_worker(self, wait: bool = True) -> str:
        """One more worker, under a name never used before (returns once it is ready,
        with ``wait``)."""
        self._workers_started += 1
        name = f"worker#{self._workers_started}"
        self.airflow.start(name)
        if wait:
            self.wait_ready(name)
        return name

    def wait_ready(self, name: str) -> None:
        wait_for(lambda: self.ready(name), 120, 0.5, message=f"{name} is ready")

    def drain(self, name: str) -> None:
        """Stop a worker as a node drain does: SIGTERM, Celery's warm shutdown (what
        it runs finishes, what it reserved goes back to the broker)."""
        proc = self.airflow.processes[name]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            self.airflow.kill_whole(name)  # what might be left of it

    def executions(self, dag_id: str, task_id: str) -> list[str]:
        """The hostnames of the workers that ran ``dag_id.task_id`` (every poke of a
        rescheduled sensor), in the order they started (from the workers' logs)."""
        found: list[tuple[str, str]] = []
        for log in self.airflow.root.glob("worker#*.log"):
            worker = self.airflow.hostname(log.stem)
            for line in log.read_text(errors="replace").splitlines():
                if (
                    "Executing workload in Celery" in line
                    and f"log_path='dag_id={dag_id}/" in line
                    and f"/task_id={task_id}/" in line
                ):
                    found.append((line[:32], worker))  # ISO timestamp first
        return [worker for _, worker in sorted(found)]

    # -- runs and task instances -----------------------------------------------------------

    def trigger(self, dag_id: str, **conf: Any) -> str:
        run = self.airflow.api(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf}
        )
        self.runs[dag_id] = run["dag_run_id"]
        return run["dag_run_id"]

    def run_state(self, dag_id: str) -> str | None:
        rows = self.airflow.query(
            "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, self.runs[dag_id]
        )
        return rows[0][0] if rows else None

    def wait_finished(self, dag_id: str, timeout: float = 180) -> str:
        def finished() -> str | None:
            self.airflow.check_alive()
            state = self.run_state(dag_id)
            return state if state in ("success", "failed") else None

        return wait_for(finished, timeout, 0.5, message=f"the {dag_id} run finished")

    def task(self, dag_id: str, task_id: str) -> dict[str, Any]:
        """The task instance's state, worker (hostname), try number, start and end."""
        rows = self.airflow.query(
            "SELECT state, hostname, try_number, start_date, end_date FROM task_instance "
            "WHERE dag_id = ? AND run_id = ? AND task_id = ?",
            dag_id,
            self.runs[dag_id],
            task_id,
        )
        if not rows:
            return {}
        state, hostname, try_number, start, end = rows[0]
        return {
            "state": state,
            "worker": hostname,
            "try": try_number,
            "start": utc_timestamp(start) if start else None,
            "end": utc_timestamp(end) if end else None,
        }

    def xcom(self, dag_id: str, task_id: str) -> Any:
        rows = self.airflow.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? "
            "AND key = 'return_value'",
            dag_id,
            self.runs[dag_id],
            task_id,
        )
        value = json.loads(rows[0][0]) if rows else None
        return json.loads(value) if isinstance(value, str) else value

    def failure(self, dag_id: str, task_id: str) -> dict[str, Any]:
        """The exception the task failed with, from its log (the worker wrote it)."""
        log = (
            self.airflow.home
            / "logs"
            / f"dag_id={dag_id}"
            / f"run_id={self.runs[dag_id]}"
            / f"task_id={task_id}"
            / "attempt=1.log"
        )
        for line in log.read_text(errors="replace").splitlines():
            record = json.loads(line)
            if record.get("event") == "Task failed with exception":
                return record["error_detail"][0]
        raise AssertionError(f"no failure in {log}")

    # -- messages --------------------------------------------------------------------------

    def applied(self, topic: str) -> list[dict[str, Any]]:
        """What the consume tasks applied from ``topic``: one line per call."""
        path = self.sink / f"{topic}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def channel(self, topic: str, channel: str) -> dict[str, Any]:
        return self.nsqd.channel_stats(topic, channel) or {}

    def empty(self, topic: str, channel: str) -> bool:
        c = self.channel(topic, channel)
        return c.get("depth") == 0 and c.get("in_flight_count") == 0


@pytest.fixture(scope="module")
def celery(nsqd, postgres, redis, tmp_path_factory) -> Iterator[Deployment]:
    token = secrets.token_hex(4)
    topics = {
        "flow": f"celery_flow_{token}",
        "sensor": f"celery_sensor_{token}",
    }
    nsqd.create_channel(topics["flow"], "apply")
    nsqd.create_channel(topics["sensor"], "etl")
    root = tmp_path_factory.mktemp("celery")
    sink = root / "sink"
    sink.mkdir()
    nsq = f"nsq://{nsqd.tcp_address}"
    env = {
        # No msg_timeout_ms (unless asked): the consume operator asks for its own.
        "AIRFLOW_CONN_NSQ_DEFAULT": f"{nsq}?http_port={nsqd.http_port}"
        + (f"&msg_timeout_ms={CONNECTION_MSG_TIMEOUT_MS}" if CONNECTION_MSG_TIMEOUT_MS else ""),
        # Two closed ports on 127.0.0.1: host:port, then the failover list.
        "AIRFLOW_CONN_NSQ_DOWN": (
            f"nsq://127.0.0.1:{_closed_port()}?connect_timeout=2"
            f"&nsqd_tcp_addresses=127.0.0.1:{_closed_port()}"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        # A dead worker's task fails (and is retried) this long after its last heartbeat.
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
        "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300",
        # Sending a task to Redis may take more than the default 1 s on a busy machine.
        "AIRFLOW__CELERY__OPERATION_TIMEOUT": "10",
        "NSQ_CELERY_FLOW_TOPIC": topics["flow"],
        "NSQ_CELERY_SENSOR_TOPIC": topics["sensor"],
        "NSQ_CELERY_SINK_DIR": str(sink),
        "NSQ_CELERY_FLOW_BATCH": str(FLOW_BATCH),
        "NSQ_CELERY_SENSOR_MESSAGES": str(SENSOR_MESSAGES),
        "NSQ_CELERY_KILL_MESSAGES": str(KILL_MESSAGES),
        "NSQ_CELERY_APPLY_SECONDS": str(APPLY_SECONDS),
    }
    database = postgres.create_database(f"celery_{token}")
    (root / "airflow").mkdir()
    airflow = RealAirflow(root / "airflow", [DAG_FILE], env, database, broker=redis.url)
    deployment = Deployment(airflow, nsqd, topics, sink)
    started = time.monotonic()
    airflow.migrate()
    try:
        airflow.start_all(["api-server", "dag-processor", "scheduler", *WORKERS])

        def parsed() -> bool:
            airflow.check_alive()
            errors = airflow.import_errors()
            assert not errors, f"the DAG file does not import: {errors[0]}"
            return set(DAG_IDS) <= {r[0] for r in airflow.query("SELECT dag_id FROM dag")}

        wait_for(parsed, 240, 0.5, message="the DAG processor parsed the DAGs")
        # The scenarios of (a) run at once, as soon as the workers take them; each test
        # waits for the runs it reads.
        for dag_id in ("nsq_celery_flow", "nsq_celery_sensor", "nsq_celery_unreachable"):
            deployment.trigger(dag_id)
        for name in WORKERS:
            deployment.wait_ready(name)
        deployment.timings.append(
            f"Airflow with two Celery workers up in {time.monotonic() - started:.0f}s"
        )
        yield deployment
        print()
        for line in deployment.timings:
            print(line)
        if deployment.kills:
            print(
                "\nWorker killed mid-batch (seconds from the kill until the held messages "
                "were back on the channel, until the retry started and until it finished):"
            )
            print(
                "| round | published | applied | lost | duplicates | applied at kill | "
                "held at kill | redelivered (s) | retry started (s) | retry finished (s) |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|")
            for n, figures in enumerate(deployment.kills, start=1):
                print(figures.row(n))
            for n, figures in enumerate(deployment.kills, start=1):
                for note in figures.notes:
                    print(f"  round {n}: {note}")
    finally:
        stopping = time.monotonic()
        # Killed, not stopped: nothing is left to finish, and a graceful stop takes 15 s
        # (Celery's warm shutdown, the API server's), a tenth of the module's time.
        for name in list(airflow.processes):
            airflow.kill_whole(name)
        airflow.stop_all()
        print(
            f"Airflow stopped in {time.monotonic() - stopping:.0f}s; the module took "
            f"{time.monotonic() - started:.0f}s from `airflow db migrate`"
        )


# -- (a) the operators and the sensor on Celery workers ------------------------------------


def test_publish_operators_and_consume_run_on_workers(celery):
    assert celery.wait_finished("nsq_celery_flow") == "success"
    workers = {celery.airflow.hostname(n) for n in WORKERS}
    for task_id in ("pub", "dpub", "mpub", "apply"):
        task = celery.task("nsq_celery_flow", task_id)
        assert task["state"] == "success" and task["worker"] in workers, (task_id, task)
    expected = ["pub", "dpub", *(f"mpub-{i}" for i in range(FLOW_BATCH))]
    applied = Counter(
        json.loads(line["body"])["n"] for line in celery.applied(celery.topics["flow"])
    )
    assert applied == Counter(expected)  # each once
    summary = celery.xcom("nsq_celery_flow", "apply")
    assert summary["applied"] == len(expected) and summary["requeued"] == 0, summary
    assert celery.empty(celery.topics["flow"], "apply")


def test_a_sensor_in_reschedule_mode_moves_between_workers(celery):
    """The first poke's worker is drained while the sensor waits for its next poke (the
    messages published meanwhile): the next poke runs on the other worker and takes
    them."""
    dag_id = "nsq_celery_sensor"

    def rescheduled() -> list[str]:
        rows = celery.airflow.query(
            "SELECT count(*) FROM task_reschedule r JOIN task_instance ti ON ti.id = r.ti_id "
            "WHERE ti.dag_id = ? AND ti.run_id = ?",
            dag_id,
            celery.runs[dag_id],
        )
        return celery.executions(dag_id, "wait") if rows and rows[0][0] else []

    wait_for(lambda: celery.executions(dag_id, "wait"), 180, 0.5, message="the sensor's first poke")
    # A third worker, so that two remain (for what follows): the next poke runs on
    # either, not on the first one's.
    celery.start_worker(wait=False)
    first = wait_for(rescheduled, 180, 0.5, message="the sensor's first poke rescheduled")[0]
    drained = next(n for n in celery.workers() if celery.airflow.hostname(n) == first)
    draining = time.monotonic()
    celery.drain(drained)
    drain_s = time.monotonic() - draining
    bodies = [json.dumps({"n": n}).encode() for n in range(SENSOR_MESSAGES)]
    _publish(celery.nsqd, celery.topics["sensor"], bodies)
    assert celery.wait_finished(dag_id) == "success"
    pokes = celery.executions(dag_id, "wait")
    assert len(pokes) >= 2 and pokes[0] == first and set(pokes[1:]) - {first}, pokes
    records = celery.xcom(dag_id, "wait")
    assert sorted(json.loads(r["body"])["n"] for r in records) == list(range(SENSOR_MESSAGES))
    assert celery.empty(celery.topics["sensor"], "etl")
    celery.timings.append(
        f"sensor pokes ran on {pokes} ({drained} drained after the first, in {drain_s:.1f}s)"
    )


def test_a_worker_that_cannot_reach_nsqd_fails_naming_what_it_tried(celery):
    assert celery.wait_finished("nsq_celery_unreachable") == "failed"
    down = celery.airflow.env["AIRFLOW_CONN_NSQ_DOWN"]
    first = down.removeprefix("nsq://").split("?")[0]
    second = down.split("nsqd_tcp_addresses=")[1]
    for task_id, opening in (
        ("pub", "no nsqd accepted a connection: "),
        ("apply", f"could not read {celery.topics['flow']}/down from any nsqd: "),
    ):
        assert celery.task("nsq_celery_unreachable", task_id)["state"] == "failed"
        error = celery.failure("nsq_celery_unreachable", task_id)
        assert error["exc_type"] == "NSQConnectionError", error
        assert error["exc_value"] == opening + "; ".join(
            f"{a} (could not connect to nsqd at {a}: Connection refused)" for a in (first, second)
        )


# -- (b) a worker killed whole mid-batch --------------------------------------------------


@pytest.mark.parametrize("round_", range(1, KILL_ROUNDS + 1))
def test_a_worker_killed_mid_batch_loses_nothing_and_the_retry_applies_the_batch(celery, round_):
    for dag_id in ("nsq_celery_flow", "nsq_celery_sensor", "nsq_celery_unreachable"):
        celery.wait_finished(dag_id)  # the workers free for this scenario alone
    while len(celery.workers()) < 2:
        celery.start_worker()
    for name in celery.workers():
        celery.wait_ready(name)
    airflow, dag_id = celery.airflow, "nsq_celery_kill"
    topic = f"celery_kill_{secrets.token_hex(4)}_{round_}"
    celery.nsqd.create_channel(topic, "apply")
    published = set(range(KILL_MESSAGES))
    _publish(celery.nsqd, topic, [json.dumps({"n": n}).encode() for n in sorted(published)])
    celery.trigger(dag_id, topic=topic)

    def mid_batch() -> dict[str, Any] | None:
        airflow.check_alive()
        task = celery.task(dag_id, "apply")
        running = task.get("state") == "running" and task.get("worker")
        return task if running and len(celery.applied(topic)) >= KILL_AFTER_APPLIED else None

    # The task has started (and heartbeat): apache/airflow#66773 leaves a task killed
    # before its first heartbeat RUNNING for ever.
    task = wait_for(mid_batch, 180, 0.05, message="the consume task applying")
    victim = next(n for n in celery.workers() if airflow.hostname(n) == task["worker"])
    timeouts_before = celery.channel(topic, "apply").get("timeout_count", 0)
    killed_at, killed_wall = time.monotonic(), time.time()
    processes = airflow.kill_whole(victim)
    # Dead: what nsqd has in flight now is exactly what the task held.
    held = celery.channel(topic, "apply").get("in_flight_count", 0)
    applied_at_kill = len(celery.applied(topic))
    assert held > 0, "the task held nothing when its worker was killed"
    wait_for(lambda: gone(processes), 10, 0.1, message=f"every process of {victim} gone")

    def redelivered() -> bool:
        return celery.channel(topic, "apply").get("timeout_count", 0) - timeouts_before >= held

    wait_for(
        redelivered, REDELIVERY_BOUND_S + 30, 0.1, message="the held messages back on the channel"
    )
    redelivered_s = time.monotonic() - killed_at
    assert celery.wait_finished(dag_id, timeout=RETRY_BOUND_S + 60) == "success"
    retry = celery.task(dag_id, "apply")
    assert retry["try"] == 2 and retry["worker"] not in (None, task["worker"]), retry
    lines = celery.applied(topic)
    bodies = Counter(json.loads(line["body"])["n"] for line in lines)
    figures = KillFigures(
        published=len(published),
        applied=len(set(bodies) & published),
        lost=len(published - set(bodies)),
        duplicates=sum(c - 1 for c in bodies.values()),
        held_at_kill=held,
        applied_at_kill=applied_at_kill,
        redelivered_s=redelivered_s,
        retry_started_s=retry["start"] - killed_wall,
        retry_finished_s=retry["end"] - killed_wall,
    )
    again = sum(1 for line in lines if line["attempts"] > 1 and line["worker"] == retry["worker"])
    figures.notes.append(
        f"killed {victim} ({len(processes) + 1} processes); retried on {retry['worker']}, which "
        f"applied {again} redelivered message(s)"
    )
    celery.kills.append(figures)
    assert figures.lost == 0, figures
    assert figures.duplicates <= held, figures
    assert celery.empty(topic, "apply"), celery.channel(topic, "apply")
    assert again > 0, figures  # what the dead task held, applied in this run
    assert redelivered_s < REDELIVERY_BOUND_S, figures
    assert figures.retry_finished_s < RETRY_BOUND_S, figures
