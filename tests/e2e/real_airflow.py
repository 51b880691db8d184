"""A real Airflow for end-to-end tests: ``api-server``, ``scheduler``, ``dag-processor``
and ``triggerer`` as separate processes in a temporary ``AIRFLOW_HOME`` (LocalExecutor,
everything on 127.0.0.1), each in its own process group so that it can be stopped (or
killed) whole, its output in ``<root>/<component>.log``.

The metadata database is SQLite in the home, or a PostgreSQL database (the
``postgres`` fixture's server, :mod:`.postgres_server`), as deployments run it: there
several schedulers and triggerers may run at once (``start("scheduler#2")``). Each
component reports its name as its host name (``job.hostname`` in the metadata DB), so a
test can tell which triggerer holds a trigger and kill that one.

With a broker (the ``redis`` fixture's server, :mod:`.redis_server`) and PostgreSQL, the
executor is CeleryExecutor, as Airflow's docker-compose and Helm chart run it: tasks run
in Celery workers (``start("worker#1")``, ``airflow celery worker``), and a task
instance's ``hostname`` names the worker that ran it. A worker forks a process per task,
and since Airflow 3.3 that process runs the task in a process group of its own:
:meth:`RealAirflow.kill_whole` kills a component with every process it started, as the
OOM killer ends a container.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_nsq.testing.polling import wait_for
from tests.support.net import free_port

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


def _descendants(pid: int) -> list[Any]:
    """Every process ``pid`` started, and theirs, whatever their group (as
    ``psutil.Process``: signalled through it, a PID reused meanwhile is left alone)."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _signal_all(processes: Iterable[Any], sig: signal.Signals) -> None:
    """Send ``sig`` to each of ``processes`` (started by this test) still there."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(sig)


def gone(processes: Iterable[Any]) -> bool:
    """None of ``processes`` runs any more (a zombie, waiting to be reaped, is gone)."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                return False
    return True


def utc_timestamp(text: str) -> float:
    """Seconds since the epoch of a timestamp the metadata DB stores (UTC, maybe naive;
    :meth:`RealAirflow.query` hands them over as text)."""
    stamp = datetime.datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp.timestamp()


#: ``[core] hostname_callable`` of every component: the name it was started as.
_HOSTNAME_MODULE = textwrap.dedent(
    """\
    import os
    import socket


    def hostname():
        return os.environ.get("NSQ_TEST_COMPONENT") or socket.getfqdn()
    """
)


def _as_sqlite_gives(value: Any) -> Any:
    """A PostgreSQL value as SQLite's driver returns it: timestamps and JSON as text."""
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return value


class RealAirflow:
    """The Airflow processes of one test.

    :param root: an empty directory for the home, the DAGs and the logs.
    :param dag_files: copied into the DAG folder.
    :param env: more environment (connections, ``[metrics]``, ...) for every component.
    :param database: the metadata DB's SQLAlchemy URL (a PostgreSQL database, see
        :meth:`~.postgres_server.PostgresServer.create_database`); None: SQLite in the home.
    :param broker: a Celery broker URL (:attr:`~.redis_server.RedisServer.url`): the
        executor is then CeleryExecutor, its results kept in ``database``; None:
        LocalExecutor.
    :param worker_concurrency: task processes per Celery worker.
    """

    COMPONENTS = {
        "api-server": ["api-server", "-H", "127.0.0.1"],
        "scheduler": ["scheduler", "--skip-serve-logs"],
        "dag-processor": ["dag-processor"],
        "triggerer": ["triggerer", "--skip-serve-logs"],
        "worker": ["celery", "worker", "--skip-serve-logs"],
    }
    #: What :meth:`start_all` starts unless told: the LocalExecutor's Airflow.
    LOCAL_EXECUTOR = ("api-server", "scheduler", "dag-processor", "triggerer")

    def __init__(
        self,
        root: Path,
        dag_files: Iterable[Path],
        env: Mapping[str, str],
        database: str | None = None,
        broker: str | None = None,
        worker_concurrency: int = 2,
    ) -> None:
        if broker is not None and database is None:
            raise ValueError("CeleryExecutor keeps its results in the metadata DB: give database")
        self.root = root
        self.home = root / "home"
        self.dags = root / "dags"
        self.home.mkdir()
        self.dags.mkdir()
        self.database = database
        self.worker_concurrency = worker_concurrency
        site = root / "site"
        site.mkdir()
        (site / "nsq_test_component.py").write_text(_HOSTNAME_MODULE)
        for dag_file in dag_files:
            shutil.copy(dag_file, self.dags)
        self.api_port = free_port()
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.home),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p
            ),
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "nsq_test_component.hostname",
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
                [
                    {
                        "name": "dags-folder",
                        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                        "kwargs": {"path": str(self.dags)},
                    }
                ]
            ),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.api_port}/",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            # Another (or a restarted) triggerer takes over a dead one's triggers this soon.
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
            **({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database} if database else {}),
            **(self._celery_env(broker, database) if broker and database else {}),
            **env,
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[Any] = []
        self._token: str | None = None

    @staticmethod
    def _celery_env(broker: str, database: str) -> dict[str, str]:
        """CeleryExecutor's settings: the broker, and the results in the metadata DB
        through SQLAlchemy's ``db+`` scheme with the driver named (``db+postgresql://``
        means psycopg 3 there, which a worker without it dies of)."""
        return {
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": broker,
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{database}",
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def migrate(self) -> None:
        """``airflow db migrate``; skips the test when Airflow cannot start here."""
        done = subprocess.run(
            [AIRFLOW, "db", "migrate"], env=self.env, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            pytest.skip(
                f"Airflow cannot start here: `airflow db migrate` failed: {done.stderr[-800:]}"
            )

    @staticmethod
    def hostname(name: str) -> str:
        """The host name component ``name`` reports (``job.hostname``): ``scheduler#2``
        is ``scheduler-2`` (Airflow puts it in metric tags, where ``#`` is refused)."""
        return name.replace("#", "-")

    def start(self, name: str, shell: str | None = None) -> None:
        """Start a component: ``scheduler``, or ``scheduler#2`` for a second one (its log
        ``scheduler#2.log``, its host name :meth:`hostname`). ``shell``: bash lines run
        first in the same shell (a page's commands: what they export, the component
        gets)."""
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop_all
        self._logs.append(log)
        kind = name.split("#")[0]
        args = list(self.COMPONENTS[kind])
        if kind == "worker":
            # Celery's node name: two workers on one host need names of their own.
            args += ["--celery-hostname", f"{self.hostname(name)}@%h"]
            args += ["--concurrency", str(self.worker_concurrency)]
        command = [AIRFLOW, *args]
        if shell is not None:
            command = ["bash", "-euo", "pipefail", "-c", f'{shell}\nexec "$@"', "bash", *command]
        self.processes[name] = subprocess.Popen(
            command,
            env={**self.env, "NSQ_TEST_COMPONENT": self.hostname(name)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped (or killed) whole
        )

    def start_all(self, names: Iterable[str] = LOCAL_EXECUTOR) -> None:
        """The LocalExecutor's components (or those ``names``, as :meth:`start` takes
        them); skips the test when the API server does not come up."""
        for name in names:
            self.start(name)
        self.wait_for_api()

    def wait_for_api(self) -> None:
        """Wait until the API server answers; skips the test when it does not."""
        try:
            wait_for(self.api_healthy, 180, 1, message="the API server answers")
        except AssertionError as exc:
            pytest.skip(f"Airflow cannot start here: {exc}:\n{self.log_tail('api-server')}")

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise AssertionError(
                    f"airflow {name} exited with {proc.returncode}:\n{self.log_tail(name)}"
                )

    def api_healthy(self) -> bool:
        self.check_alive()
        try:
            self._request("GET", "/api/v2/monitor/health", None, {})
        except OSError:
            return False
        return True

    def _request(self, method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", **headers},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def login(self, username: str, password: str) -> None:
        """Sign in as a user of the simple auth manager (its token goes with every
        :meth:`api` request from now on), as the UI's login page does."""
        answer = self._request(
            "POST", "/auth/token", {"username": username, "password": password}, {}
        )
        self._token = answer["access_token"]

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """A JSON request to the API server, with the token the simple auth manager hands
        out when ``[core] simple_auth_manager_all_admins`` is on (Airflow 3.1 does not
        add it to requests itself, as 3.0 and 3.3 do)."""
        if self._token is None:
            try:
                self._token = self._request("GET", "/auth/token", None, {})["access_token"]
            except (urllib.error.HTTPError, KeyError, TypeError):
                self._token = ""  # not that auth manager: ask without
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        return self._request(method, path, body, headers)

    def kill(self, name: str) -> None:
        """SIGKILL the component and everything it started (its process group)."""
        proc = self.processes.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def kill_whole(self, name: str) -> list[Any]:
        """SIGKILL the component, its process group and every process it started in a
        group of its own (since Airflow 3.3 a worker's task runs in one: killing the
        worker's group leaves the task running), as the OOM killer ends a container;
        the processes it had started (see :func:`gone`). They are stopped (SIGSTOP)
        first, so that none forks meanwhile."""
        proc = self.processes.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGSTOP)
        _signal_all(_descendants(proc.pid), signal.SIGSTOP)
        tree = _descendants(proc.pid)  # all stopped: none forks, none is re-parented
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _signal_all(tree, signal.SIGKILL)
        proc.wait(timeout=30)
        return tree

    def stop(self, name: str) -> None:
        """Stop one component the way an operator would (SIGINT, then SIGKILL for what
        is left after 30 s)."""
        proc = self.processes.pop(name)
        self._stop([proc])

    def _stop(self, procs: list[subprocess.Popen[bytes]]) -> None:
        # What they started in groups of their own (a Celery worker's task processes)
        # does not get the group's signal: found now, killed after.
        started = [child for proc in procs for child in _descendants(proc.pid)]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 30
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers: workers, uvicorn children
            proc.wait(timeout=30)
        _signal_all(started, signal.SIGKILL)

    def stop_all(self) -> None:
        self._stop(list(self.processes.values()))
        self.processes.clear()
        for log in self._logs:
            log.close()

    # -- the metadata DB (read-only, short queries: the scheduler writes meanwhile) --------

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """Rows of a read-only query (``?`` placeholders), whatever the database, with
        values as SQLite gives them (timestamps and JSON as text); no rows while the
        database is locked or its tables do not exist yet (ask again later)."""
        if self.database is not None:
            return self._query_postgres(sql, args)
        db = self.home / "airflow.db"
        try:
            with contextlib.closing(
                sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
            ) as conn:
                return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError:
            return []  # locked, or tables not created yet: ask again later

    def _query_postgres(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        import psycopg2
        import psycopg2.errors
        from sqlalchemy.engine import make_url

        url = make_url(self.database or "")
        try:
            conn = psycopg2.connect(
                host=url.host,
                port=url.port,
                user=url.username,
                password=url.password,
                dbname=url.database,
                connect_timeout=10,
                options="-c default_transaction_read_only=on",
            )
        except psycopg2.OperationalError:
            return []
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql.replace("?", "%s"), args)
                return [tuple(map(_as_sqlite_gives, row)) for row in cursor.fetchall()]
        except psycopg2.errors.UndefinedTable:
            return []  # not migrated yet
        finally:
            conn.close()

    def import_errors(self) -> list[str]:
        return [row[0] for row in self.query("SELECT stacktrace FROM import_error")]

    def asset_events(self, asset: str) -> list[tuple[int, dict[str, Any], float]]:
        """``(id, payload, stored at)`` of each event of the asset named ``asset`` (the
        payload of the trigger event that made it)."""
        rows = self.query(
            "SELECT e.id, e.extra, e.timestamp FROM asset_event e "
            "JOIN asset a ON a.id = e.asset_id WHERE a.name = ?",
            asset,
        )
        return [
            (row[0], json.loads(row[1]).get("payload", {}), utc_timestamp(row[2])) for row in rows
        ]

    def dag_runs(self, dag_id: str) -> dict[int, dict[str, Any]]:
        """Every run of the DAG: state, start/end, and how long its queue entry waited
        (``queued_at - run_after``: the asset event that queued it until the scheduler
        made the run)."""
        rows = self.query(
            "SELECT id, state, start_date, end_date, queued_at, run_after FROM dag_run "
            "WHERE dag_id = ?",
            dag_id,
        )
        return {
            r[0]: {
                "state": r[1],
                "start": utc_timestamp(r[2]) if r[2] else None,
                "end": utc_timestamp(r[3]) if r[3] else None,
                "queue_wait": utc_timestamp(r[4]) - utc_timestamp(r[5]) if r[4] and r[5] else None,
            }
            for r in rows
        }

    def runs_of_events(self) -> dict[int, list[int]]:
        """The DAG runs that consumed each asset event (by event id)."""
        by_event: dict[int, list[int]] = {}
        for run_id, event_id in self.query("SELECT dag_run_id, event_id FROM dagrun_asset_event"):
            by_event.setdefault(event_id, []).append(run_id)
        return by_event
