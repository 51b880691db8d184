"""``make demo``: the whole NSQ -> Airflow -> Spark -> NSQ pipeline on this machine.

Starts NSQ as it is deployed: two embedded nsqds registered with one embedded nsqlookupd
(or uses the one nsqd of ``NSQD_ADDRESS``), points Airflow at a throw-away home and runs
the example DAGs with ``dag.test()``: the producer (``example_dags/nsq_gate_spark_job.py``,
which spreads its events over both nsqds), then the XCom gate (NSQSensor, which finds them
through the lookupd -> stage -> spark-submit -> announce), then the stream
gate (``example_dags/nsq_stream_gate_spark_job.py``: a depth-only sensor -> spark-submit
that drains the channel with ``readStream.format("nsq")`` -> announce). It reads the
results back from NSQ and prints a summary with the per-nsqd counts. The Spark jobs run on
``--spark-master`` (``local[*]`` by default: this machine). Exit status 0 when
everything worked; a missing Java or a busy port is one sentence on stderr and status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DAG_FILE = ROOT / "example_dags" / "nsq_gate_spark_job.py"
STREAM_DAG_FILE = ROOT / "example_dags" / "nsq_stream_gate_spark_job.py"
# Each gate reads its own durable channel of the events topic (each gets every event).
XCOM_CHANNEL, STREAM_CHANNEL = "spark-gate", "spark-stream"
# The demo imports the provider from the checkout even when run outside the venv's install.
sys.path.insert(0, str(ROOT))


class DemoError(Exception):
    """A problem the user can fix; its text is the one sentence printed."""


def step(text: str) -> None:
    print(f"==> {text}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60, help="synthetic events (default 60)")
    parser.add_argument("--tcp-port", type=int, default=4150, help="first embedded nsqd's TCP port")
    parser.add_argument(
        "--http-port", type=int, default=4151, help="first embedded nsqd's HTTP port"
    )
    parser.add_argument(
        "--spark-master",
        default="local[*]",
        metavar="URL",
        help="the master spark-submit runs the jobs on: the spark_default connection's host "
        "(default local[*], this machine)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show Airflow's and Spark's own logs"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary AIRFLOW_HOME and staged files"
    )
    return parser.parse_args(argv)


# -- preflight --------------------------------------------------------------------------


def check_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise DemoError(
            "Java was not found (no `java` on PATH and JAVA_HOME is not set): Spark needs "
            "Java 17 or newer, e.g. `apt-get install openjdk-17-jre-headless`."
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DemoError(f"Java at {java} does not run ({exc}): Spark needs Java 17.") from None
    first = (out.stderr or out.stdout).strip().splitlines()
    return first[0] if first else java


def check_spark_submit() -> None:
    if not shutil.which("spark-submit"):
        raise DemoError(
            "spark-submit was not found on PATH: install pyspark into this environment "
            "(`make demo` does) or put its bin directory on PATH."
        )


def check_port_free(port: int, what: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise DemoError(
                    f"Port {port} ({what}) on 127.0.0.1 is already in use: stop what listens "
                    f"there, choose other ports with --tcp-port/--http-port, or use a running "
                    f"nsqd with NSQD_ADDRESS=127.0.0.1:{port}."
                ) from None
            raise


def check_reachable(host: str, port: int) -> None:
    try:
        with socket.create_connection((host, port), timeout=5):
            pass
    except OSError as exc:
        raise DemoError(
            f"Cannot reach nsqd at {host}:{port} (NSQD_ADDRESS): {exc.strerror or exc}."
        ) from None


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise DemoError(f"NSQD_ADDRESS must be host:port, got {address!r}.")
    return host.strip("[]"), int(port)


# -- broker -----------------------------------------------------------------------------


@dataclass
class NSQ:
    """Where the demo's NSQ is: the nsqds (the first takes the Spark job's results) and
    the nsqlookupd that lists them (None with ``NSQD_ADDRESS``)."""

    nsqds: list[tuple[str, int]]
    lookupd_http: str | None
    description: str
    stop: list[Any] = field(default_factory=list)
    http_ports: list[int] = field(default_factory=list)  # each nsqd's HTTP port

    @property
    def http_port(self) -> int:
        return self.http_ports[0]

    @property
    def host(self) -> str:
        return self.nsqds[0][0]

    @property
    def port(self) -> int:
        return self.nsqds[0][1]

    @property
    def addresses(self) -> list[str]:
        return [f"{host}:{port}" for host, port in self.nsqds]


@contextlib.contextmanager
def broker(args: argparse.Namespace) -> Iterator[NSQ]:
    """Two embedded nsqds behind one embedded nsqlookupd, or the nsqd of NSQD_ADDRESS."""
    external = os.environ.get("NSQD_ADDRESS")
    if external:
        host, port = split_address(external)
        check_reachable(host, port)
        http = os.environ.get("NSQD_HTTP_ADDRESS")
        http_port = split_address(http)[1] if http else port + 1
        yield NSQ(
            [(host, port)], None, f"nsqd at {host}:{port} (NSQD_ADDRESS)", http_ports=[http_port]
        )
        return
    check_port_free(args.tcp_port, "embedded nsqd TCP")
    check_port_free(args.http_port, "embedded nsqd HTTP")
    from airflow_provider_nsq.testing.broker import EmbeddedNSQD
    from airflow_provider_nsq.testing.lookupd import EmbeddedNSQLookupd

    started: list[Any] = []
    try:
        lookupd = EmbeddedNSQLookupd().start()  # free ports
        started.append(lookupd)
        register = [lookupd.tcp_address]
        first = EmbeddedNSQD(
            host="127.0.0.1",
            tcp_port=args.tcp_port,
            http_port=args.http_port,
            lookupd_tcp_addresses=register,
        ).start()
        started.append(first)
        second = EmbeddedNSQD(host="127.0.0.1", lookupd_tcp_addresses=register).start()
        started.append(second)
    except OSError as exc:
        for server in reversed(started):
            server.stop()
        if exc.errno == errno.EADDRINUSE:
            raise DemoError(
                f"Port {args.tcp_port} or {args.http_port} on 127.0.0.1 was taken while the "
                "embedded nsqd started: pick others with --tcp-port/--http-port."
            ) from None
        raise
    try:
        yield NSQ(
            [(n.host, n.tcp_port) for n in (first, second)],
            lookupd.http_address,
            f"embedded nsqds on {first.tcp_address} and {second.tcp_address}, registered "
            f"with the embedded nsqlookupd on {lookupd.http_address}",
            http_ports=[first.http_port, second.http_port],
        )
    finally:
        step("Stopping the embedded nsqds and nsqlookupd")
        for server in reversed(started):
            server.stop()


# -- Airflow ----------------------------------------------------------------------------


def connection_ids(nsq: NSQ) -> list[str]:
    """One Airflow connection per nsqd, for the producer to publish to each."""
    return [f"nsq_{i + 1}" for i in range(len(nsq.nsqds))]


def configure_airflow(home: str, nsq: NSQ, verbose: bool, spark_master: str) -> None:
    """Environment for dag.test(); must happen before anything imports Airflow.

    ``nsq_default`` is the first nsqd plus the lookupd: the gate's sensor reads every
    nsqd the lookupd lists. ``nsq_1``, ``nsq_2`` are the nsqds, one each, for the
    producer (a publisher writes to its own nsqd). ``spark_default``'s host is
    ``spark_master``."""
    # With a lookupd the gates read each nsqd's /stats at the http_port it lists; a lone
    # nsqd needs its own http_port to be read without taking messages.
    default = f"nsq://{nsq.host}:{nsq.port}"
    if nsq.lookupd_http:
        default += f"?lookupd_http_addresses={nsq.lookupd_http}"
    else:
        default += f"?http_port={nsq.http_port}"
    for conn_id, address in zip(connection_ids(nsq), nsq.addresses, strict=True):
        os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = f"nsq://{address}"
    os.environ.update(
        {
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # dag.test() needs the DAG file inside the dags folder.
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FILE.parent),
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW_CONN_NSQ_DEFAULT": default,
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark_master}),
            # Spark's Python workers must be this interpreter (it has the provider).
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # Spark's driver (and spark-submit's) listens on loopback only.
            "SPARK_LOCAL_IP": "127.0.0.1",
            "NSQ_STAGING_DIR": str(Path(home) / "staging"),
        }
    )
    if not verbose:
        os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"


def spark_master() -> str:
    """The master the Spark jobs run on: the ``spark_default`` connection's host, as
    configure_airflow() set it (what the demo prints is what spark-submit is given)."""
    return str(json.loads(os.environ["AIRFLOW_CONN_SPARK_DEFAULT"])["host"])


def show_task_progress() -> None:
    """Register an Airflow listener that prints one line per task as dag.test() runs it
    (defined here: importing Airflow must wait until configure_airflow() ran)."""
    from airflow.listeners import hookimpl
    from airflow.sdk.listener import get_listener_manager

    class TaskProgress:
        def __init__(self) -> None:
            self.started: dict[str, float] = {}

        @hookimpl
        def on_task_instance_running(self, previous_state: Any, task_instance: Any) -> None:
            self.started[task_instance.task_id] = time.monotonic()
            print(f"    - {task_instance.task_id} ...", flush=True)

        @hookimpl
        def on_task_instance_success(self, previous_state: Any, task_instance: Any) -> None:
            began = self.started.get(task_instance.task_id, time.monotonic())
            took = time.monotonic() - began
            print(f"    - {task_instance.task_id} done ({took:.1f}s)", flush=True)

        @hookimpl
        def on_task_instance_failed(
            self, previous_state: Any, task_instance: Any, error: Any
        ) -> None:
            print(f"    - {task_instance.task_id} FAILED: {error}", flush=True)

    get_listener_manager().add_listener(TaskProgress())


def load_dags(path: Path = DAG_FILE) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def xcom(dag_run: Any, task_id: str) -> Any:
    ti = dag_run.get_task_instance(task_id)
    return ti.xcom_pull(task_ids=task_id) if ti is not None else None


def mapped_xcoms(dag_run: Any, task_id: str) -> list[Any]:
    """The return values of a mapped task, by map index."""
    tis = sorted(
        (ti for ti in dag_run.get_task_instances() if ti.task_id == task_id),
        key=lambda ti: ti.map_index,
    )
    return [ti.xcom_pull(task_ids=task_id, map_indexes=ti.map_index) for ti in tis]


def run_dag(dag: Any, conf: dict[str, Any]) -> Any:
    started = time.monotonic()
    dag_run = dag.test(run_conf=conf)
    took = time.monotonic() - started
    if dag_run.state != "success":
        failed = [ti.task_id for ti in dag_run.get_task_instances() if ti.state not in ("success",)]
        raise DemoError(
            f"DAG {dag.dag_id} ended {dag_run.state} (tasks not successful: "
            f"{', '.join(failed) or 'none'}); rerun with --verbose to see the task logs."
        )
    print(f"    {dag.dag_id}: success in {took:.1f}s", flush=True)
    return dag_run


def read_back(nsq: NSQ, topic: str, expected: int) -> list[dict[str, Any]]:
    """What a consumer of ``topic`` gets from every nsqd (the Spark writer spreads its
    partitions over them)."""
    from airflow_provider_nsq.client.consumer import NSQConsumer

    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        with NSQConsumer(topic, "demo-readback", nsqd_tcp_addresses=nsq.addresses) as consumer:
            messages = consumer.consume(max_messages=100, timeout=2.0)
        got.extend(json.loads(m.body) for m in messages)
    return got


# -- main -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    step("Checking Java and spark-submit")
    print(f"    {check_java()}", flush=True)
    check_spark_submit()
    home = tempfile.mkdtemp(prefix="nsq-demo-airflow-")
    try:
        step("Starting the NSQ broker")
        with broker(args) as nsq:
            print(f"    using {nsq.description}", flush=True)
            # A shared nsqd may hold channels and messages from earlier runs: use fresh
            # topics there. The embedded broker starts empty, so plain names read best.
            suffix = f".{uuid.uuid4().hex[:6]}" if os.environ.get("NSQD_ADDRESS") else ""
            topics = {
                "events_topic": f"pipeline.events{suffix}",
                "results_topic": f"pipeline.results{suffix}",
                "done_topic": f"pipeline.done{suffix}",
            }
            configure_airflow(home, nsq, args.verbose, args.spark_master)

            step(f"Creating the Airflow metadata DB in {home}")
            from airflow.utils import db

            with (
                open(os.devnull, "w") as devnull,
                contextlib.redirect_stdout(sys.stdout if args.verbose else devnull),
            ):
                db.resetdb()
            dags = load_dags()
            stream_dags = load_dags(STREAM_DAG_FILE)
            show_task_progress()

            # Both channels exist on every nsqd before the first event, so each gets every
            # event (a topic keeps what it holds for its first channel only).
            from airflow_provider_nsq.client.http.nsqd_api import NSQDHTTPClient

            for (nsqd_host, _), http_port in zip(nsq.nsqds, nsq.http_ports, strict=True):
                api = NSQDHTTPClient(nsqd_host, http_port)
                for channel in (XCOM_CHANNEL, STREAM_CHANNEL):
                    api.channel_depth(topics["events_topic"], channel, create=True)

            step(
                f"Producer DAG: publishing {args.events} events to {topics['events_topic']}, "
                f"spread over {len(nsq.nsqds)} nsqd(s)"
            )
            produced = run_dag(
                dags.producer_dag,
                {
                    "events_topic": topics["events_topic"],
                    "event_count": args.events,
                    "seed": 7,
                    "nsq_conn_ids": connection_ids(nsq),
                },
            )
            # Map index i published through nsq_{i + 1}, i.e. to nsqd i.
            per_nsqd_published = {
                address: (value or {}).get("messages", 0)
                for address, value in zip(
                    nsq.addresses, mapped_xcoms(produced, "publish_events"), strict=False
                )
            }
            published = sum(per_nsqd_published.values())

            step(
                "Gate DAG (about 30 s; spark-submit starts its own JVM): NSQSensor"
                + (" (through nsqlookupd) -> " if nsq.lookupd_http else " -> ")
                + f"stage JSON Lines -> spark-submit ({spark_master()}) -> "
                f"{topics['results_topic']} -> {topics['done_topic']}"
            )
            gated = run_dag(dags.gate_dag, {**topics, "channel": XCOM_CHANNEL})
            records = xcom(gated, "wait_for_events") or []
            received = len(records)
            # Over several nsqds, each record says which one delivered it.
            per_nsqd_received = Counter(r.get("nsqd", nsq.addresses[0]) for r in records)
            staged = xcom(gated, "stage_events") or {}

            step(f"Reading the results back from {topics['results_topic']}")
            expected = len(dags.PIPELINES)
            results = sorted(
                read_back(nsq, topics["results_topic"], expected),
                key=lambda r: r.get("pipeline", ""),
            )
            done = read_back(nsq, topics["done_topic"], 1)

            aggregated = sum(int(r.get("events", 0)) for r in results)
            print()
            print("Summary")
            print(f"  events published             {published:>6}  ({topics['events_topic']})")
            for address in nsq.addresses:
                print(f"      on nsqd {address:<21} {per_nsqd_published.get(address, 0):>6}")
            where = f", found through nsqlookupd {nsq.lookupd_http}" if nsq.lookupd_http else ""
            print(f"  messages the gate received   {received:>6}  (channel {XCOM_CHANNEL}{where})")
            for address in nsq.addresses:
                print(f"      from nsqd {address:<19} {per_nsqd_received.get(address, 0):>6}")
            print(f"  events staged for Spark      {staged.get('events', 0):>6}")
            print(f"  rows Spark aggregated        {aggregated:>6}  ({len(results)} pipelines)")
            print(f"  result messages read back    {len(results):>6}  ({topics['results_topic']})")
            for r in results:
                print(
                    f"      {r['pipeline']:<10} {r['events']:>4} events  {r['failed']:>3} failed  "
                    f"{r['rows']:>8} rows  avg {r['avg_duration_ms']:>8.1f} ms"
                )
            print(f"  done message                 {json.dumps(done[0]) if done else 'missing'}")
            if (
                published != args.events
                or received != published
                or aggregated != received
                or any(per_nsqd_received.get(a, 0) != n for a, n in per_nsqd_published.items())
            ):
                raise DemoError(
                    "The counts above do not line up (see the summary); rerun with --verbose."
                )
            if len(results) != expected or len(done) != 1:
                raise DemoError(
                    f"Expected {expected} result messages and 1 done message, read "
                    f"{len(results)} and {len(done)}."
                )

            step(
                "Stream gate DAG (about 40 s): channel depth from /stats (nothing taken) -> "
                f"spark-submit ({spark_master()}): readStream.format('nsq'), availableNow, drains "
                f"{topics['events_topic']}/{STREAM_CHANNEL} -> {topics['results_topic']}"
            )
            streamed = run_dag(stream_dags.stream_gate_dag, {**topics, "channel": STREAM_CHANNEL})
            job = xcom(streamed, "read_job_summary") or {}
            stream_results = read_back(nsq, topics["results_topic"], expected)
            stream_done = read_back(nsq, topics["done_topic"], 1)
            stream_rows = sum(int(r.get("events", 0)) for r in stream_results)
            print()
            print("Summary (stream gate)")
            print(
                f"  events Spark drained itself  {job.get('events_received', 0):>6}  "
                f"(channel {STREAM_CHANNEL}; none went through XCom)"
            )
            print(
                f"  rows Spark aggregated        {stream_rows:>6}  ({len(stream_results)} pipelines)"
            )
            print(
                f"  result messages read back    {len(stream_results):>6}  ({topics['results_topic']})"
            )
            print(
                "  done message                 "
                f"{json.dumps(stream_done[0]) if stream_done else 'missing'}"
            )
            if job.get("events_received") != published or stream_rows != published:
                raise DemoError(
                    "The stream gate's counts do not line up (see the summary); rerun with "
                    "--verbose."
                )
            if len(stream_results) != expected or len(stream_done) != 1:
                raise DemoError(
                    f"Expected {expected} result messages and 1 done message from the stream "
                    f"gate, read {len(stream_results)} and {len(stream_done)}."
                )
    finally:
        if args.keep:
            print(f"    kept {home}", flush=True)
        else:
            shutil.rmtree(home, ignore_errors=True)
    print(
        "\nDemo finished: NSQ gated both Spark jobs (one fed through XCom, one reading NSQ "
        "itself) and their results came back through NSQ."
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except DemoError as exc:
        print(f"demo: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("demo: interrupted.", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
