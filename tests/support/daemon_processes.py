"""The embedded daemons as subprocesses (``python -m``, as a test setup runs nsqd and
nsqlookupd), and a lookup over nsqlookupd's HTTP API."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow_provider_nsq.client.transport.http_request import http_request
from tests.support.listening import listening_ports


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
