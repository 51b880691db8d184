"""A Redis server of the tests' own, the broker of a real Airflow's CeleryExecutor.

``redis-server`` on 127.0.0.1 only, on a free port, with no persistence (``--save ""
--appendonly no``) and its working folder in a temporary directory: nothing outlives the
test session. The server is the test's child process and stops with
:meth:`RedisServer.stop` (SIGTERM to its PID, SIGKILL after 10 s), which also removes
the folder.

:func:`missing` says why a broker (or a Celery worker) cannot be had here: no
``redis-server``, or Celery, its Redis client or Airflow's Celery provider not
installed; for a skip that names it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from airflow_provider_nsq.testing.polling import wait_for

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
#: What a Celery worker of Airflow needs besides the broker: (module, how to get it).
PYTHON_MODULES = (
    ("celery", "celery[redis]<5.7"),
    ("redis", "celery[redis]<5.7"),
    ("airflow.providers.celery", "apache-airflow-providers-celery"),
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing() -> str | None:
    """Why a Redis broker for Celery cannot be had here, or None when it can."""
    if shutil.which("redis-server") is None:
        return (
            "redis-server is not installed (Debian/Ubuntu: apt-get install redis-server; "
            ".ci/run installs it where it can)"
        )
    for module, requirement in PYTHON_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # its parent package is missing
            found = False
        if not found:
            return f"{module} is not installed (pip install '{requirement}'; the test extra has it)"
    return None


class RedisServer:
    """One ``redis-server`` in a temporary folder (see the module docstring)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="nsq-redis-"))
        self.log = self.root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The broker URL Celery takes (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server; returns once it answers PING."""
        log = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self._log = log
        self.process = subprocess.Popen(
            [
                str(shutil.which("redis-server")),
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
                "--daemonize",
                "no",
                "--protected-mode",
                "yes",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            start_new_session=True,  # a Ctrl-C reaches pytest, which stops it after Airflow
        )
        wait_for(self._up, START_TIMEOUT_S, 0.1, message="redis-server answers PING")

    def _up(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"redis-server exited with {self.process.returncode}:\n{self.log_tail()}"
            )
        return self.answers()

    def answers(self) -> bool:
        """The server answers PING (RESP, over a plain socket)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def log_tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its folder."""
        proc, self.process = self.process, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
