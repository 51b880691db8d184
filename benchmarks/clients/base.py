"""What every client's benchmark worker shares: the workloads, the timer, the channel fill.

A worker runs in its own process (see ``throughput.py``), so a client's event loop
(tornado, gevent, asyncio) never shares a process with another client's, and the
machine's two cores are split one for the broker, one for the client under test.

This module imports only the standard library and this project's blocking client (for
the channel fill), so it also runs in the bench venv, where the project is not installed
but the repository root is put on ``sys.path``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Every message in every workload: 200 bytes, as in the reference figures.
BODY_SIZE = 200
BODY = bytes(i % 251 for i in range(BODY_SIZE))
MPUB_BATCH = 200
# nsqd's default --max-rdy-count: the largest window one connection may ask for.
MAX_RDY = 2500

WORKLOADS = ("pub", "mpub", "consume", "connect")


def topic_name(workload: str, client: str, run_id: str) -> str:
    # Unique per client and run: no workload sees another's messages.
    return f"bench_{workload}_{client.replace('-', '_')}_{run_id}"


class NotApplicable(Exception):
    """The client has no way to run this workload (reported as ``n/a``, not an error)."""


@dataclass
class Context:
    """Everything a worker needs: where nsqd is, how much to send, whom to measure."""

    host: str
    port: int
    counts: dict[str, int]
    warmups: dict[str, int]
    broker_pid: int | list[int] | None = None  # a topology's brokers: every pid
    run_id: str = field(default_factory=lambda: f"{os.getpid()}")
    client: str = "client"
    workload: str = ""
    profile_dir: str | None = None  # --profile: cProfile each timed run into this folder
    nsqds: list[str] = field(default_factory=list)  # a topology's nsqds (TCP host:port)
    lookupd: str | None = None  # a topology's nsqlookupd (HTTP host:port)

    def topic(self, workload: str) -> str:
        return topic_name(workload, self.client, self.run_id)

    def timer(self) -> Timer:
        profile = None
        if self.profile_dir:
            profile = os.path.join(self.profile_dir, f"{self.client}-{self.workload}")
        return Timer(self.broker_pid, profile)


def _broker_cpu_s(pid: int | list[int] | None) -> float | None:
    """CPU seconds the broker process has used (all its threads), from /proc (Linux);
    summed over a topology's brokers.

    ``schedstat`` counts nanoseconds; ``stat`` only 10 ms ticks, too coarse for a
    sub-second run, so it is the fallback.
    """
    if pid is None:
        return None
    if isinstance(pid, list):
        each = [_broker_cpu_s(p) for p in pid]
        return None if any(c is None for c in each) else sum(c for c in each if c is not None)
    try:
        total_ns = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat", "rb") as f:
                total_ns += int(f.read().split()[0])
        return total_ns / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces: split after its closing ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


class Timer:
    """Wall time, this process's CPU time and the broker's CPU time over one timed run.

    CPU / wall says who limits a number: a client at ~100% of a core is client-bound;
    a broker at ~100% (it is one Python process on one core) is broker-bound.
    """

    def __init__(self, broker_pid: int | list[int] | None, profile_path: str | None = None) -> None:
        self._broker_pid = broker_pid
        self._t0 = self._cpu0 = 0.0
        self._b0: float | None = None
        self._profile_path = profile_path
        self._profiler: Any = None

    def start(self) -> None:
        if self._profile_path:
            import cProfile

            # Only the timed part is profiled: connection setup and fills stay out.
            self._profiler = cProfile.Profile()
            self._profiler.enable()
        self._b0 = _broker_cpu_s(self._broker_pid)
        self._cpu0 = time.process_time()
        self._t0 = time.perf_counter()

    def stop(self, count: int, **extra: Any) -> dict[str, Any]:
        wall = time.perf_counter() - self._t0
        cpu = time.process_time() - self._cpu0
        b1 = _broker_cpu_s(self._broker_pid)
        broker = b1 - self._b0 if b1 is not None and self._b0 is not None else None
        if self._profiler is not None:
            self._profiler.disable()
            _dump_profile(self._profiler, self._profile_path, count)
        result: dict[str, Any] = {
            "count": count,
            "seconds": wall,
            # Client CPU per message (per connection for connect): the client's own cost,
            # steadier than msgs/s on a machine where other processes take turns.
            "client_cpu_us": cpu / count * 1e6 if count else None,
            "client_cpu": cpu / wall if wall > 0 else None,
            "broker_cpu": broker / wall if broker is not None and wall > 0 else None,
        }
        result.update(extra)
        return result


def _dump_profile(profiler: Any, path: str | None, count: int) -> None:
    """Write the raw stats (``.prof``, for snakeviz or pstats) and a text summary: the
    top functions by own time and by cumulative time, with us per message."""
    import io
    import pstats

    assert path is not None
    profiler.dump_stats(path + ".prof")
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    total = stats.total_tt  # type: ignore[attr-defined]
    out.write(f"{count} messages, {total:.3f} s profiled, {total / count * 1e6:.2f} us/msg\n")
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)
    with open(path + ".txt", "w") as f:
        f.write(out.getvalue())


def throughput(timer_result: dict[str, Any]) -> dict[str, Any]:
    """Add msgs/s to a timed run."""
    timer_result["value"] = timer_result["count"] / timer_result["seconds"]
    timer_result["unit"] = "msgs/s"
    return timer_result


def latencies(
    timer: Timer, samples_ns: list[int], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Median and p90 of per-connection latencies, in microseconds."""
    result = timer.stop(len(samples_ns), **(extra or {}))
    us = sorted(s / 1000 for s in samples_ns)
    result["value"] = statistics.median(us)
    result["p90"] = us[min(len(us) - 1, int(len(us) * 0.9))]
    result["unit"] = "us"
    return result


def measure_connects(ctx: Context, connect_once: Callable[[], Callable[[], None]]) -> dict:
    """Time ``connect_once()`` (open + IDENTIFY, returns a closer) ``count`` times.

    Closing is outside the timed part: the workload is the handshake a client pays
    before its first command.
    """
    for _ in range(ctx.warmups["connect"]):
        connect_once()()
    timer = ctx.timer()
    samples: list[int] = []
    timer.start()
    for _ in range(ctx.counts["connect"]):
        t0 = time.perf_counter_ns()
        close = connect_once()
        samples.append(time.perf_counter_ns() - t0)
        close()
    return latencies(timer, samples)


def project_config(ctx: Context, **kwargs: Any) -> Any:
    from airflow_provider_nsq.client import ClientConfig

    return ClientConfig(host=ctx.host, port=ctx.port, **kwargs)


def fill_channel(
    ctx: Context, topic: str, channel: str, count: int, nsqd: str | None = None
) -> None:
    """Create ``topic``/``channel`` and queue ``count`` messages on it, untimed.

    The SUB creates the channel before the first message (nsqd copies a message only to
    channels that exist when it is published); the fill uses this project's blocking
    client with MPUBs of ``MPUB_BATCH`` for every client under test alike.
    """
    from airflow_provider_nsq.client import NSQConnection

    config = project_config(ctx)
    if nsqd is not None:
        host, _, port = nsqd.rpartition(":")
        config = config.replace(host=host, port=int(port))
    with NSQConnection(config) as sub:
        sub.subscribe(topic, channel)  # RDY stays 0: nothing is delivered to it
        with NSQConnection(config) as pub:
            batch = [BODY] * MPUB_BATCH
            left = count
            while left > 0:
                pub.multi_publish(topic, batch[: min(left, MPUB_BATCH)])
                left -= MPUB_BATCH


class ConsumeClock:
    """Counts consumed messages; times from the first message after the warm-up to the
    last one (so connection setup and the first RDY round trip are not in the figure).

    The channel holds ``backlog`` more messages than the run consumes. Without them the last
    messages would wait in the broker's output buffer: nsqd sends a buffered message at once
    only when the client's RDY window is full, otherwise on the output-buffer timer (250 ms;
    tests/conformance/transcripts/FACTS.md section 6), which would add a fixed quarter
    second to every run. With the backlog the run measures a consumer that keeps up with a
    busy channel, which is what the figure is for.
    """

    def __init__(self, ctx: Context) -> None:
        self.warmup = ctx.warmups["consume"]
        self.total = self.warmup + ctx.counts["consume"]
        self.backlog = 2 * MAX_RDY
        self.got = 0
        self._timer = ctx.timer()
        self._started_at = 0
        if self.warmup == 0:
            self._timer.start()

    @property
    def done(self) -> bool:
        return self.got >= self.total

    def add(self, n: int) -> None:
        before = self.got
        self.got += n
        if before < self.warmup <= self.got:
            self._timer.start()
            self._started_at = self.got

    def result(self) -> dict[str, Any]:
        return throughput(self._timer.stop(self.got - self._started_at))


def steps(ctx: Context, workload: str) -> tuple[int, int]:
    """(warm-up calls, timed calls) for a publish workload: one message per PUB call,
    ``MPUB_BATCH`` messages per MPUB call."""
    per_call = MPUB_BATCH if workload == "mpub" else 1
    return -(-ctx.warmups[workload] // per_call), -(-ctx.counts[workload] // per_call)


def timed_calls(ctx: Context, workload: str, call: Callable[[], object]) -> dict[str, Any]:
    """Warm up, then time ``call()`` repeated for the workload's message count."""
    warm, timed = steps(ctx, workload)
    for _ in range(warm):
        call()
    timer = ctx.timer()
    timer.start()
    for _ in range(timed):
        call()
    per_call = MPUB_BATCH if workload == "mpub" else 1
    return throughput(timer.stop(timed * per_call))
