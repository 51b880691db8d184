"""How bursts become asset events: what ``NSQEventTrigger``'s batching makes of them.

    python benchmarks/event_batching.py [--quick] [--json PATH]

For each row, a fresh topic: the trigger subscribes (``run()``, the same producer and
batcher the Airflow 3.3 triggerer drives, settled right after each event is handed
over), then one client publishes the burst (sequential PUBs, each waiting for nsqd's OK;
or MPUBs of 100), and the row shows how long publishing took, how many events the burst
became, their sizes, and when the last event was handed over (seconds after the first
publish). Storing the events in Airflow's database is not part of it (about a second
more, measured by ``tests/e2e/test_event_driven_e2e.py``).

Runs against the embedded broker, started as its own process on free ports, or a real
nsqd when ``NSQD_ADDRESS`` and ``NSQD_HTTP_ADDRESS`` (``host:port``) are set. The
trigger's settings are its defaults unless the row says otherwise. Prints a table; it
is a measurement, not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Importing Airflow with no AIRFLOW_HOME would create ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="nsq-bench-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from airflow_provider_nsq.client import ClientConfig, NSQConnection  # noqa: E402
from airflow_provider_nsq.testing.handles import NSQDServer  # noqa: E402

CHANNEL = "bench"
#: (label, messages, publish mode, pause between messages in s, trigger settings)
ROWS: list[tuple[str, int, str, float, dict[str, Any]]] = [
    ("burst", 20, "pub", 0.0, {}),
    ("burst", 200, "pub", 0.0, {}),
    ("burst", 1000, "pub", 0.0, {}),
    ("burst", 2000, "mpub", 0.0, {}),
    ("trickle, 0.1 s apart", 50, "pub", 0.1, {}),
    ("steady, ~100/s", 2000, "pub", 0.01, {}),
    ("burst, batch_size=1", 200, "pub", 0.0, {"batch_size": 1}),
]
QUICK_ROWS = [ROWS[0], ROWS[4]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def nsqd_server() -> Iterator[NSQDServer]:
    """A real nsqd from the environment, or the embedded broker in its own process."""
    tcp, http = os.environ.get("NSQD_ADDRESS"), os.environ.get("NSQD_HTTP_ADDRESS")
    if tcp and http:
        host, _, port = tcp.rpartition(":")
        http_host, _, http_port = http.rpartition(":")
        yield NSQDServer(host, int(port), int(http_port), http_host=http_host)
        return
    port, http_port = _free_port(), _free_port()
    cmd = [sys.executable, "-m", "airflow_provider_nsq.testing.broker"]
    proc = subprocess.Popen([*cmd, "--tcp-port", str(port), "--http-port", str(http_port)])
    try:
        server = NSQDServer("127.0.0.1", port, http_port)
        deadline = time.monotonic() + 30
        while True:
            try:
                server.stats()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the embedded broker did not start") from None
                time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _publish(server: NSQDServer, topic: str, count: int, mode: str, pause: float) -> float:
    """Publish ``count`` messages; how long it took."""
    bodies = [json.dumps({"n": n, "pad": "x" * 100}).encode() for n in range(count)]
    started = time.monotonic()
    with NSQConnection(ClientConfig(host=server.host, port=server.tcp_port)) as conn:
        if mode == "mpub":
            for i in range(0, count, 100):
                conn.multi_publish(topic, bodies[i : i + 100])
        else:
            for body in bodies:
                conn.publish(topic, body)
                if pause:
                    time.sleep(pause)
    return time.monotonic() - started


async def _row(server: NSQDServer, count: int, mode: str, pause: float, settings: dict) -> dict:
    from airflow_provider_nsq.triggers.nsq_event import NSQEventTrigger

    topic = f"batching_{secrets.token_hex(4)}"
    server.create_channel(topic, CHANNEL)
    trigger = NSQEventTrigger(topic=topic, channel=CHANNEL, **settings)
    events = trigger.run()
    first = asyncio.ensure_future(events.__anext__())

    def subscribed() -> bool:
        return bool((server.channel_stats(topic, CHANNEL) or {}).get("clients"))

    while not await asyncio.to_thread(subscribed):
        await asyncio.sleep(0.05)
    started = time.monotonic()
    publishing = asyncio.ensure_future(
        asyncio.to_thread(_publish, server, topic, count, mode, pause)
    )
    sizes: list[int] = []
    last = 0.0
    try:
        pending = first
        while sum(sizes) < count:
            payload = (await asyncio.wait_for(pending, 120)).payload
            last = time.monotonic() - started
            sizes.append(payload["count"] if "messages" in payload else 1)
            pending = asyncio.ensure_future(events.__anext__())
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
    finally:
        await events.aclose()
        server.delete_topic(topic)
    return {
        "messages": count,
        "publish": mode,
        "publish_seconds": await publishing,
        "events": len(sizes),
        "sizes": sizes,
        "last_event_seconds": last,
        "settings": settings,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small rows (smoke run)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    results = []
    with nsqd_server() as server:
        os.environ["AIRFLOW_CONN_NSQ_DEFAULT"] = f"nsq://{server.host}:{server.tcp_port}"
        for label, count, mode, pause, settings in QUICK_ROWS if args.quick else ROWS:
            row = asyncio.run(_row(server, count, mode, pause, settings))
            row["label"] = label
            results.append(row)
    print(f"\n{'row':<22} {'msgs':>5} {'publish':>12} {'events':>7}  {'last event':>10}  sizes")
    for r in results:
        sizes = r["sizes"] if len(r["sizes"]) <= 6 else f"{len(r['sizes'])} x 1"
        publish = f"{r['publish']} {r['publish_seconds']:.2f}s"
        print(
            f"{r['label']:<22} {r['messages']:>5} {publish:>12} {r['events']:>7}  "
            f"{r['last_event_seconds']:>9.2f}s  {sizes}"
        )
    if args.json:
        args.json.write_text(json.dumps({"results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
