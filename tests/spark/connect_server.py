"""A Spark Connect server for tests: PySpark's own server class (``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer``, the jar PySpark 4's wheel
ships), ``local[2]``, on 127.0.0.1 and a free port, in a process group of its own,
stopped by its PID.

``SparkSession.builder.remote("local[2]")`` would start one inside the test process
instead. There it cannot run beside the suite's classic session (one SparkContext per
process), and it marks the whole process as Spark Connect (``SPARK_CONNECT_MODE_ENABLED``),
which turns the functions of later classic sessions into Connect ones. A server of its
own also has a Python of its own for its workers (``PYSPARK_PYTHON``), as a deployed
one has, so a test chooses what is installed where.

Clients connect with ``pyspark.sql.connect.session.SparkSession.builder.remote(url)``,
which, unlike ``pyspark.sql.SparkSession.builder.remote``, leaves the process's mode alone.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from airflow_provider_nsq.testing.polling import wait_for
from tests.spark.pyspark_features import PYSPARK_VERSION

#: The first PySpark with Python data sources (so with the nsq source on Connect); the
#: wheel must also ship the Connect server's jar (4.2.0 and 4.3.0 do: checked below).
CONNECT_PYSPARK = (4, 0)
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT = 180.0


def _connect_missing() -> str | None:
    """Why no Spark Connect server and client can run here, or None."""
    if not PYSPARK_VERSION:
        return "Spark Connect needs PySpark >= 4.0 (not installed here)"
    if tuple(int(p) for p in PYSPARK_VERSION.split(".")[:2]) < CONNECT_PYSPARK:
        return (
            f"the Spark Connect tests need PySpark >= 4.0, for Python data sources and the "
            f"Connect server in its wheel (this is {PYSPARK_VERSION})"
        )
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "Spark needs Java (install a JDK 17 or set JAVA_HOME)"
    # The Connect client's own requirements (pyspark[connect]; pyspark-client has them).
    for requirement in importlib.metadata.requires("pyspark") or ():
        if 'extra == "connect"' in requirement:
            match = re.match(r"[A-Za-z0-9._-]+", requirement)
            assert match, requirement
            try:
                importlib.metadata.distribution(match.group())
            except importlib.metadata.PackageNotFoundError:
                return (
                    f"the Spark Connect client needs {match.group()} (pyspark[connect] or "
                    "pyspark-client), not installed here"
                )
    if not list((spark_home() / "jars").glob("spark-connect_*.jar")):
        return f"this PySpark ({PYSPARK_VERSION}) has no Spark Connect server jar"
    return None


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ConnectServer:
    """A running Connect server whose Python workers run ``python``."""

    def __init__(self, python: Path, log_file: Path) -> None:
        self.python = python
        self.log_file = log_file
        self.port = _free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYSPARK_", "SPARK_CONNECT", "SPARK_REMOTE", "PYTHONPATH"))
        }
        env.update({"PYSPARK_PYTHON": str(python), "SPARK_LOCAL_IP": "127.0.0.1"})
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--master",
            "local[2]",
            "--driver-memory",
            "1g",
            *("--conf", "spark.connect.grpc.binding.address=127.0.0.1"),
            *("--conf", f"spark.connect.grpc.binding.port={self.port}"),
            *("--conf", "spark.ui.enabled=false"),
            *("--conf", "spark.ui.showConsoleProgress=false"),
            *("--conf", "spark.sql.shuffle.partitions=2"),
            *("--conf", "spark.log.level=WARN"),
        ]
        with open(log_file, "wb") as log:
            self.process = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Not the checkout: Python workers run with -m, which puts the working
                # directory first on sys.path, and the checkout has airflow_provider_nsq.
                cwd=log_file.parent,
                start_new_session=True,
            )
        try:
            self._wait_until_listening()
        except BaseException:
            self.stop()
            raise

    def _wait_until_listening(self) -> None:
        def listening() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the Spark Connect server exited ({self.process.returncode}):\n"
                    + self.log_tail()
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
            except OSError:
                return False
            return True

        try:
            wait_for(listening, timeout=START_TIMEOUT, interval=0.2)
        except AssertionError as exc:
            raise RuntimeError(
                f"the Spark Connect server did not listen on {self.url}:\n" + self.log_tail()
            ) from exc

    def log_tail(self, size: int = 4000) -> str:
        return self.log_file.read_bytes()[-size:].decode(errors="replace")

    def session(self) -> Any:
        """A new client session on this server (stop it when done)."""
        from pyspark.sql.connect.session import SparkSession

        return SparkSession.builder.remote(self.url).create()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL), then anything left in its group."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        # Its Python workers, should one outlive the JVM: the group this server leads.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


#: Why the Spark Connect tests cannot run here, or None.
CONNECT_MISSING = _connect_missing()
