"""Helpers for the Airflow-layer tests: the ``nsq_default`` connection pointing at the
test broker, an independent consumer to see what nsqd holds, and ``dag.test()``
runners that report task states and XCom values; :func:`needs_airflow` for what a
newer Airflow brings (the matrix runs these tests on every supported version); the
``postgres`` server the real-Airflow tests keep their metadata DBs on, and the ``redis``
server their CeleryExecutor uses as its broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import distribution, version
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from airflow_provider_nsq.client import ClientConfig, NSQConsumer, NSQMessage

ROOT = Path(__file__).resolve().parents[2]
TEST_DAGS = ROOT / "tests" / "dags"
EXAMPLE_DAGS = ROOT / "example_dags"
#: The Airflow these tests run on (read without importing Airflow).
AIRFLOW_VERSION = Version(version("apache-airflow"))


#: For the modules that run triggers: Python's report of what a closing generator could
#: not do ("async generator ignored GeneratorExit") fails the test instead of a log line.
unraisable_is_an_error = pytest.mark.filterwarnings(
    "error::pytest.PytestUnraisableExceptionWarning"
)


def project_urls() -> dict[str, str]:
    """pyproject.toml's ``[project.urls]``, as the installed distribution carries them
    (``Project-URL``: Airflow reads the documentation link there); skips while the
    installed metadata predates them (an editable install from before a change:
    ``make install`` refreshes it)."""
    written = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    urls: dict[str, str] = written["project"]["urls"]
    fields = distribution("airflow-provider-nsq").metadata.get_all("Project-URL") or []
    installed = dict(tuple(part.strip() for part in field.split(",", 1)) for field in fields)
    if installed != urls:
        pytest.skip(
            "the installed metadata predates pyproject.toml's [project.urls] "
            "(`make install` refreshes it)"
        )
    return urls


def needs_airflow(minimum: str, what: str) -> pytest.MarkDecorator:
    """Skip on an Airflow older than ``minimum``, saying which version ``what`` needs."""
    return pytest.mark.skipif(
        Version(minimum) > AIRFLOW_VERSION,
        reason=f"{what} needs Airflow >= {minimum}; this is Airflow {AIRFLOW_VERSION}",
    )


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A PostgreSQL server for real Airflows' metadata DBs (one database each: see
    :mod:`.postgres_server`), started on first use and stopped at the end of the session;
    skips, naming what is missing, where PostgreSQL cannot be had."""
    from .postgres_server import PostgresServer, missing

    reason = missing()
    if reason:
        pytest.skip(reason)
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis() -> Iterator[Any]:
    """A Redis server, the broker of real Airflows' CeleryExecutor (see
    :mod:`.redis_server`), started on first use and stopped at the end of the session;
    skips, naming what is missing, where Redis (or Celery) cannot be had."""
    from .redis_server import RedisServer, missing

    reason = missing()
    if reason:
        pytest.skip(reason)
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def nsq_default(nsqd, monkeypatch) -> str:
    """Point the ``nsq_default`` Airflow connection at the test nsqd (env-var URI form)."""
    uri = f"nsq://{nsqd.host}:{nsqd.tcp_port}?http_port={nsqd.http_port}"
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", uri)
    return uri


@pytest.fixture
def nsq_default_tcp_only(nsqd, monkeypatch) -> str:
    """``nsq_default`` without nsqd's HTTP port: sensors must fall back to TCP windows."""
    uri = f"nsq://{nsqd.host}:{nsqd.tcp_port}"
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", uri)
    return uri


def client_config(nsqd, **changes: Any) -> ClientConfig:
    return ClientConfig(host=nsqd.host, port=nsqd.tcp_port, **changes)


def read(nsqd, topic: str, channel: str, count: int, timeout: float = 10.0) -> list[NSQMessage]:
    """What a plain consumer gets: one window of up to ``count`` messages, FIN'd."""
    with NSQConsumer(topic, channel, config=client_config(nsqd)) as consumer:
        return consumer.consume(max_messages=count, timeout=timeout, ack="fin")


def channel_is_empty(nsqd, topic: str, channel: str) -> bool:
    stats = nsqd.channel_stats(topic, channel)
    return stats is not None and stats["depth"] == 0 and stats["in_flight_count"] == 0


_bags: dict[Path, Any] = {}


def load_dag(path: Path, dag_id: str):
    """Parse a DAG file the way Airflow does (once per file) and return one of its DAGs."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.0
        from airflow.models.dagbag import DagBag

    if path not in _bags:
        bag = DagBag(dag_folder=str(path))
        assert not bag.import_errors, bag.import_errors
        _bags[path] = bag
    dag = _bags[path].dags.get(dag_id)
    if dag is None:
        raise LookupError(f"no DAG {dag_id!r} in {path}")
    return dag


class RunResult:
    """A finished ``dag.test()`` run: its state, task states and XCom return values."""

    def __init__(self, dag_run) -> None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        self.dag_id = dag_run.dag_id
        self.run_id = dag_run.run_id
        self.state = str(dag_run.state)
        with create_session() as session:
            tis = session.scalars(
                select(TaskInstance).where(
                    TaskInstance.dag_id == self.dag_id, TaskInstance.run_id == self.run_id
                )
            ).all()
            self.task_states = {ti.task_id: str(ti.state) for ti in tis}
            rows = session.scalars(
                XComModel.get_many(run_id=self.run_id, dag_ids=self.dag_id, key="return_value")
            ).all()
            self.xcom = {row.task_id: XComModel.deserialize_value(row) for row in rows}

    def __repr__(self) -> str:
        return f"<RunResult {self.dag_id} {self.state} {self.task_states}>"


def airflow_cli_json(airflow_home: str, *args: str) -> Any:
    """The JSON that ``airflow <args> -o json`` prints (Airflow 3.0 and 3.1 print their
    log lines to stdout too, before it)."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), *args, "-o", "json"],
        env={**os.environ, "AIRFLOW_HOME": airflow_home},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    decoder = json.JSONDecoder()
    for line in done.stdout.splitlines():
        if line.startswith("[{") or line == "[]":
            return decoder.raw_decode(done.stdout[done.stdout.index(line) :])[0]
    raise AssertionError(f"no JSON list in the output of airflow {' '.join(args)}:\n{done.stdout}")


def run_dag(dag, **conf: Any) -> RunResult:
    return RunResult(dag.test(run_conf=conf))
