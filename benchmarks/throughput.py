"""Throughput of this project's NSQ clients next to pynsq, gnsq and two baselines.

    python benchmarks/throughput.py [--count N] [--json PATH] [--quick]
                                    [--clients all|project|third-party|reference|NAME,...]
                                    [--workloads pub,mpub,consume,connect] [--repeat N]
                                    [--keep-awake] [--server embedded|null]
                                    [--python PATH] [--profile DIR] [--no-freeze]
                                    [--source DIR] [--go-bench DIR]

Runs against one nsqd: by default the project's embedded broker, started as its own
process (``python -m airflow_provider_nsq.testing.broker``) on free ports, fresh for each
client so every client meets the same empty broker; or a real nsqd when
``NSQD_ADDRESS`` (``host:port``) is set (``NSQD_HTTP_ADDRESS`` is then used to delete
the benchmark's topics afterwards, and ``NSQD_PID``, if nsqd runs on this machine, to read
its CPU time).

Workloads, with 200-byte messages, the same counts for every client and a warm-up first:

- ``pub``: sequential PUB, each waiting for nsqd's OK;
- ``mpub``: sequential MPUBs of 200 messages, each waiting for OK;
- ``consume``: a channel pre-filled (untimed, by this project's client) is drained at
  RDY 2500 with a FIN for every message; timed from the first message after the
  warm-up to the last;
- ``connect``: TCP connect + magic + IDENTIFY (feature negotiation) until the response
  is read; median and p90 in microseconds.

Each client runs in its own process (its own event loop; one core for the broker, one
for the client). pynsq and gnsq run from a separate venv (``benchmarks/.venv-bench``,
created on first use, or ``--python``), so they never touch the project's environment;
a client that cannot be installed or run is reported as such in its row.

``--keep-awake`` keeps every core busy with a lowest-priority spinner: on a VM an idle
core halts and waking it can cost more than a PUB round trip, which hides the clients'
differences in the round-trip workloads (PUB, connect).

Each worker freezes what it imported out of the garbage collector's view before it runs
(``gc.freeze()``, as Airflow's LocalExecutor does before it forks task workers);
``--no-freeze`` leaves it in view, and then a run that holds messages across collections
(the hook's windows) also pays for collecting Airflow's imported heap.

``--repeat N`` runs N rounds of every client in turn and shows each figure's median
round: on a shared machine one round can be hit by someone else's load.

``--source DIR`` runs this project's clients from the code in ``DIR``, another checkout
(the "before" of a before/after table, with this checkout's workloads; the embedded
broker always runs from this checkout). ``PYTHONPATH`` set by the caller is honoured the
same way. ``--go-bench DIR`` adds nsq's own Go ``bench_writer`` and ``bench_reader``
(built from nsq's source, in ``DIR``) as the ``go`` row.

Prints msgs/s (connect: us) per client with the ratio to this project's blocking client
(``--reference`` names another), with ``--repeat`` the median and range of that ratio
taken within each round, and a table of CPU use during each timed run: the client process's CPU time per
message (per connection for connect), then client and broker CPU as % of one core over
the run, which tells whether the client or the broker limits a number.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BENCH_VENV = HERE / ".venv-bench"

sys.path.insert(0, str(HERE))  # the ``clients`` package, also for worker processes

from clients import BY_NAME, CLIENTS, GROUPS, ClientInfo  # noqa: E402
from clients.base import (  # noqa: E402
    BODY_SIZE,
    MPUB_BATCH,
    WORKLOADS,
    Context,
    NotApplicable,
    topic_name,
)

# Message counts per workload (connect: connections). Sized so the whole table prints in
# under two minutes against the embedded broker on a 2-core machine.
DEFAULT_COUNTS = {"pub": 10_000, "mpub": 200_000, "consume": 100_000, "connect": 300}
DEFAULT_WARMUPS = {"pub": 500, "mpub": 4_000, "consume": 5_000, "connect": 20}
QUICK_COUNTS = {"pub": 200, "mpub": 2_000, "consume": 2_000, "connect": 20}
QUICK_WARMUPS = {"pub": 20, "mpub": 200, "consume": 500, "connect": 2}

WORKLOAD_TITLES = {
    "pub": "PUB msgs/s",
    "mpub": "MPUB x200 msgs/s",
    "consume": "consume+FIN msgs/s",
    "connect": "connect+IDENTIFY us p50/p90",
}
CPU_TITLES = {
    "pub": "PUB",
    "mpub": "MPUB x200",
    "consume": "consume+FIN",
    "connect": "connect+IDENTIFY",
}
REFERENCE_CLIENT = "blocking"
HOOK_CONN_ENV = "AIRFLOW_CONN_NSQ_BENCH"


# -- worker side (runs in the client's own process) -----------------------------------


def run_worker(name: str, spec_json: str, out_path: str) -> None:
    """Run the requested workloads for one client; write results after each one, so a
    crash or a timeout keeps what was measured before it."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))  # the bench venv does not install the project
    spec = json.loads(spec_json)
    info = BY_NAME[name]
    results: list[dict[str, Any]] = []
    try:
        module = importlib.import_module(f"clients.{info.module}")
    except Exception as exc:
        why = f"cannot import: {type(exc).__name__}: {exc}"
        results = [{"workload": w, "status": "error", "reason": why} for w in spec["workloads"]]
        Path(out_path).write_text(json.dumps(results))
        return
    if spec.get("freeze", True):
        # What was imported (Airflow, for the hook: ~10^6 objects) leaves the collector's
        # view, as Airflow's LocalExecutor does before it forks task workers. Otherwise a
        # run that keeps messages alive across collections (a window holds 2,500) pays a
        # full collection of that heap (~0.1 s), which is the process's cost, not the
        # client's. --no-freeze shows it.
        gc.collect()
        gc.freeze()
    for workload in spec["workloads"]:
        ctx = Context(
            host=spec["host"],
            port=spec["port"],
            counts=spec["counts"],
            warmups=spec["warmups"],
            broker_pid=spec["broker_pid"],
            nsqds=spec.get("nsqds", []),
            lookupd=spec.get("lookupd"),
            run_id=spec["run_id"],
            client=name,
            workload=workload,
            profile_dir=spec.get("profile_dir"),
        )
        try:
            row = {"status": "ok", **getattr(module, workload)(ctx)}
        except NotApplicable as exc:
            row = {"status": "n/a", "reason": str(exc)}
        except Exception as exc:
            row = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        results.append({"workload": workload, **row, "code": _project_tree()})
        Path(out_path).write_text(json.dumps(results))


def _project_tree() -> str | None:
    """The checkout whose ``airflow_provider_nsq`` this worker ran (``--source``)."""
    module = sys.modules.get("airflow_provider_nsq")
    file = getattr(module, "__file__", None)
    return str(Path(file).resolve().parent.parent) if file else None


# -- the server -------------------------------------------------------------------------


class ServerUnavailable(RuntimeError):
    """The external servers cannot serve a row (a topology without a lookupd): the row is
    reported as skipped, with this reason."""


@contextlib.contextmanager
def keep_awake(enabled: bool) -> Iterator[None]:
    """One lowest-priority busy process per core, so no core ever idles.

    On a VM an idle vCPU halts, and waking it costs more than a whole PUB round trip
    (measured here: a plain-socket PUB loop ran at 13k/s on an idle 2-core VM and at
    57k/s with a spinner). The spinners run only when a core would otherwise idle
    (SCHED_IDLE), so round-trip figures show the clients' own cost instead of the
    host's wake-up latency.
    """
    if not enabled:
        yield
        return
    # SCHED_IDLE (not just nice 19): a waking client or broker preempts it at once.
    code = (
        "import os\n"
        "try:\n"
        "    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
        "except (AttributeError, OSError):\n"
        "    os.nice(19)\n"
        "while True: pass"
    )
    spinners = [
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_listening(host: str, port: int, proc: subprocess.Popen | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the broker exited with code {proc.returncode}")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout:g}s")


class Server:
    """Where the workers connect: a real nsqd (``NSQD_ADDRESS``), or a process started
    fresh for each client: the embedded broker, or the null nsqd (``--server null``).

    A client that reads a topology (``ClientInfo.nsqds > 1``) gets an embedded
    nsqlookupd and that many embedded brokers registered with it, each its own process;
    or, with ``NSQLOOKUPD_HTTP_ADDRESS``, that real lookupd and the nsqds listed in
    ``NSQD_ADDRESS`` (comma-separated, registered with it).
    """

    def __init__(self, kind: str = "embedded") -> None:
        addresses = [a.strip() for a in os.environ.get("NSQD_ADDRESS", "").split(",") if a]
        self.external = bool(addresses)
        self.kind = "nsqd" if addresses else kind
        self.http_address = os.environ.get("NSQD_HTTP_ADDRESS", "").split(",")[0] or None
        self.host, self.port = "127.0.0.1", 0
        self.external_nsqds = addresses
        self.external_lookupd = os.environ.get("NSQLOOKUPD_HTTP_ADDRESS") or None
        if addresses:
            host, _, port = addresses[0].rpartition(":")
            self.host, self.port = host or "127.0.0.1", int(port)
        self.nsqds: list[str] = []  # a topology's nsqds (TCP host:port)
        self.lookupd: str | None = None  # a topology's lookupd (HTTP host:port)
        self.proc: subprocess.Popen | None = None

    def describe(self) -> str:
        if self.external:
            return f"nsqd at {self.host}:{self.port} (NSQD_ADDRESS)"
        if self.kind == "null":
            return "null nsqd (benchmarks/clients/null_nsqd.py: the clients' own ceiling)"
        return "embedded broker (python -m airflow_provider_nsq.testing.broker), fresh per client"

    @contextlib.contextmanager
    def running(self, nsqds: int = 1) -> Iterator[int | list[int] | None]:
        """Yield the broker's pid (for an external nsqd: ``NSQD_PID`` if set, else None,
        and its CPU is not read); for a topology, every broker's pid."""
        if nsqds > 1:
            with self._topology(nsqds) as pids:
                yield pids
            return
        if self.external:
            wait_listening(self.host, self.port, None, 5)
            # nsqd's CPU column needs its pid, when it runs on this machine.
            pid = os.environ.get("NSQD_PID")
            yield int(pid) if pid else None
            return
        self.port, http_port = free_ports(2)
        if self.kind == "null":
            cmd = [sys.executable, str(HERE / "clients" / "null_nsqd.py")]
            cmd += ["--tcp-port", str(self.port)]
        else:
            cmd = [sys.executable, "-m", "airflow_provider_nsq.testing.broker"]
            cmd += ["--tcp-port", str(self.port), "--http-port", str(http_port)]
        with self._process(cmd, self.port) as proc:
            self.proc = proc
            try:
                yield proc.pid
            finally:
                self.proc = None

    @contextlib.contextmanager
    def _topology(self, n: int) -> Iterator[list[int] | None]:
        if self.external:
            if not self.external_lookupd or len(self.external_nsqds) < n:
                raise ServerUnavailable(
                    f"a topology row needs NSQLOOKUPD_HTTP_ADDRESS and {n} nsqds registered "
                    "with it in NSQD_ADDRESS (comma-separated)"
                )
            self.nsqds, self.lookupd = self.external_nsqds[:n], self.external_lookupd
            yield None
            return
        if self.kind == "null":
            raise RuntimeError("the null nsqd does not register with nsqlookupd")
        lookupd_tcp, lookupd_http, *ports = free_ports(2 + 2 * n)
        lookupd_cmd = [sys.executable, "-m", "airflow_provider_nsq.testing.lookupd"]
        lookupd_cmd += ["--tcp-port", str(lookupd_tcp), "--http-port", str(lookupd_http)]
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._process(lookupd_cmd, lookupd_http))
            pids = []
            for i in range(n):
                tcp, http = ports[2 * i], ports[2 * i + 1]
                cmd = [sys.executable, "-m", "airflow_provider_nsq.testing.broker"]
                cmd += ["--tcp-port", str(tcp), "--http-port", str(http)]
                cmd += ["--lookupd-tcp-address", f"127.0.0.1:{lookupd_tcp}"]
                pids.append(stack.enter_context(self._process(cmd, tcp)).pid)
            self.nsqds = [f"127.0.0.1:{ports[2 * i]}" for i in range(n)]
            self.lookupd = f"127.0.0.1:{lookupd_http}"
            self.host, self.port = "127.0.0.1", ports[0]
            try:
                yield pids
            finally:
                self.nsqds, self.lookupd = [], None

    @contextlib.contextmanager
    def _process(self, cmd: list[str], port: int) -> Iterator[subprocess.Popen]:
        """Run ``cmd`` until the block ends; wait until it listens on ``port``."""
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ROOT)
            try:
                try:
                    wait_listening(self.host, port, proc, 30)
                except RuntimeError as exc:
                    log.seek(0)
                    tail = log.read().decode(errors="replace").strip().splitlines()[-5:]
                    raise RuntimeError(f"{exc}: {' | '.join(tail)}") from None
                yield proc
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def delete_topics(self, names: list[str]) -> None:
        # A real nsqd keeps what we published; its HTTP API drops it again.
        if not (self.external and self.http_address):
            return
        from urllib.request import Request, urlopen

        # A client may use topics of its own beside the workload's (``<name>_<suffix>``).
        with contextlib.suppress(OSError, ValueError):
            url = f"http://{self.http_address}/stats?format=json"
            with urlopen(url, timeout=5) as answer:
                stats = json.loads(answer.read())
            topics = [t["topic_name"] for t in stats.get("topics", [])]
            names = [t for t in topics if any(t == n or t.startswith(n + "_") for n in names)]
        for name in names:
            with contextlib.suppress(OSError):
                url = f"http://{self.http_address}/topic/delete?topic={name}"
                urlopen(Request(url, method="POST"), timeout=5).close()


# -- the bench venv for third-party clients --------------------------------------------


def bench_python(args: argparse.Namespace, needed: list[ClientInfo]) -> tuple[str | None, str]:
    """The interpreter for pynsq and gnsq, and why there is none if so."""
    if args.python:
        return args.python, ""
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        if args.no_install:
            return None, f"no {BENCH_VENV.relative_to(ROOT)} (--no-install)"
        print(f"creating {BENCH_VENV.relative_to(ROOT)} for pynsq and gnsq ...", file=sys.stderr)
        made = subprocess.run(
            [sys.executable, "-m", "venv", str(BENCH_VENV)], capture_output=True, text=True
        )
        if made.returncode:
            return None, f"cannot create the bench venv: {made.stderr.strip()[-200:]}"
    # Install what is missing; pip's own failure text says why (shown in the row).
    packages = {"nsq": "pynsq", "gnsq": "gnsq"}
    missing = [
        packages[m]
        for info in needed
        for m in info.imports
        if subprocess.run([str(python), "-c", f"import {m}"], capture_output=True).returncode
    ]
    if missing and not args.no_install:
        print(f"installing {', '.join(missing)} into the bench venv ...", file=sys.stderr)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *missing], capture_output=True, text=True
        )
    return str(python), ""


def import_error(python: str, info: ClientInfo) -> str | None:
    for module in info.imports:
        try:
            probe = subprocess.run(
                [python, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"cannot run {python}: {exc}"
        if probe.returncode:
            last = (probe.stderr.strip().splitlines() or ["?"])[-1]
            return f"cannot import {module}: {last}"
    return None


# -- running the clients ---------------------------------------------------------------


def run_client(
    info: ClientInfo,
    python: str,
    server: Server,
    spec: dict[str, Any],
    timeout: float,
    airflow_home: str,
) -> list[dict[str, Any]]:
    env = dict(os.environ)
    # The code under test first (--source, or the caller's PYTHONPATH), then this
    # checkout (the bench venv does not install the project).
    paths = (spec.get("source"), env.get("PYTHONPATH"), str(ROOT))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    if spec.get("go_bench"):
        env["NSQ_GO_BENCH_DIR"] = spec["go_bench"]
    if info.airflow:
        env.update(
            {
                "AIRFLOW_HOME": airflow_home,
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                HOOK_CONN_ENV: f"nsq://{server.host}:{server.port}",
            }
        )
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        out_path = out.name
    try:
        cmd = [python, str(Path(__file__).resolve()), "--worker", info.name]
        cmd += ["--spec", json.dumps(spec), "--out", out_path]
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            failure = None
            if done.returncode:
                last = (done.stderr.strip().splitlines() or ["?"])[-1]
                failure = f"worker exited with {done.returncode}: {last}"
        except subprocess.TimeoutExpired:
            failure = f"timed out after {timeout:g}s"
        try:
            rows = json.loads(Path(out_path).read_text() or "[]")
        except ValueError:
            rows = []
    finally:
        os.unlink(out_path)
    seen = {r["workload"] for r in rows}
    for workload in spec["workloads"]:
        if workload not in seen:
            rows.append({"workload": workload, "status": "error", "reason": failure or "no result"})
    return rows


def measure(
    client: ClientInfo,
    python: str,
    server: Server,
    spec: dict[str, Any],
    timeout: float,
    airflow_home: str,
) -> list[dict[str, Any]]:
    """One client's rows, on a fresh embedded broker (or the external nsqd)."""
    try:
        with server.running(client.nsqds) as broker_pid:
            spec = {
                **spec,
                "host": server.host,
                "port": server.port,
                "broker_pid": broker_pid,
                "nsqds": server.nsqds,
                "lookupd": server.lookupd,
            }
            return run_client(client, python, server, spec, timeout, airflow_home)
    except ServerUnavailable as exc:  # the environment lacks what the row needs
        return [
            {"workload": w, "status": "skipped", "reason": f"server: {exc}"}
            for w in spec["workloads"]
        ]
    except RuntimeError as exc:  # the broker did not start
        return [
            {"workload": w, "status": "error", "reason": f"server: {exc}"}
            for w in spec["workloads"]
        ]


def select_clients(text: str) -> list[ClientInfo]:
    chosen: list[ClientInfo] = []
    for word in text.split(","):
        word = word.strip()
        if word == "all":
            picked = list(CLIENTS)
        elif word in GROUPS:
            picked = [c for c in CLIENTS if c.group == word]
        elif word in BY_NAME:
            picked = [BY_NAME[word]]
        else:
            names = ", ".join(["all", *GROUPS, *BY_NAME])
            raise SystemExit(f"unknown client {word!r}; choose from {names}")
        chosen += [c for c in picked if c not in chosen]
    return chosen


def counts_from(args: argparse.Namespace) -> tuple[dict[str, int], dict[str, int]]:
    counts = dict(QUICK_COUNTS if args.quick else DEFAULT_COUNTS)
    warmups = dict(QUICK_WARMUPS if args.quick else DEFAULT_WARMUPS)
    if args.count:
        for workload in ("pub", "mpub", "consume"):
            counts[workload] = args.count
            warmups[workload] = max(1, args.count // 10)
    # Whole MPUB batches only: every client sends the same frames.
    counts["mpub"] = -(-counts["mpub"] // MPUB_BATCH) * MPUB_BATCH
    warmups["mpub"] = -(-warmups["mpub"] // MPUB_BATCH) * MPUB_BATCH
    return counts, warmups


# -- output ----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the figures depend on; the load average says whether something else was
    competing for the cores (the figures are only comparable within one run)."""
    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def commit(tree: Path = ROOT) -> str | None:
    """The commit of the code measured (``+dirty`` with local changes)."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(tree), "describe", "--always", "--dirty=+dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except OSError:
        return None
    return rev.stdout.strip() or None


def human(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def median_run(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median figure (its CPU figures come with it); every round's
    figure is kept in ``rounds``. A failed round counts only if no round succeeded."""
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["value"])
    if not ok:
        return rows[0]
    row = dict(ok[(len(ok) - 1) // 2])
    row["rounds"] = [r["value"] if r["status"] == "ok" else r["status"] for r in rows]
    return row


def speedup(row: dict[str, Any], base: dict[str, Any]) -> float:
    """``row``'s figure against ``base``'s: throughput / its throughput; for connect, its
    latency / this latency (so above 1.0 always means faster than it)."""
    if row["unit"] == "us":
        return float(base["value"] / row["value"])
    return float(row["value"] / base["value"])


def add_ratios(results: list[dict[str, Any]], reference: str = REFERENCE_CLIENT) -> None:
    """Each median figure's :func:`speedup` against the ``reference`` client's."""
    ref = {r["workload"]: r for r in results if r["client"] == reference and r["status"] == "ok"}
    for r in results:
        base = ref.get(r["workload"])
        if r["status"] != "ok" or not base or not base["value"]:
            continue
        r["ratio"] = speedup(r, base)


def add_round_ratios(
    results: list[dict[str, Any]],
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    reference: str = REFERENCE_CLIENT,
) -> None:
    """Each row's :func:`speedup` against the ``reference`` client in the same round, as
    ``round_ratios``: two clients run one after the other within a round, so a burst of
    load from elsewhere moves both, and these ratios vary less than the figures do."""
    for r in results:
        mine = runs.get((r["client"], r["workload"]), [])
        theirs = runs.get((reference, r["workload"]), [])
        r["round_ratios"] = [
            speedup(a, b)
            for a, b in zip(mine, theirs, strict=False)
            if a["status"] == b["status"] == "ok" and a["value"] and b["value"]
        ]


def round_ratio_cell(r: dict[str, Any] | None) -> str:
    """The median of a row's ratios within each round, and their range."""
    ratios = sorted((r or {}).get("round_ratios") or [])
    if not ratios:
        return "-"
    mid = ratios[(len(ratios) - 1) // 2]
    return f"{mid:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r["status"] != "ok":
        return r["status"]
    ratio = f"{r['ratio']:.2f}x" if "ratio" in r else ""
    if r["unit"] == "us":
        return f"{r['value']:.0f}/{r['p90']:.0f}  {ratio}".rstrip()
    return f"{human(r['value'])}  {ratio}".rstrip()


def cpu_cell(r: dict[str, Any] | None) -> str:
    if r is None or r["status"] != "ok":
        return "-"
    per_msg = f"{r['client_cpu_us']:.1f}us" if r.get("client_cpu_us") is not None else "?"
    client = f"{r['client_cpu'] * 100:.0f}%" if r.get("client_cpu") is not None else "?"
    broker = f"{r['broker_cpu'] * 100:.0f}%" if r.get("broker_cpu") is not None else "?"
    return f"{per_msg}  {client}/{broker}"


def table(
    results: list[dict[str, Any]],
    clients: list[ClientInfo],
    workloads: list[str],
    render: Any,
    title: str,
    titles: dict[str, str],
) -> str:
    by_key = {(r["client"], r["workload"]): r for r in results}
    rows = [[title, *(titles[w] for w in workloads)]]
    for info in clients:
        rows.append([info.label, *(render(by_key.get((info.name, w))) for w in workloads)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        first = row[0].ljust(widths[0])
        rest = "  ".join(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))
        lines.append(f"{first}  {rest}")
        if n == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def problems(results: list[dict[str, Any]]) -> list[str]:
    return [
        f"  {r['client']} / {r['workload']}: {r['status']}: {r['reason']}"
        for r in results
        if r["status"] not in ("ok",) and r.get("reason")
    ]


# -- main ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--count", type=int, help="messages per PUB/MPUB/consume workload")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--quick", action="store_true", help="tiny counts: a smoke run")
    parser.add_argument("--clients", default="all", help="all, a group, or names, comma-separated")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument(
        "--server",
        choices=("embedded", "null"),
        default="embedded",
        help="embedded broker, or a null nsqd that costs ~nothing (the clients' ceiling); "
        "NSQD_ADDRESS overrides both",
    )
    parser.add_argument("--python", help="interpreter for pynsq/gnsq (default: the bench venv)")
    parser.add_argument("--no-install", action="store_true", help="never create the bench venv")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of every client; the median is shown"
    )
    parser.add_argument(
        "--keep-awake",
        action="store_true",
        help="run an idle-priority spinner per core so idle vCPUs do not halt between round trips",
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds per client")
    parser.add_argument("--profile", metavar="DIR", help="cProfile each timed run into DIR")
    parser.add_argument(
        "--source",
        metavar="DIR",
        help="run this project's clients from the checkout in DIR (a before/after table)",
    )
    parser.add_argument(
        "--go-bench", metavar="DIR", help="nsq's bench_writer and bench_reader, for the go row"
    )
    parser.add_argument(
        "--reference",
        default=REFERENCE_CLIENT,
        metavar="CLIENT",
        help="the client every ratio is to (default blocking; e.g. go, plain-socket)",
    )
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="leave what each worker imported in the garbage collector's view (by default "
        "it is frozen after the imports, as Airflow's LocalExecutor freezes its heap)",
    )
    # Internal: one client's workloads, in its own process.
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        run_worker(args.worker, args.spec, args.out)
        return 0

    started = time.perf_counter()
    clients = select_clients(args.clients)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if bad := [w for w in workloads if w not in WORKLOADS]:
        raise SystemExit(f"unknown workload(s) {bad}; choose from {', '.join(WORKLOADS)}")
    if args.reference not in {c.name for c in clients}:
        raise SystemExit(
            f"--reference {args.reference!r} is not among the clients run "
            f"({', '.join(c.name for c in clients)})"
        )
    reference = next(c for c in clients if c.name == args.reference)
    counts, warmups = counts_from(args)
    server = Server(args.server)
    source = str(Path(args.source).resolve()) if args.source else None
    go_bench = str(Path(args.go_bench).resolve()) if args.go_bench else None
    profile_dir = None
    if args.profile:
        profile_dir = str(Path(args.profile).resolve())
        os.makedirs(profile_dir, exist_ok=True)

    third_party = [c for c in clients if c.imports]
    other_python, no_python = (None, "")
    if third_party:
        other_python, no_python = bench_python(args, third_party)

    revision = commit(Path(source) if source else ROOT)
    print(f"server:   {server.describe()}" + (f"; commit {revision}" if revision else ""))
    if source:
        print(f"code:     the project's clients from {source}")
    print(
        "messages: "
        + ", ".join(f"{w} {counts[w]:,} (+{warmups[w]:,} warm-up)" for w in workloads)
        + f"; {BODY_SIZE}-byte bodies, MPUB batches of {MPUB_BATCH}, RDY 2500"
    )
    info = machine()
    load = info["load_average_1m"]
    print(
        f"machine:  {info['nproc']} cores, {info['cpu']}, Python {info['python']}"
        + (f", load average {load:.2f}" if load is not None else "")
    )
    if args.keep_awake:
        print("          --keep-awake: an idle-priority spinner per core keeps every core busy")
    elif load is not None and info["nproc"] and load > 0.5 * info["nproc"]:
        print("warning:  other processes are busy; compare figures within this run only")
    print(flush=True)

    interpreters: dict[str, tuple[str | None, str]] = {}
    for client in clients:
        python: str | None = sys.executable
        reason = ""
        if client.imports:
            python = other_python
            reason = no_python or (import_error(python, client) if python else "") or ""
            if python is None and not reason:
                reason = "no interpreter"
        interpreters[client.name] = (python, reason)

    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    airflow_home = tempfile.mkdtemp(prefix="nsq-bench-airflow-")
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, airflow_home, ignore_errors=True)
        stack.enter_context(keep_awake(args.keep_awake))
        # Rounds of every client in turn: a burst of load from elsewhere hits all of
        # them alike, and the median round per figure is reported.
        for round_no in range(args.repeat):
            run_id = f"{os.getpid()}r{round_no}"
            for client in clients:
                python, reason = interpreters[client.name]
                if reason:
                    rows = [
                        {"workload": w, "status": "unavailable", "reason": reason}
                        for w in workloads
                    ]
                else:
                    assert python is not None
                    t0 = time.perf_counter()
                    spec = {
                        "counts": counts,
                        "warmups": warmups,
                        "run_id": run_id,
                        "workloads": workloads,
                        "profile_dir": profile_dir,
                        "freeze": not args.no_freeze,
                        "source": source,
                        "go_bench": go_bench,
                    }
                    rows = measure(client, python, server, spec, args.timeout, airflow_home)
                    took = time.perf_counter() - t0
                    print(f"  ran {client.label} in {took:.1f}s", flush=True)
                for row in rows:
                    runs.setdefault((client.name, row["workload"]), []).append(
                        {"client": client.name, "label": client.label, **row}
                    )
                server.delete_topics([topic_name(w, client.name, run_id) for w in workloads])
    results = [median_run(runs[(c.name, w)]) for c in clients for w in workloads]

    add_ratios(results, reference.name)
    add_round_ratios(results, runs, reference.name)
    print()
    print(
        table(
            results,
            clients,
            workloads,
            cell,
            f"client (ratio: vs {reference.label})",
            WORKLOAD_TITLES,
        )
    )
    if args.repeat > 1:
        print()
        print(
            table(
                results,
                clients,
                workloads,
                round_ratio_cell,
                "ratio within each round: median (range)",
                WORKLOAD_TITLES,
            )
        )
    print()
    print(
        table(
            results,
            clients,
            workloads,
            cpu_cell,
            "client CPU us/msg  client%/broker% of a core",
            CPU_TITLES,
        )
    )
    if notes := problems(results):
        print("\nnot measured:")
        print("\n".join(notes))
    elapsed = time.perf_counter() - started
    print(f"\ntotal {elapsed:.0f}s")
    if profile_dir:
        print(f"profiles (timed runs only): {profile_dir}/<client>-<workload>.txt and .prof")

    if args.json:
        document = {
            "machine": info,
            "server": server.describe(),
            "commit": revision,
            "source": source,
            "body_size": BODY_SIZE,
            "mpub_batch": MPUB_BATCH,
            "counts": counts,
            "warmups": warmups,
            "reference_client": reference.name,
            "rounds": args.repeat,
            "keep_awake": args.keep_awake,
            "clients": [asdict(c) for c in clients],
            "results": results,
            "elapsed_s": elapsed,
        }
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
