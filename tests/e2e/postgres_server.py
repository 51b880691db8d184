"""A PostgreSQL server of the tests' own, for a real Airflow's metadata database.

A fresh cluster (``initdb``) in a temporary folder, listening on 127.0.0.1 only, on a
free port, with password authentication; each :class:`~.real_airflow.RealAirflow` gets
a database of its own on it (:meth:`PostgresServer.create_database`). The server is the
test's child process and stops with :meth:`PostgresServer.stop` (fast shutdown), which
also removes the folder.

PostgreSQL refuses to run as root: as root, ``initdb`` and the server run as the
unprivileged ``postgres`` user that the distribution's package creates, and the folder
is that user's. Durability is off (``fsync``, ``synchronous_commit``): the cluster lives
for one test session.

:func:`missing` says why a server cannot be had here (no PostgreSQL, no drivers, no
unprivileged user), for a skip that names it.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from airflow_provider_nsq.testing.polling import wait_for

#: The unprivileged user the server runs as when the tests run as root.
SERVER_USER = "postgres"
#: Where Debian and Ubuntu install the server's programs (not on PATH there).
DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
#: The metadata DB's drivers: Airflow 3 needs both on PostgreSQL (sync and async).
DRIVERS = ("psycopg2", "asyncpg")
ADMIN = "airflow"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: The schedulers, triggerers, API server and DAG processor each keep a pool of
#: connections (5 + 10 overflow by default): two of each fit well within this.
MAX_CONNECTIONS = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_bin_dir() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: on PATH, else the newest Debian one."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres", path=str(Path(found).parent)):
        return Path(found).parent
    candidates = sorted(
        glob.glob(DEBIAN_BIN_GLOB),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
    )
    for folder in reversed(candidates):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "postgres").is_file():
            return Path(folder)
    return None


def missing() -> str | None:
    """Why a PostgreSQL server cannot be started here, or None when it can."""
    if server_bin_dir() is None:
        return (
            "PostgreSQL is not installed: no initdb/postgres on PATH or in "
            f"{DEBIAN_BIN_GLOB} (Debian/Ubuntu: apt-get install postgresql)"
        )
    absent = [name for name in DRIVERS if importlib.util.find_spec(name) is None]
    if absent:
        return (
            f"Airflow on PostgreSQL needs {' and '.join(absent)} "
            "(pip install psycopg2-binary asyncpg; `make install` has them)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return (
                f"PostgreSQL refuses to run as root and there is no {SERVER_USER!r} user to "
                "run it as (the distribution's postgresql package creates it)"
            )
    return None


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder (see the module docstring)."""

    def __init__(self) -> None:
        self.bin = server_bin_dir()
        if self.bin is None:
            raise RuntimeError(missing())
        self.port = _free_port()
        self.password = secrets.token_hex(16)
        # As root: the server's user runs it and owns its folder (initdb refuses root).
        self._user = pwd.getpwnam(SERVER_USER) if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="nsq-postgres-", dir=self._reachable_tmp()))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._own(self.root)
        self.process: subprocess.Popen[bytes] | None = None

    def _reachable_tmp(self) -> str:
        """The temporary folder, if the server's user can get through to it; else /tmp.
        (A nox session's is inside the checkout, which may sit in a folder only root may
        enter, as ``mktemp -d`` makes them.)"""
        base = Path(tempfile.gettempdir()).resolve()
        if self._user is None or all(p.stat().st_mode & 0o001 for p in (base, *base.parents)):
            return str(base)
        return "/tmp"

    def _own(self, path: Path) -> None:
        if self._user is not None:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def _as_user(self) -> dict[str, Any]:
        """Popen's arguments that run a program as the server's user (when root)."""
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            env=self._env(),
            cwd=self.root,
            **self._as_user(),
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")

    def _env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "LANG": "C"}

    def start(self) -> None:
        """``initdb``, then the server; returns once it accepts connections."""
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        self._own(pwfile)
        try:
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                ADMIN,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            )
        finally:
            pwfile.unlink()
        log = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self._log = log
        self.process = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.root}",
                "-c",
                f"max_connections={MAX_CONNECTIONS}",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            cwd=self.root,
            start_new_session=True,  # a Ctrl-C reaches pytest, which stops it after Airflow
            **self._as_user(),
        )
        wait_for(self._up, START_TIMEOUT_S, 0.2, message="postgres accepts connections")

    def _up(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"postgres exited with {self.process.returncode}:\n{self.log_tail()}"
            )
        return self._accepts()

    def log_tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def connect(self, database: str = "postgres"):
        import psycopg2

        return psycopg2.connect(
            host="127.0.0.1",
            port=self.port,
            user=ADMIN,
            password=self.password,
            dbname=database,
            connect_timeout=5,
        )

    def _accepts(self) -> bool:
        import psycopg2

        try:
            self.connect().close()
        except psycopg2.OperationalError:
            return False
        return True

    def create_database(self, name: str) -> str:
        """A new, empty database; its SQLAlchemy URL (psycopg2; Airflow derives asyncpg's)."""
        conn = self.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://{ADMIN}:{self.password}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        """Fast shutdown (clients disconnected, no wait for them); the folder removed."""
        proc, self.process = self.process, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
