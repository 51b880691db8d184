"""What one operation costs the client, in counts that do not depend on the machine's load:
user-space instructions (``valgrind --tool=callgrind``), system calls (``strace -c``) and
Python calls (``sys.setprofile``), per PUB, per MPUB'd message, per connect ...

    python benchmarks/op_cost.py [--ops pub,mpub,...] [--measure instructions,syscalls,calls]
                                 [--n N] [--source DIR] [--json PATH] [--check]

Each figure is a difference: the operation run ``3N`` times minus ``N`` times, each run in
a process of its own after the same set-up and warm-up, divided by ``2N``. What the
process does once (start Python, import, connect) cancels out; what is left is exact and
repeatable (instructions vary by well under 1% between runs of the same code; an asyncio
operation a little more: the event loop's iterations depend on timing).

The operations (200-byte bodies, against one nsqd: the embedded broker, started fresh per
operation, or a real nsqd when ``NSQD_ADDRESS`` is set):

- ``pub``, ``mpub`` (per message of a 200-message MPUB), ``connect`` (open + IDENTIFY +
  close), ``consume`` (per message, read + FIN, at RDY 2500): the blocking
  ``NSQConnection``;
- ``async-pub``, ``async-connect``: ``AsyncNSQConnection``;
- ``hook-pub``, ``hook-connect`` (a new hook, its Connection read, open + IDENTIFY):
  ``NSQHook``, as a task uses it;
- ``operator-consume`` (per message: read, the record handed to a function that does
  nothing, FIN, metrics): ``NSQConsumeOperator`` with ``apply_function``, as a DAG task
  drains a channel;
- ``plain-pub``, ``plain-mpub``, ``plain-connect``: the plain-socket floor of
  ``benchmarks/clients/plain_socket.py``.

``--source DIR`` measures the project code in ``DIR`` (another checkout, e.g. the tree
before a change) with this script's workloads. ``--check`` compares each figure with
its budget in ``BUDGETS`` below and exits 1 if one is over (``make bench-check``): the
budgets sit about 30% above the figures measured when they were set, so noise never
trips them and a change that doubles an operation's cost always does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # the ``clients`` package, also for worker processes

from throughput import Server  # noqa: E402

BODY = bytes(i % 251 for i in range(200))
MPUB_BATCH = 200
WARMUP = 50
HOOK_CONN_ENV = "AIRFLOW_CONN_NSQ_OPCOST"

#: Operations, each with the default N and the unit its figure is per.
OPS: dict[str, tuple[int, str]] = {
    "pub": (2000, "PUB"),
    "mpub": (100, "message"),
    "connect": (200, "connection"),
    "consume": (20_000, "message"),
    "async-pub": (2000, "PUB"),
    "async-connect": (200, "connection"),
    "hook-pub": (2000, "PUB"),
    "hook-connect": (200, "connection"),
    "operator-consume": (3_000, "message"),
    "plain-pub": (2000, "PUB"),
    "plain-mpub": (100, "message"),
    "plain-connect": (200, "connection"),
}
DEFAULT_OPS = ("pub", "mpub", "connect", "consume", "async-pub", "plain-pub", "plain-connect")
MEASURES = ("instructions", "syscalls", "calls", "user-us", "system-us")

#: Upper bounds checked by ``--check``: user-space instructions, system calls and Python
#: calls per operation. About 30% above the client's figures when they were set (in the
#: comments; docs/benchmarks.md, "What one operation costs"), so run-to-run variation
#: never trips them and a change that doubles an operation's cost always does. In
#: brackets, the figures before issue 28's changes, which the budgets refuse.
BUDGETS: dict[str, dict[str, float]] = {
    # 21.4k instructions, 3 system calls, 32 calls [61.4k, 7, 63]
    "pub": {"instructions": 28_000, "syscalls": 3.5, "calls": 42},
    # per message of an MPUB of 200: 1,215 instructions, 0.3 calls [3,205, 4.4]
    "mpub": {"instructions": 1_600, "syscalls": 0.05, "calls": 0.4},
    # connect + IDENTIFY + close: 140k instructions, 11 system calls, 128 calls
    # [564k, 13, 156]
    "connect": {"instructions": 182_000, "syscalls": 12, "calls": 166},
    # per message, read + FIN at RDY 2500: 8.8-8.9k instructions, 3.1 calls [8.6k, 3.2]
    "consume": {"instructions": 11_500, "syscalls": 0.5, "calls": 4},
    # 65.7k instructions, 4 system calls, 82 calls [121.5k, 6, 132]
    "async-pub": {"instructions": 85_000, "syscalls": 4.5, "calls": 107},
    # per message through NSQConsumeOperator (apply_function), every thread: 25.1k
    # instructions, 15 calls [435.8k, 292: a hand-off, a FIN write and three metric
    # calls per message]
    "operator-consume": {"instructions": 33_000, "calls": 20},
}


# -- the operations (run in the worker process) ------------------------------------------


def _config(host: str, port: int) -> Any:
    from airflow_provider_nsq.client import ClientConfig

    return ClientConfig(host=host, port=port)


def _loop(n: int, call: Callable[[], object]) -> None:
    for _ in range(WARMUP):
        call()
    _mark()
    for _ in range(n):
        call()
    _mark()


def _mark() -> None:
    """Where the counted loop starts and ends (``--measure calls`` counts between)."""
    hook = _MARKS.get("hook")
    if hook is not None:
        hook()


_MARKS: dict[str, Callable[[], None] | None] = {}


def op_pub(host: str, port: int, n: int) -> None:
    from airflow_provider_nsq.client import NSQConnection

    with NSQConnection(_config(host, port)) as conn:
        _loop(n, lambda: conn.publish("op_cost", BODY))


def op_mpub(host: str, port: int, n: int) -> None:
    from airflow_provider_nsq.client import NSQConnection

    batch = [BODY] * MPUB_BATCH
    with NSQConnection(_config(host, port)) as conn:
        _loop(n, lambda: conn.multi_publish("op_cost", batch))


def op_connect(host: str, port: int, n: int) -> None:
    from airflow_provider_nsq.client import NSQConnection

    config = _config(host, port)
    _loop(n, lambda: NSQConnection(config).connect().close())


def op_consume(host: str, port: int, n: int) -> None:
    from airflow_provider_nsq.client import NSQConnection

    done = 0
    total = WARMUP * 50 + n

    def step() -> None:
        nonlocal done
        messages = conn.read_messages(10.0)
        if not messages:
            raise TimeoutError(f"no message after {done}")
        conn.finish(*messages)
        done += len(messages)

    with NSQConnection(_config(host, port)) as conn:
        conn.subscribe("op_cost", "c")
        conn.ready(2500)
        while done < WARMUP * 50:
            step()
        _mark()
        while done < total:
            step()
        _mark()


def op_async_pub(host: str, port: int, n: int) -> None:
    import asyncio

    from airflow_provider_nsq.client import AsyncNSQConnection

    async def run() -> None:
        async with AsyncNSQConnection(_config(host, port)) as conn:
            for _ in range(WARMUP):
                await conn.publish("op_cost", BODY)
            _mark()
            for _ in range(n):
                await conn.publish("op_cost", BODY)
            _mark()

    asyncio.run(run())


def op_async_connect(host: str, port: int, n: int) -> None:
    import asyncio

    from airflow_provider_nsq.client import AsyncNSQConnection

    config = _config(host, port)

    async def run() -> None:
        for _ in range(WARMUP):
            await (await AsyncNSQConnection(config).connect()).close()
        _mark()
        for _ in range(n):
            await (await AsyncNSQConnection(config).connect()).close()
        _mark()

    asyncio.run(run())


def op_hook_pub(host: str, port: int, n: int) -> None:
    from airflow_provider_nsq.hooks.nsq import NSQHook

    with NSQHook(nsq_conn_id="nsq_opcost") as hook:
        _loop(n, lambda: hook.publish("op_cost", BODY))


def op_hook_connect(host: str, port: int, n: int) -> None:
    from airflow_provider_nsq.hooks.nsq import NSQHook

    def once() -> None:
        hook = NSQHook(nsq_conn_id="nsq_opcost")
        hook.get_conn()
        hook.close()

    _loop(n, once)


def op_operator_consume(host: str, port: int, n: int) -> None:
    """The consume operator draining ``n`` messages (after a warm-up), one call of a
    function that does nothing per message. The marks are set from the function, on
    the function's thread; the calls are counted on every thread."""
    from airflow_provider_nsq.operators.nsq_consume import NSQConsumeOperator

    warm = WARMUP * 50
    seen = [0]

    def apply(record: dict[str, Any]) -> None:
        seen[0] += 1
        if seen[0] in (warm, warm + n):
            _mark()

    NSQConsumeOperator(
        task_id="op_cost",
        topic="op_cost",
        channel="c",
        nsq_conn_id="nsq_opcost",
        apply_function=apply,
        max_messages=warm + n,
        idle_timeout=5,
    ).execute({})


def op_plain_pub(host: str, port: int, n: int) -> None:
    from clients.plain_socket import PlainConnection

    conn = PlainConnection(host, port)
    _loop(n, lambda: conn.pub(b"op_cost", BODY))
    conn.close()


def op_plain_mpub(host: str, port: int, n: int) -> None:
    from clients.plain_socket import PlainConnection

    batch = [BODY] * MPUB_BATCH
    conn = PlainConnection(host, port)
    _loop(n, lambda: conn.mpub(b"op_cost", batch))
    conn.close()


def op_plain_connect(host: str, port: int, n: int) -> None:
    from clients.plain_socket import PlainConnection

    _loop(n, lambda: PlainConnection(host, port).close())


def run_worker(op: str, host: str, port: int, n: int, count_calls: bool) -> None:
    function = globals()["op_" + op.replace("-", "_")]
    if op.startswith(("hook", "operator")):
        import airflow  # noqa: F401  (imported before the count, as a task has it)
    if not count_calls:
        times: list[os.times_result] = []
        _MARKS["hook"] = lambda: times.append(os.times())
        function(host, port, n)
        user = times[1].user - times[0].user
        system = times[1].system - times[0].system
        print(f"CPU {user} {system}")
        return
    if count_calls:
        calls = [0]
        marks: list[int] = []
        counting = [False]

        def profile(frame: Any, event: str, arg: Any) -> None:
            if counting[0] and (event == "call" or event == "c_call"):
                calls[0] += 1

        def mark() -> None:
            counting[0] = not marks
            marks.append(calls[0])

        # Installed before the operation starts, on this thread and every thread it
        # starts (the consume operator's function thread); counted between the marks.
        threading.setprofile(profile)
        sys.setprofile(profile)
        _MARKS["hook"] = mark
        function(host, port, n)
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        print(f"CALLS {marks[-1] - marks[0]}")
        return
    function(host, port, n)


# -- the parent: servers, the tools, the differences -------------------------------------


@contextlib.contextmanager
def nsqd() -> Iterator[tuple[str, int, str | None]]:
    """(host, TCP port, HTTP address) of a fresh embedded broker (always run from this
    checkout, whatever ``--source`` says), or of ``NSQD_ADDRESS``."""
    server = Server()
    with server.running():
        yield server.host, server.port, server.http_address


def fill(host: str, port: int, count: int, env: dict[str, str]) -> None:
    """Queue ``count`` messages on op_cost/c for ``consume``, from a process of its own."""
    code = (
        "import sys\n"
        "from airflow_provider_nsq.client import ClientConfig, NSQConnection\n"
        "host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
        "config = ClientConfig(host=host, port=port)\n"
        "with NSQConnection(config) as sub, NSQConnection(config) as pub:\n"
        "    sub.subscribe('op_cost', 'c')\n"
        f"    batch = [bytes(200)] * {MPUB_BATCH}\n"
        f"    for _ in range(-(-count // {MPUB_BATCH})):\n"
        "        pub.multi_publish('op_cost', batch)\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, host, str(port), str(count)], env=env, check=True, timeout=300
    )


def delete_topic(http: str | None) -> None:
    if http is None or not os.environ.get("NSQD_ADDRESS"):
        return
    from urllib.request import Request, urlopen

    with contextlib.suppress(OSError):
        urlopen(Request(f"http://{http}/topic/delete?topic=op_cost", method="POST"), timeout=5)


def worker_env(source: str | None, airflow_home: str, host: str, port: int) -> dict[str, str]:
    env = dict(os.environ)
    paths = [p for p in (source, env.get("PYTHONPATH"), str(ROOT)) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(
        {
            "AIRFLOW_HOME": airflow_home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            HOOK_CONN_ENV: f"nsq://{host}:{port}",
        }
    )
    return env


def run_once(op: str, measure: str, n: int, host: str, port: int, env: dict[str, str]) -> float:
    """One worker run of ``n`` operations; the measure's total over the whole process
    (calls: over the counted loop only)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", op]
    cmd += ["--host", host, "--port", str(port), "--n", str(n)]
    with tempfile.TemporaryDirectory() as tmp:
        if measure == "instructions":
            cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd]
        elif measure == "syscalls":
            out = os.path.join(tmp, "strace.txt")
            cmd = ["strace", "-f", "-c", "-o", out, *cmd]
        elif measure == "calls":
            cmd += ["--count-calls"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode:
            raise RuntimeError(f"{op}: worker failed: {done.stderr.strip()[-1500:]}")
        if measure == "instructions":
            found = re.search(r"Collected : (\d+)", done.stderr)
            if not found:
                raise RuntimeError(f"{op}: no callgrind total in {done.stderr[-500:]}")
            return float(found.group(1))
        if measure == "syscalls":
            return float(_strace_total(Path(out).read_text()))
        if measure in ("user-us", "system-us"):
            found = re.search(r"CPU (\S+) (\S+)", done.stdout)
            if not found:
                raise RuntimeError(f"{op}: no CPU times in {done.stdout[-500:]}")
            return float(found.group(1 if measure == "user-us" else 2)) * 1e6
        found = re.search(r"CALLS (\d+)", done.stdout)
        if not found:
            raise RuntimeError(f"{op}: no call count in {done.stdout[-500:]}")
        return float(found.group(1))


def _strace_total(text: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[-1] == "total":
            return int(parts[3])  # % time, seconds, usecs/call, calls, [errors,] total
    raise RuntimeError(f"no total in strace's summary: {text[-500:]}")


def per_op(op: str, measure: str, n: int, source: str | None, airflow_home: str) -> float:
    """The measure per operation: (run of 3n - run of n) / 2n (calls: total / n)."""
    per_message = MPUB_BATCH if op.endswith("mpub") else 1
    with nsqd() as (host, port, http):
        env = worker_env(source, airflow_home, host, port)
        try:
            if measure not in ("instructions", "syscalls"):  # counted over the loop only
                if op.endswith("consume"):
                    fill(host, port, WARMUP * 50 + n + 5000, env)
                return run_once(op, measure, n, host, port, env) / (n * per_message)
            totals = []
            for k in (n, 3 * n):
                if op.endswith("consume"):
                    fill(host, port, WARMUP * 50 + k + 5000, env)
                totals.append(run_once(op, measure, k, host, port, env))
                if op.endswith("consume"):
                    delete_topic(http)
            return (totals[1] - totals[0]) / (2 * n * per_message)
        finally:
            delete_topic(http)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--ops", default=",".join(DEFAULT_OPS), help=", ".join(OPS))
    parser.add_argument("--measure", default="instructions,syscalls", help=", ".join(MEASURES))
    parser.add_argument("--n", type=int, help="operations in the shorter run (default per op)")
    parser.add_argument("--source", help="measure the project code in this checkout")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 if a figure is over budget")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--host", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count-calls", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(args.worker, args.host, args.port, args.n, args.count_calls)
        return 0

    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    measures = [m.strip() for m in args.measure.split(",") if m.strip()]
    if bad := [o for o in ops if o not in OPS] + [m for m in measures if m not in MEASURES]:
        raise SystemExit(f"unknown: {bad}")
    tools = {"instructions": "valgrind", "syscalls": "strace"}
    for measure in list(measures):
        tool = tools.get(measure)
        if tool and shutil.which(tool) is None:
            print(f"skipping {measure}: {tool} is not installed", file=sys.stderr)
            measures.remove(measure)
    source = str(Path(args.source).resolve()) if args.source else None
    print(f"code: {source or ROOT}; server: {os.environ.get('NSQD_ADDRESS') or 'embedded broker'}")
    figures: dict[str, dict[str, float]] = {}
    over: list[str] = []
    airflow_home = tempfile.mkdtemp(prefix="nsq-opcost-airflow-")
    try:
        for op in ops:
            n = args.n or OPS[op][0]
            figures[op] = {}
            for measure in measures:
                value = per_op(op, measure, n, source, airflow_home)
                figures[op][measure] = value
                budget = BUDGETS.get(op, {}).get(measure)
                verdict = ""
                if budget is not None:
                    verdict = f"  budget {budget:,.1f}" + ("  OVER" if value > budget else "")
                    if value > budget:
                        over.append(f"{op} {measure} {value:,.1f} > {budget:,.1f}")
                print(f"{op:14} {measure:12} {value:12,.1f} per {OPS[op][1]}{verdict}", flush=True)
    finally:
        shutil.rmtree(airflow_home, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    if args.check and over:
        print("over budget:\n  " + "\n  ".join(over), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
