"""Snapshot expiry: the ``expire_snapshots`` procedure against Iceberg's ``ExpireSnapshots`` in the
Spark driver (icetide's ``snapshot_expiry: driver``), on identical tables.

Each round builds two tables the same way (``--commits`` two-row appends, a compaction every 10,
manifests merged at 8, as a streaming table maintained by icetide looks), expires each down to the
newest 20 snapshots, one per method, alternating the order. Measured: wall seconds and CPU seconds of
this process and its JVM; snapshots and data files on disk after.

    .venv/bin/python -m benchmarks.expiry.run [--rounds 3] [--commits 60]

Writes benchmarks/expiry/results/results.md.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.common import scratch_session
from benchmarks.ingest.run import machine
from benchmarks.steady.load import tree_cpu_seconds

HERE = Path(__file__).resolve().parent
CAT = "icetide"


def make(spark: Any, name: str, commits: int) -> None:
    spark.sql(f"CREATE TABLE {CAT}.xp.{name} (id BIGINT, v STRING) USING iceberg "
              "TBLPROPERTIES ('commit.manifest.min-count-to-merge'='8')")
    for i in range(commits):
        spark.sql(f"INSERT INTO {CAT}.xp.{name} VALUES ({i}, 'x{i}'), ({i + 1000}, 'y')")
        if i % 10 == 9:
            spark.sql(f"CALL {CAT}.system.rewrite_data_files(table => 'xp.{name}', "
                      "options => map('min-input-files','2'))")


def expire(spark: Any, name: str, how: str, work: Path) -> dict[str, Any]:
    from icetide.lake.tables import expire_in_driver

    t = f"{CAT}.xp.{name}"
    cutoff = spark.sql(f"SELECT committed_at FROM {t}.snapshots ORDER BY committed_at DESC").collect()[19][0]
    before = spark.sql(f"SELECT count(*) FROM {t}.snapshots").first()[0]
    cpu, wall = tree_cpu_seconds(os.getpid()), time.monotonic()
    if how == "procedure":
        spark.sql(f"CALL {CAT}.system.expire_snapshots(table => 'xp.{name}', "
                  f"older_than => TIMESTAMP '{cutoff}', retain_last => 20)").collect()
    else:
        expire_in_driver(spark, t, int(cutoff.timestamp() * 1000), 20)
    cpu, wall = tree_cpu_seconds(os.getpid()) - cpu, time.monotonic() - wall
    spark.sql(f"REFRESH TABLE {t}")
    after = spark.sql(f"SELECT count(*) FROM {t}.snapshots").first()[0]
    files = sum(len(fs) for _, _, fs in os.walk(work / "warehouse" / "xp" / name / "data"))
    return {"how": how, "snapshots": f"{before} → {after}", "data_files_on_disk": files,
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commits", type=int, default=60)
    ap.add_argument("--out", type=Path, default=HERE / "results", help="Folder of results.md")
    args = ap.parse_args()
    spark, work = scratch_session("expiry", "xp")
    rows = []
    for r in range(args.rounds):
        for how in (("procedure", "driver") if r % 2 == 0 else ("driver", "procedure")):
            name = f"t{r}_{how}"
            make(spark, name, args.commits)
            rows.append({"round": r + 1, **expire(spark, name, how, work)})
            print(rows[-1], flush=True)
    m = machine()
    cols = list(rows[0])
    lines = ["# Snapshot expiry: the procedure vs Iceberg's ExpireSnapshots in the driver", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB. Spark local[2]; tables of "
             f"{args.commits} two-row appends with a compaction every 10; expired down to the newest 20.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(x[c]) for c in cols) + " |" for x in rows]
    for how in ("procedure", "driver"):
        mine = [x for x in rows if x["how"] == how]
        lines.append(f"\n{how}: best {min(x['wall_s'] for x in mine)} s wall, "
                     f"{min(x['cpu_s'] for x in mine)} CPU-s; worst {max(x['wall_s'] for x in mine)} s, "
                     f"{max(x['cpu_s'] for x in mine)} CPU-s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
