"""``benchmarks/throughput.py`` runs end to end: a smoke run with tiny counts.

Only this project's clients and the plain-socket floor (no bench venv, no third-party
install), against the embedded broker and the null nsqd the script starts itself. It
checks that every workload produced a positive figure; it asserts nothing about speed
(the benchmark is a script that prints a table, not a timed test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput.py"
PROJECT_CLIENTS = ("blocking", "hook", "asyncio")
TOPOLOGY = "topology"  # NSQConsumer over 3 nsqds and a lookupd: consume only
# The consume operator (per message, per batch) and the event trigger: consume only.
AIRFLOW_CONSUMERS = ("operator", "operator-batch", "event-trigger")
WORKLOADS = ("pub", "mpub", "consume", "connect")


def _external_servers_lack_a_topology() -> bool:
    """NSQD_ADDRESS names real nsqds, but not a lookupd with three of them."""
    nsqds = [a for a in os.environ.get("NSQD_ADDRESS", "").split(",") if a.strip()]
    return bool(nsqds) and (len(nsqds) < 3 or not os.environ.get("NSQLOOKUPD_HTTP_ADDRESS"))


@pytest.mark.timeout(240)
def test_quick_run_measures_every_workload(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--clients", "project", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=230,
    )
    assert done.returncode == 0, done.stderr[-2000:]

    document = json.loads(out.read_text())
    rows = {(r["client"], r["workload"]): r for r in document["results"]}
    everyone = (*PROJECT_CLIENTS, TOPOLOGY, *AIRFLOW_CONSUMERS)
    assert set(rows) == {(c, w) for c in everyone for w in WORKLOADS}
    for client in AIRFLOW_CONSUMERS:
        for workload in ("pub", "mpub", "connect"):
            assert rows.pop((client, workload))["status"] == "n/a"
    topology = rows.pop((TOPOLOGY, "consume"))
    if _external_servers_lack_a_topology():
        # A real nsqd without a lookupd and three nsqds: the row says why it has no figure.
        assert topology["status"] == "skipped"
        assert "NSQLOOKUPD_HTTP_ADDRESS" in topology["reason"]
    else:
        assert topology["status"] == "ok", topology.get("reason")
        assert topology["value"] > 0 and topology["count"] > 0
    for workload in ("pub", "mpub", "connect"):
        assert rows.pop((TOPOLOGY, workload))["status"] in ("n/a", "skipped")
    for key, row in rows.items():
        assert row["status"] == "ok", (key, row.get("reason"))
        assert row["value"] > 0, key
        assert row["count"] > 0, key
        assert row["seconds"] > 0, key
    for client in PROJECT_CLIENTS:
        assert rows[(client, "connect")]["unit"] == "us"
        assert rows[(client, "connect")]["p90"] >= rows[(client, "connect")]["value"]
        assert rows[(client, "pub")]["unit"] == "msgs/s"
    assert rows[("blocking", "pub")]["ratio"] == 1.0
    # The printed table names every client the JSON has.
    for label in ("blocking", "NSQHook", "AsyncNSQConnection"):
        assert label in done.stdout


@pytest.mark.timeout(60)
def test_null_server_quick_run(tmp_path: Path) -> None:
    """``--server null`` (the clients' ceiling) serves every workload too."""
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--server",
            "null",
            "--clients",
            "blocking,plain-socket",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=50,
        # NSQD_ADDRESS would override --server null (as documented): this run is about
        # the null server, so leave a real nsqd out of it.
        env={k: v for k, v in os.environ.items() if k not in ("NSQD_ADDRESS", "NSQD_HTTP_ADDRESS")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(out.read_text())
    assert document["server"].startswith("null nsqd")
    for row in document["results"]:
        assert row["status"] == "ok", (row["client"], row["workload"], row.get("reason"))
        assert row["value"] > 0


@pytest.mark.timeout(90)
def test_ratios_to_another_client_within_each_round(tmp_path: Path) -> None:
    """``--reference`` names the client every ratio is to; with ``--repeat`` each row
    also has its ratio taken within each round (what the docs quote on a shared
    machine), printed as a median and range."""
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--server",
            "null",
            "--clients",
            "blocking,plain-socket",
            "--workloads",
            "pub,connect",
            "--repeat",
            "2",
            "--reference",
            "plain-socket",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=80,
        env={k: v for k, v in os.environ.items() if k not in ("NSQD_ADDRESS", "NSQD_HTTP_ADDRESS")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(out.read_text())
    assert document["reference_client"] == "plain-socket"
    rows = {(r["client"], r["workload"]): r for r in document["results"]}
    for workload in ("pub", "connect"):
        assert rows[("plain-socket", workload)]["ratio"] == 1.0
        assert rows[("plain-socket", workload)]["round_ratios"] == [1.0, 1.0]
        blocking = rows[("blocking", workload)]
        assert len(blocking["round_ratios"]) == 2 and min(blocking["round_ratios"]) > 0
    assert "ratio within each round: median (range)" in done.stdout
    assert "vs plain socket (floor)" in done.stdout


def test_an_unknown_reference_is_refused_naming_it() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--clients", "blocking", "--reference", "go"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "--reference 'go' is not among the clients run (blocking)" in done.stderr
