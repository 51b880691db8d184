"""Before/after table of the client against the wire limit: its publish, connect and
consume figures as ratios to the plain-socket floor, to Go's own tools and to itself.

    python benchmarks/wire_limit.py --before DIR [--rounds N] [--count N] [--keep-awake]
                                    [--go-bench DIR] [--json PATH] [--svg PATH] [--quick]
    python benchmarks/wire_limit.py --replot PATH [--svg PATH]

``DIR`` is another checkout of the project (the code before a change); this checkout is
"after". Each round runs ``throughput.py`` once for each tree (clients: blocking, hook,
asyncio, plain socket, and Go's ``bench_writer``/``bench_reader`` with ``--go-bench``;
workloads: pub, mpub, consume, connect), the trees' order alternating from round to
round; the plain socket and Go run in both, so each tree's ratios come from its own run.
Each ratio is the median over the rounds of the ratio within one run: a burst of load
from elsewhere hits both sides of a ratio alike. Against the embedded broker by
default; ``NSQD_ADDRESS`` (and ``NSQD_HTTP_ADDRESS``, ``NSQD_PID``) for a real nsqd.

Prints the table (Markdown) with each row's target, writes every run's figures as JSON
(``--json``) and the table as a bar chart (``--svg``: an SVG written here, no plotting
library needed). ``--replot`` prints and draws a saved ``--json`` again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
THROUGHPUT = HERE / "throughput.py"
TREES = ("before", "after")


@dataclass(frozen=True)
class Row:
    """One ratio: ``workload`` of ``client`` over ``workload`` of ``reference``."""

    title: str
    workload: str
    client: str
    reference: str
    target: float
    lower_is_better: bool = False  # latencies: the ratio of the client's over the other's

    @property
    def goal(self) -> str:
        return f"{'≤' if self.lower_is_better else '≥'} {self.target:g}"


ROWS = (
    Row("PUB, sequential: blocking / plain socket", "pub", "blocking", "plain-socket", 0.9),
    Row("MPUB x200: blocking / plain socket", "mpub", "blocking", "plain-socket", 0.9),
    Row("MPUB x200: blocking / Go bench_writer", "mpub", "blocking", "go", 1.0),
    Row(
        "connect + IDENTIFY p50: blocking / plain socket",
        "connect",
        "blocking",
        "plain-socket",
        1.3,
        lower_is_better=True,
    ),
    Row("via NSQHook, PUB: hook / blocking", "pub", "hook", "blocking", 0.9),
    Row(
        "via NSQHook, connect p50: hook / blocking",
        "connect",
        "hook",
        "blocking",
        1.3,
        lower_is_better=True,
    ),
    Row("asyncio PUB: asyncio / blocking", "pub", "asyncio", "blocking", 0.9),
    Row("consume + FIN: blocking / Go bench_reader", "consume", "blocking", "go", 1.0),
    Row("consume + FIN: blocking / plain socket", "consume", "blocking", "plain-socket", 1.0),
)
CPU_CLIENTS = ("blocking", "hook", "asyncio", "plain-socket")
WORKLOADS = ("pub", "mpub", "consume", "connect")


def run_round(
    tree: str, before: str, args: argparse.Namespace, clients: str, tmp: Path, index: int
) -> dict[str, Any]:
    out = tmp / f"{tree}-{index}.json"
    cmd = [sys.executable, str(THROUGHPUT), "--clients", clients]
    cmd += ["--workloads", ",".join(WORKLOADS), "--json", str(out), "--no-install"]
    if tree == "before":
        cmd += ["--source", before]
    if args.keep_awake:
        cmd.append("--keep-awake")
    if args.go_bench:
        cmd += ["--go-bench", args.go_bench]
    if args.quick:
        cmd.append("--quick")
    if args.count:
        cmd += ["--count", str(args.count)]
    print(f"round {index + 1}, {tree}: {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def figure(run: dict[str, Any], client: str, workload: str, key: str = "value") -> float | None:
    for r in run["results"]:
        if r["client"] == client and r["workload"] == workload and r["status"] == "ok":
            value = r.get(key)
            return float(value) if value is not None else None
    return None


def ratio(run: dict[str, Any], row: Row) -> float | None:
    mine = figure(run, row.client, row.workload)
    other = figure(run, row.reference, row.workload)
    if not mine or not other:
        return None
    return mine / other


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rows = []
    for row in ROWS:
        rows.append(
            {
                "title": row.title,
                "goal": row.goal,
                "target": row.target,
                "lower_is_better": row.lower_is_better,
                **{tree: median([ratio(run, row) for run in runs[tree]]) for tree in TREES},
                "rounds": {tree: [ratio(run, row) for run in runs[tree]] for tree in TREES},
            }
        )
    figures: dict[str, Any] = {}
    for tree in TREES:
        for client in (*CPU_CLIENTS, "go"):
            for workload in WORKLOADS:
                values = [figure(run, client, workload) for run in runs[tree]]
                cpus = [figure(run, client, workload, "client_cpu_us") for run in runs[tree]]
                figures.setdefault(tree, {}).setdefault(client, {})[workload] = {
                    "value": median(values),
                    "client_cpu_us": median(cpus),
                }
    return {"rows": rows, "figures": figures}


def fmt(value: float | None, suffix: str = "x") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


def markdown(summary: dict[str, Any]) -> str:
    lines = ["| row | target | before | after |", "|---|---|---|---|"]
    for r in summary["rows"]:
        lines.append(f"| {r['title']} | {r['goal']} | {fmt(r['before'])} | {fmt(r['after'])} |")
    lines += ["", "| client CPU per op (us) | before | after |", "|---|---|---|"]
    units = {"pub": "PUB", "mpub": "MPUB'd message", "consume": "message", "connect": "connect"}
    for client in CPU_CLIENTS:
        for workload in WORKLOADS:
            b = summary["figures"]["before"][client][workload]["client_cpu_us"]
            a = summary["figures"]["after"][client][workload]["client_cpu_us"]
            if a is None and b is None:
                continue
            lines.append(
                f"| {client}, {units[workload]} | {fmt(b, '')} | {fmt(a, '')} |".replace(
                    "plain-socket", "plain socket"
                )
            )
    return "\n".join(lines)


def svg(summary: dict[str, Any], caption: str = "") -> str:
    """The rows as horizontal bars, before (grey) and after (blue), each with its target
    (a dashed line). Hand-written SVG: a few rectangles need no plotting library."""
    rows = [r for r in summary["rows"] if r["before"] is not None or r["after"] is not None]
    label_w, plot_w, bar_h, gap, top = 330, 360, 12, 14, 40
    scale_max = max(1.6, *(r[t] or 0 for r in rows for t in TREES), *(r["target"] for r in rows))
    height = top + len(rows) * (2 * bar_h + gap) + 30 + (16 if caption else 0)

    def x(value: float) -> float:
        return label_w + plot_w * value / scale_max

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 90}" '
        f'height="{height}" font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{label_w}" y="16" font-size="12">ratio (latency rows: lower is '
        "better; the others: higher)</text>",
        f'<rect x="{label_w}" y="22" width="10" height="10" fill="#9e9e9e"/>'
        f'<text x="{label_w + 14}" y="31">before</text>'
        f'<rect x="{label_w + 70}" y="22" width="10" height="10" fill="#1f77b4"/>'
        f'<text x="{label_w + 84}" y="31">after</text>'
        f'<line x1="{label_w + 130}" y1="27" x2="{label_w + 150}" y2="27" stroke="#d62728" '
        f'stroke-dasharray="4,3"/><text x="{label_w + 154}" y="31">target</text>',
    ]
    for tick in range(int(scale_max * 2) + 1):
        value = tick / 2
        out.append(
            f'<line x1="{x(value):.1f}" y1="{top - 4}" x2="{x(value):.1f}" '
            f'y2="{height - 26 - (16 if caption else 0)}" stroke="#eeeeee"/>'
            f'<text x="{x(value):.1f}" y="{height - 12 - (16 if caption else 0)}" '
            f'text-anchor="middle">{value:g}</text>'
        )
    for i, r in enumerate(rows):
        y0 = top + i * (2 * bar_h + gap)
        out.append(
            f'<text x="{label_w - 8}" y="{y0 + bar_h + 4}" text-anchor="end">'
            f"{_escape(r['title'])} ({_escape(r['goal'])})</text>"
        )
        for j, (tree, colour) in enumerate((("before", "#9e9e9e"), ("after", "#1f77b4"))):
            value = r[tree]
            if value is None:
                continue
            y = y0 + j * bar_h
            out.append(
                f'<rect x="{label_w}" y="{y}" width="{x(value) - label_w:.1f}" '
                f'height="{bar_h - 2}" fill="{colour}"/>'
                f'<text x="{x(value) + 4:.1f}" y="{y + bar_h - 3}">{value:.2f}</text>'
            )
        out.append(
            f'<line x1="{x(r["target"]):.1f}" y1="{y0 - 2}" x2="{x(r["target"]):.1f}" '
            f'y2="{y0 + 2 * bar_h}" stroke="#d62728" stroke-dasharray="4,3"/>'
        )
    if caption:
        out.append(f'<text x="8" y="{height - 6}" font-size="10">{_escape(caption)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--before", metavar="DIR", help="the checkout before")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree (default 3)")
    parser.add_argument(
        "--count", type=int, help="messages per PUB/MPUB/consume run (see throughput.py)"
    )
    parser.add_argument("--keep-awake", action="store_true", help="see throughput.py")
    parser.add_argument("--go-bench", metavar="DIR", help="nsq's bench_writer, bench_reader")
    parser.add_argument("--json", metavar="PATH", help="write every run and the summary")
    parser.add_argument("--svg", metavar="PATH", help="write the table as a bar chart")
    parser.add_argument("--quick", action="store_true", help="tiny counts: a smoke run")
    parser.add_argument("--replot", metavar="PATH", help="a saved --json: print and draw it")
    args = parser.parse_args(argv)
    if args.replot:
        runs = json.loads(Path(args.replot).read_text())["runs"]
    elif args.before:
        runs = measure(args)
    else:
        parser.error("--before DIR (or --replot PATH) is needed")
    summary = summarise(runs)
    caption = describe(runs)
    print(f"\n{caption}")
    print(markdown(summary))
    if args.json and not args.replot:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": runs}, indent=1))
    if args.svg:
        Path(args.svg).write_text(svg(summary, caption))
    return 0


def measure(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every round's run of each tree, the trees' order alternating."""
    before = str(Path(args.before).resolve())
    clients = "blocking,hook,asyncio,plain-socket" + (",go" if args.go_bench else "")
    runs: dict[str, list[dict[str, Any]]] = {tree: [] for tree in TREES}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            order = TREES if index % 2 == 0 else TREES[::-1]
            for tree in order:
                runs[tree].append(run_round(tree, before, args, clients, Path(tmp), index))
    return runs


def describe(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Where and when: the server, the rounds, the commits, the load, --keep-awake."""
    first = runs["after"][0]
    loads = [run["machine"]["load_average_1m"] for tree in TREES for run in runs[tree]]
    return (
        f"{first['server'].split(' (')[0]}; {len(runs['after'])} rounds per tree; before "
        f"{runs['before'][0].get('commit')}, after {first.get('commit')}; load average "
        f"{min(loads):.1f}-{max(loads):.1f} on {first['machine']['nproc']} cores"
        + ("; --keep-awake" if first.get("keep_awake") else "")
    )


if __name__ == "__main__":
    sys.exit(main())
