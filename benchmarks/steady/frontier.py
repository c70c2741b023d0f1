"""How few files can a hot partition keep for a given write amplification? The planner's own tier rule
(:func:`icetide.maintenance.planner.tier_merge`) replayed over one partition's commits, for every
fanout, beside "merge everything every cycle"; then the query-time ratio each layout implies, from
the per-file cost fitted on a steady run (``ms = a + b · files``, see report.per_file_cost).

    .venv/bin/python -m benchmarks.steady.frontier [benchmarks/steady/results] [--commits 180] [--per-cycle 6]

Writes frontier.md beside steady.json. A model, not a measurement: it shows which targets can hold
together at this run's sizes, whatever the implementation.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

from icetide.maintenance.planner import tier_merge

TARGET = 128 * 1024 * 1024
SHRINK = 0.85  # merged output ÷ input: larger files compress better (measured 0.8-0.9 in the runs)


def replay(commits: int, commit_bytes: int, per_cycle: int, fanout: int | None,
           seed: int = 1) -> tuple[float, int, float]:
    """Average and largest file count after each commit, and bytes rewritten ÷ bytes committed.
    ``fanout`` None: every cycle merges the whole partition into one file."""
    rng = random.Random(seed)
    files: list[int] = []
    counts: list[int] = []
    rewritten = committed = 0
    for i in range(commits):
        size = int(commit_bytes * rng.uniform(0.7, 1.3))
        files.append(size)
        committed += size
        counts.append(len(files))
        if (i + 1) % per_cycle:
            continue
        while len(files) > 1:
            if fanout is None:
                below = TARGET
            else:
                hist: dict[int, int] = {}
                for f in files:
                    hist[int(math.log2(f))] = hist.get(int(math.log2(f)), 0) + 1
                m = tier_merge(hist, TARGET, fanout)
                if m is None or m.files < 2:
                    break
                below = m.below_bytes
            merged = [f for f in files if f < below]
            rewritten += sum(merged)
            files = [f for f in files if f >= below] + [int(sum(merged) * SHRINK)]
            if fanout is None:
                break
    return sum(counts) / len(counts), max(counts), rewritten / committed


def fit(samples: list[dict], key: str) -> tuple[float, float]:
    """Least-squares ms = a + b · files for one family.engine.query over every arm and sample."""
    fam, eng, q = key.split(".")
    pts = []
    for s in samples:
        for arm in ("plain", "ice", "compact"):
            a = s["families"][fam]["arms"][arm]
            pts.append((a["layout"]["data_files"] + a["layout"]["delete_files"], a["queries"][f"{eng}.{q}"] * 1000))
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return my - b * mx, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, nargs="?", default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--commits", type=int, default=0, help="commits into the partition (default: from the run)")
    ap.add_argument("--per-cycle", type=int, default=0, help="commits between maintenance cycles (default: run)")
    args = ap.parse_args()
    run = json.loads((args.results / "steady.json").read_text())
    trigger_s = float(run["trigger"].split()[0])
    commits = args.commits or int(run["minutes"] * 60 / trigger_s)
    per_cycle = args.per_cycle or max(1, int(run.get("maintain_every_s", 60) / trigger_s))
    wa = run.get("end", {}).get("write_amplification", {}).get("day", {})
    ingested = wa.get("ingested_bytes") or 0
    commit_bytes = int(ingested / commits) if ingested else 40_000
    queries = ["day.pyiceberg.day_by_type", "day.pyiceberg.last_hour", "day.spark.day_by_type"]
    fits = {q: fit(run["samples"], q) for q in queries}
    lines = [
        "# Files against write amplification in one hot partition (model)",
        "",
        f"The planner's tier rule replayed over {commits} commits of ~{commit_bytes / 1024:.0f} KiB (this run's "
        f"day partition), a maintenance cycle every {per_cycle} commits. Query ratio implied for a compacted "
        "copy of 1 file, from the per-file cost fitted on this run (ms = a + b · files):",
        "",
        ", ".join(f"{q}: a = {a:.0f} ms, b = {b:.1f} ms/file" for q, (a, b) in fits.items()) + ".",
        "",
        "| layout rule | avg files | max files | write amplification | " + " | ".join(
            f"ratio {q} (avg files)" for q in queries) + " |",
        "|---|---|---|---|" + "---|" * len(queries),
    ]
    for fanout in (2, 4, 8, 16, 32, None):
        avg, top, amp = replay(commits, commit_bytes, per_cycle, fanout)
        name = f"tiers, fanout {fanout}" if fanout else "merge everything every cycle"
        ratios = [(a + b * avg) / (a + b) for a, b in fits.values()]
        lines.append(f"| {name} | {avg:.1f} | {top} | {amp:.2f} | " + " | ".join(f"{r:.2f}" for r in ratios) + " |")
    allowed = {q: 1 + 0.25 * (a + b) / b for q, (a, b) in fits.items()}
    lines += ["", "Files a query can afford at ratio ≤ 1.25: " + ", ".join(
        f"{q} {n:.1f}" for q, n in allowed.items()) + "."]
    (args.results / "frontier.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
