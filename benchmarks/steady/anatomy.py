"""Where a query's time goes, per arm, after a steady run: loading the table's metadata, planning
the scan (manifests, delete files), reading. PyIceberg only (no JVM in the timings), idle machine.

The compacted copies are rebuilt from the unmaintained tables' final state first, so all three arms
hold the same rows.

    .venv/bin/python -m benchmarks.steady.anatomy [WORKDIR]   # default: the newest steady run

Writes benchmarks/steady/results/anatomy.md (and prints it).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo

from benchmarks.common import best_of
from benchmarks.steady import measure
from benchmarks.steady.load import ARMS
from benchmarks.steady.run import FAMILIES, HERE
from icetide import paths


def newest_run() -> Path:
    runs = sorted((paths.home() / "bench").glob("steady-*"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise SystemExit("no steady run under ~/.cache/icetide/bench; pass its directory")
    return runs[-1]


def scans(family: str, key: int) -> dict[str, tuple[BooleanExpression, tuple[str, ...]]]:
    if family == "cdc":
        return {"point": (EqualTo("id", key), ("*",)), "aggregate": (AlwaysTrue(), ("balance",))}
    return {"day_by_type": (AlwaysTrue(), ("event_type", "amount"))}


def ms(fn: Callable[[], Any]) -> float:
    return round(best_of(fn, 5) * 1000, 1)


def anatomy(cat: SqlCatalog, family: str, arm: str, key: int) -> list[dict[str, Any]]:
    ident = measure.table_of(family, arm)
    table = cat.load_table(ident)
    snap = table.current_snapshot()
    meta_bytes = os.path.getsize(table.metadata_location.removeprefix("file://"))
    rows = []
    for name, (flt, cols) in scans(family, key).items():
        tasks = list(table.scan(row_filter=flt, selected_fields=cols).plan_files())
        rows.append({
            "query": f"{family}.{name}", "arm": arm, "tasks": len(tasks),
            "delete_refs": sum(len(t.delete_files) for t in tasks),
            "snapshots": len(table.metadata.snapshots), "metadata_kib": meta_bytes // 1024,
            "manifests": len(snap.manifests(table.io)) if snap else 0,
            "load_ms": ms(lambda: cat.load_table(ident)),
            "plan_ms": ms(lambda f=flt, c=cols: list(table.scan(row_filter=f, selected_fields=c).plan_files())),
            "scan_ms": ms(lambda f=flt, c=cols: table.scan(row_filter=f, selected_fields=c).to_arrow()),
        })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir", type=Path, nargs="?")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "anatomy.md")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    print(f"seed {args.seed}", flush=True)
    work = args.workdir or newest_run()

    from icetide.config import load_config
    from icetide.spark import build_session

    spark = build_session(load_config(work / "steady.yaml"))
    for fam in FAMILIES:
        measure.build_compacted_copy(spark, fam)
    spark.stop()
    cat = SqlCatalog(measure.CAT, uri=f"sqlite:///{work / 'catalog.db'}", warehouse=f"file://{work / 'warehouse'}")
    key = random.Random(args.seed).randrange(1000)
    rows = [r for fam in FAMILIES for arm in (*ARMS, "compact") for r in anatomy(cat, fam, arm, key)]
    cols = list(rows[0])
    lines = ["# Where PyIceberg's query time goes, per arm, at the end of the steady run", "",
             f"Run directory `{work.name}`, idle machine, best of 5; the compacted copies rebuilt from the "
             "unmaintained tables' final state. load: `load_table` (parse metadata.json); plan: `plan_files` "
             "(manifests, delete index); scan: `to_arrow`, planning included.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
