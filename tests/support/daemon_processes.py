"""Helpers for the lookupd tests: daemons as subprocesses, bounded waits."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from airflow_provider_nsq.client.transport.http_request import http_request
from tests.support.listening import listening_ports


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, "condition not met within the bound"
        time.sleep(0.01)
    return result


def lookup(http_port: int, topic: str) -> tuple[int, Any]:
    response = http_request("127.0.0.1", http_port, f"/lookup?topic={topic}", timeout=10)
    return response.status, response.json()


@contextmanager
def daemon(module: str, *flags: str) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """``python -m module flags...``; yields the process and its TCP and HTTP ports."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *flags], stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        ports = listening_ports(proc.stderr)
        yield proc, ports["TCP"], ports["HTTP"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
