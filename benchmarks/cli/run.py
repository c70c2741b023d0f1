"""Latency of icetide's read-only commands on the demo's tables, as a user runs them.

Each command is run as a fresh process (``icetide …`` from the venv), ``--runs`` times, wall clock;
the broker the demo used is started first so Kafka lag is computed as in real use. Results go to
``benchmarks/cli/results/<label>.json``; ``--compare before after`` writes ``results.md``.

    icetide demo                                   # once: the demo's tables in $ICETIDE_HOME/demo
    python -m benchmarks.cli.run --label after
    python -m benchmarks.cli.run --compare before after
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from icetide import paths
from icetide.services.kafka import LocalKafka

RESULTS = Path(__file__).parent / "results"
COMMANDS: dict[str, list[str]] = {
    "status": ["status"],
    "health": ["health", "demo.events"],
    "plan": ["plan"],
    "offsets": ["offsets"],
    "dead-letters list": ["dead-letters", "list"],
    "report": ["report", "--no-collect", "--out", "{tmp}/report.html"],
}


def _time(argv: list[str], runs: int, cwd: Path) -> dict[str, object]:
    exe = Path(sys.executable).parent / "icetide"
    seconds = []
    for _ in range(runs):
        t0 = time.perf_counter()
        res = subprocess.run([str(exe), *argv], capture_output=True, text=True, cwd=cwd,
                             env={**os.environ, "COLUMNS": "120"})
        seconds.append(round(time.perf_counter() - t0, 3))
        if res.returncode != 0:
            raise SystemExit(f"icetide {' '.join(argv)} failed:\n{res.stderr[-3000:]}")
    return {"runs": seconds, "median": statistics.median(seconds)}


def measure(label: str, runs: int, only: list[str] | None = None) -> dict[str, object]:
    demo = paths.home() / "demo"
    cfg = demo / "pipeline.yaml"
    if not cfg.exists():
        raise SystemExit(f"no demo tables in {demo}: run `icetide demo` first")
    broker = LocalKafka(port=9092)
    broker.start()
    try:
        previous = RESULTS / f"{label}.json"
        out: dict[str, object] = json.loads(previous.read_text())["commands"] if only and previous.exists() else {}
        for name, argv in COMMANDS.items():
            if only and name not in only:
                continue
            full = [a.replace("{tmp}", str(demo)) for a in argv] + ["--config", str(cfg)]
            out[name] = _time(full, runs, demo)
            print(f"{name:18s} {out[name]}", flush=True)  # type: ignore[index]
    finally:
        broker.stop()
    result = {"label": label, "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
              f"Python {platform.python_version()}", "commands": out}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{label}.json").write_text(json.dumps(result, indent=2))
    return result


NOTE = """Same tables both times: the demo's (`icetide demo`: `demo.events` partitioned by day with 4
partitions, its dead letters, health history and maintenance log), JDBC catalog on SQLite, local
warehouse, the demo's broker running (Kafka lag is computed). "before" is main at `bbd99fe`
(every command built a SparkSession); "after" reads through PyIceberg. `report` ran with
`--no-collect` in both (the old default collected through Spark first). About 1 s of each "after"
run is Python importing PyIceberg, PyArrow and SQLAlchemy; the catalog reads take 0.2-0.4 s."""


def compare(before: str, after: str) -> str:
    b = json.loads((RESULTS / f"{before}.json").read_text())
    a = json.loads((RESULTS / f"{after}.json").read_text())
    lines = [f"# Read-only command latency: {before} vs {after}", "",
             f"Machine: {a['machine']}. Wall clock of a fresh `icetide` process on the demo's tables, median of "
             f"{len(b['commands']['status']['runs'])} ({before}) and {len(a['commands']['status']['runs'])} "
             f"({after}) runs; every run is in the JSON files.", "",
             f"| command | {before} (s) | {after} (s) | {before} ÷ {after} |", "|---|---|---|---|"]
    for name in COMMANDS:
        x, y = b["commands"][name]["median"], a["commands"][name]["median"]
        lines.append(f"| `icetide {name}` | {x:.2f} | {y:.2f} | {x / y:.1f}× |")
    text = "\n".join(lines) + "\n\n" + NOTE + "\n"
    (RESULTS / "results.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", default="after")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--only", action="append", help="Measure only this command (repeatable); keep the others.")
    args = ap.parse_args()
    if args.compare:
        print(compare(*args.compare))
    else:
        measure(args.label, args.runs, args.only)


if __name__ == "__main__":
    main()
