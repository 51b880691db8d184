"""How far one message travels through the provider's own code: the files it enters and
the calls from one provider file into another, on the two paths a reader follows.

    python benchmarks/path_length.py [--check] [--show]

- ``pub``: one warm PUB: an ``NSQPublishOperator(task_id="pub", topic=t,
  message=b"hello")`` whose ``execute({})`` runs twice in one process (the connection
  from ``AIRFLOW_CONN_NSQ_DEFAULT``), the second one traced, up to nsqd's OK (each
  ``execute`` opens a connection and closes it: the operator's hook keeps only the
  connection's settings); ``pub-new`` (no budget) traces a second, new operator, which
  reads the connection again;
- ``event``: one message from nsqd to ``NSQEventTrigger``'s ``TriggerEvent``
  (``batch_size=1``, ``batch_timeout=0.05``, ``min_event_interval=0``), its ``run()``
  iterated directly: after the first event, traced from an HTTP ``/pub`` of one message
  to the next event.

``sys.setprofile`` and ``threading.setprofile`` see every "call" event (a resumed
coroutine or generator is one too). A file counts when the called code lives in
``airflow_provider_nsq/`` outside ``testing/``; a crossing is a call whose caller's frame
is in another such file. Against the embedded nsqd, or a real one when
``NSQD_ADDRESS`` (and ``NSQD_HTTP_ADDRESS``) are set. Counts, not times: the same on a
busy machine. ``--check`` exits 1 when a path is over its budget in ``BUDGETS``;
``--show`` lists the files and the crossings.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = str(ROOT / "airflow_provider_nsq") + os.sep
TESTING = PACKAGE + "testing" + os.sep

#: path -> (most files entered, most calls from one provider file into another).
BUDGETS: dict[str, tuple[int, int]] = {
    "pub": (12, 35),
    "event": (15, 60),
}


def _provider_file(filename: str) -> str | None:
    """``filename`` relative to the package when it is provider code (not testing/)."""
    if filename.startswith(PACKAGE) and not filename.startswith(TESTING):
        return filename[len(PACKAGE) :]
    return None


class PathTrace:
    """Counts the provider files called and the calls between them while active."""

    def __init__(self) -> None:
        self.files: Counter[str] = Counter()
        self.crossings: Counter[tuple[str, str]] = Counter()

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _provider_file(frame.f_code.co_filename)
        if callee is None:
            return
        self.files[callee] += 1
        back = frame.f_back
        caller = _provider_file(back.f_code.co_filename) if back is not None else None
        if caller is not None and caller != callee:
            self.crossings[(caller, callee)] += 1

    @contextmanager
    def active(self) -> Iterator[PathTrace]:
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        try:
            yield self
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    def summary(self) -> tuple[int, int]:
        return len(self.files), sum(self.crossings.values())


@contextmanager
def _nsqd() -> Iterator[tuple[str, str]]:
    """(tcp, http) addresses of a real nsqd (``NSQD_ADDRESS``) or an embedded one."""
    tcp = os.environ.get("NSQD_ADDRESS")
    if tcp:
        host, port = tcp.rsplit(":", 1)
        yield tcp, os.environ.get("NSQD_HTTP_ADDRESS", f"{host}:{int(port) + 1}")
        return
    from airflow_provider_nsq.testing.broker import EmbeddedNSQD

    with EmbeddedNSQD() as nsqd:
        yield nsqd.tcp_address, nsqd.http_address


def _http_pub(http: str, topic: str, body: bytes) -> None:
    request = urllib.request.Request(f"http://{http}/pub?topic={topic}", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def trace_pub(*, new_operator: bool) -> PathTrace:
    from airflow_provider_nsq.operators.nsq import NSQPublishOperator

    topic = f"path_pub_{uuid.uuid4().hex[:8]}"
    operator = NSQPublishOperator(task_id="pub", topic=topic, message=b"hello")
    operator.execute({})
    if new_operator:
        operator = NSQPublishOperator(task_id="pub", topic=topic, message=b"hello")
    trace = PathTrace()
    with trace.active():
        operator.execute({})
    return trace


def trace_event(http: str) -> PathTrace:
    from airflow_provider_nsq.triggers.nsq_event import NSQEventTrigger

    topic = f"path_event_{uuid.uuid4().hex[:8]}"
    trace = PathTrace()

    async def main() -> None:
        trigger = NSQEventTrigger(
            topic=topic,
            channel="c",
            batch_size=1,
            batch_timeout=0.05,
            min_event_interval=0,
        )
        events = trigger.run()
        try:
            await asyncio.to_thread(_http_pub, http, topic, b"first")
            await asyncio.wait_for(anext(events), 30)
            published = asyncio.ensure_future(asyncio.to_thread(_http_pub, http, topic, b"m"))
            with trace.active():
                await asyncio.wait_for(anext(events), 30)
            await published
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    asyncio.run(main())
    return trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when over a budget")
    parser.add_argument("--show", action="store_true", help="list the files and crossings")
    args = parser.parse_args(argv)
    home = tempfile.mkdtemp(prefix="nsq-path-airflow-")
    os.environ.setdefault("AIRFLOW_HOME", home)
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    over = False
    with _nsqd() as (tcp, http):
        host, port = tcp.rsplit(":", 1)
        http_port = http.rsplit(":", 1)[1]
        os.environ["AIRFLOW_CONN_NSQ_DEFAULT"] = f"nsq://{host}:{port}?http_port={http_port}"
        traces = {
            "pub": trace_pub(new_operator=False),
            "pub-new": trace_pub(new_operator=True),
            "event": trace_event(http),
        }
    print(f"{'path':<8}{'files':>8}{'crossings':>12}{'budget':>14}")
    for name, trace in traces.items():
        files, crossings = trace.summary()
        budget, flag = "-", ""
        if name in BUDGETS:
            max_files, max_crossings = BUDGETS[name]
            budget = f"{max_files}/{max_crossings}"
            if files > max_files or crossings > max_crossings:
                over = True
                flag = "  OVER"
        print(f"{name:<8}{files:>8}{crossings:>12}{budget:>14}{flag}")
        if args.show:
            for file, calls in sorted(trace.files.items()):
                print(f"    {file}: {calls} call(s)")
            for (caller, callee), calls in trace.crossings.most_common():
                print(f"    {caller} -> {callee}: {calls}")
    return 1 if args.check and over else 0


if __name__ == "__main__":
    raise SystemExit(main())
