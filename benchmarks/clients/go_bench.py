"""nsq's own Go benchmarks, ``bench_writer`` and ``bench_reader``, as a reference row.

Built from nsq's source (``go build ./bench/bench_writer ./bench/bench_reader`` in a
checkout of github.com/nsqio/nsq); ``throughput.py --go-bench DIR`` says where they are.
They run as nsq ships them: one connection per core (``GOMAXPROCS``), 200-byte messages,
MPUBs of 200 (the writer) and RDY 2500 (the reader), for a fixed time rather than a
count, so this row's counts are what they did in that time. The writer's figure is what
the issue's "Go's writer" means; ``GOMAXPROCS=1`` (one connection, as every Python row
uses) is in the row's ``note``.

CPU per message is the Go process's own (user + system, from the child's rusage).
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

from .base import BODY_SIZE, MAX_RDY, MPUB_BATCH, Context, NotApplicable, fill_channel

_OPS = re.compile(r"([\d.]+)ops/s")
# Seconds a run lasts: long enough to leave start-up behind, short enough for the table
# and for the embedded broker's memory queue (a million messages per topic).
_RUN_FOR_S = 1.0
# The reader's run (its start-up, SUB and first RDY, counts in it: long enough to be a
# small part), on a backlog it cannot drain in that time at any rate seen so far.
_READ_FOR_S = 0.5


def _binary(name: str) -> str:
    directory = os.environ.get("NSQ_GO_BENCH_DIR")
    if not directory:
        raise NotApplicable("no --go-bench DIR (nsq's bench_writer and bench_reader)")
    path = os.path.join(directory, name)
    if not os.access(path, os.X_OK):
        raise NotApplicable(f"{path} is not an executable")
    return path


def _timed(cmd: list[str], **env: str) -> tuple[float, float]:
    """Run ``cmd``: (the ops/s it printed, its CPU seconds, from the children's times)."""
    before = os.times()
    done = subprocess.run(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    after = os.times()
    found = _OPS.findall(done.stdout or "")
    if done.returncode or not found:
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed: {_panic(done.stdout)}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return float(found[-1]), cpu


def _result(ops: float, seconds: float, cpu: float, note: str) -> dict[str, Any]:
    count = int(ops * seconds)
    return {
        "count": count,
        "seconds": seconds,
        "value": ops,
        "unit": "msgs/s",
        "client_cpu_us": cpu / count * 1e6 if count else None,
        "client_cpu": cpu / seconds if seconds else None,
        "broker_cpu": None,
        "note": note,
    }


def pub(ctx: Context) -> dict[str, Any]:
    raise NotApplicable("bench_writer publishes MPUB batches only")


def connect(ctx: Context) -> dict[str, Any]:
    raise NotApplicable("the Go tools time no connect")


def mpub(ctx: Context) -> dict[str, Any]:
    writer = _binary("bench_writer")
    cmd = [writer, f"--nsqd-tcp-address={ctx.host}:{ctx.port}", f"--size={BODY_SIZE}"]
    cmd += [f"--batch-size={MPUB_BATCH}", f"--runfor={_RUN_FOR_S}s"]
    topic = ctx.topic("mpub")
    ops, cpu = _timed([*cmd, f"--topic={topic}"])
    one, _ = _timed([*cmd, f"--topic={topic}_1"], GOMAXPROCS="1")
    cores = os.cpu_count() or 1
    return _result(ops, _RUN_FOR_S, cpu, f"{cores} connections; 1 connection: {one:,.0f}/s")


def consume(ctx: Context) -> dict[str, Any]:
    reader = _binary("bench_reader")
    topic, channel = ctx.topic("consume"), "ch"
    # More than it drains in its run at 1.8M msgs/s, and within the embedded broker's
    # memory queue (a million messages per topic).
    fill_channel(ctx, topic, channel, max(ctx.counts["consume"], 900_000))
    cmd = [reader, f"--nsqd-tcp-address={ctx.host}:{ctx.port}", f"--topic={topic}"]
    cmd += [f"--channel={channel}", f"--size={BODY_SIZE}", f"--rdy={MAX_RDY}"]
    cmd += [f"--runfor={_READ_FOR_S}s"]
    ops, cpu = _timed(cmd)
    return _result(ops, _READ_FOR_S, cpu, f"{os.cpu_count() or 1} connections, RDY {MAX_RDY}")


def _panic(output: str) -> str:
    """The line that says why a Go tool stopped (a panic's message, not its stack)."""
    lines = [line for line in (output or "").splitlines() if line.strip()]
    for line in lines:
        if line.startswith("panic:"):
            return line[:300]
    return (lines[-1] if lines else "no output")[:300]
