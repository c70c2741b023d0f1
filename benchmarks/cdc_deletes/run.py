"""Delete files of a merge-on-read CDC table between compactions: file-scoped position deletes
(``write.delete.granularity=file``, Iceberg's default since 1.8: one delete file per data file,
replaced by the next MERGE that deletes from it) against partition-scoped ones (one per MERGE),
which icetide's hot step folds into one per partition with ``rewrite_position_delete_files``.

Both tables take the same MERGEs (``--batch`` updates of random keys out of ``--keys``, seeded) and
the same maintenance every ``--per-cycle`` commits (as icetide's hot step: small data files merged
with deletes applied past 30 %, then the partition's delete files rewritten). After every commit:
data files, delete files, and the query time through PyIceberg (best of 3) of a point lookup, a
1,000-key range and a full aggregate; Spark's aggregate too.

    .venv/bin/python -m benchmarks.cdc_deletes.run [--cycles 5] [--per-cycle 6]

Writes benchmarks/cdc_deletes/results/results.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan

from benchmarks.common import best_of, scratch_session
from benchmarks.ingest.run import machine

HERE = Path(__file__).resolve().parent
CAT, NS = "icetide", "cdcd"
GRANULARITIES = ("file", "partition")


def create(spark: Any, name: str, granularity: str, keys: int) -> str:
    t = f"{CAT}.{NS}.{name}"
    modes = ", ".join(f"'write.{op}.mode'='merge-on-read'" for op in ("merge", "update", "delete"))
    spark.sql(f"""CREATE TABLE {t} (id BIGINT, name STRING, balance DOUBLE) USING iceberg TBLPROPERTIES (
        'format-version'='2', {modes}, 'write.delete.granularity'='{granularity}',
        'commit.manifest.min-count-to-merge'='2', 'commit.manifest.target-size-bytes'='262144',
        'write.distribution-mode'='none')""")
    spark.range(keys).selectExpr("id", "concat('n', id) AS name", "rand(7) * 1e4 AS balance") \
        .coalesce(1).writeTo(t).append()
    return t


def merge(spark: Any, t: str, ids: list[int], version: int) -> None:
    spark.createDataFrame([(i, f"n{i}", float((i * 31 + version) % 10_000)) for i in ids],
                          "id BIGINT, name STRING, balance DOUBLE").createOrReplaceTempView("changes")
    spark.sql(f"""MERGE INTO {t} t USING changes c ON t.id = c.id
        WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *""")


def maintain(spark: Any, t: str) -> int:
    """icetide's hot step on an unpartitioned table: bytes rewritten."""
    opts = {"min-input-files": "2", "min-file-size-bytes": str(256 * 1024), "delete-ratio-threshold": "0.3",
            "delete-file-threshold": "10", "use-starting-sequence-number": "true",
            "target-file-size-bytes": str(128 * 1024 * 1024)}
    pairs = ", ".join(f"'{k}', '{v}'" for k, v in opts.items())
    r = spark.sql(f"CALL {CAT}.system.rewrite_data_files(table => '{t}', options => map({pairs}))").first()
    d = spark.sql(f"CALL {CAT}.system.rewrite_position_delete_files(table => '{t}', "
                  "options => map('rewrite-all', 'true'))").first()
    return int(r["rewritten_bytes_count"]) + int(d["rewritten_bytes_count"])


def measure(spark: Any, py: SqlCatalog, t: str, rng: random.Random, keys: int) -> dict[str, float]:
    ident = t.removeprefix(f"{CAT}.")
    files = spark.sql(f"SELECT content, count(*) FROM {t}.files GROUP BY content").collect()
    counts = {int(r[0]): int(r[1]) for r in files}
    lo = rng.randrange(keys - 1000)

    def point() -> None:
        py.load_table(ident).scan(row_filter=EqualTo("id", lo)).to_arrow()

    def rng_q() -> None:
        py.load_table(ident).scan(row_filter=And(GreaterThanOrEqual("id", lo), LessThan("id", lo + 1000)),
                                  selected_fields=("balance",)).to_arrow()

    def agg() -> None:
        pc.sum(py.load_table(ident).scan(selected_fields=("balance",)).to_arrow()["balance"])

    return {"data_files": counts.get(0, 0), "delete_files": counts.get(1, 0),
            "point_ms": best_of(point) * 1000, "range_ms": best_of(rng_q) * 1000, "aggregate_ms": best_of(agg) * 1000,
            "spark_aggregate_ms": best_of(lambda: spark.sql(f"SELECT sum(balance) FROM {t}").collect()) * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=400, help="updates per MERGE")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--per-cycle", type=int, default=6, help="MERGE commits between maintenance runs")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--out", type=Path, default=HERE / "results", help="Folder of results.md")
    args = ap.parse_args()
    print(f"seed {args.seed}", flush=True)
    spark, work = scratch_session("cdc-deletes", NS)
    py = SqlCatalog(CAT, uri=f"sqlite:///{work / 'catalog.db'}", warehouse=f"file://{work / 'warehouse'}")
    tables = {g: create(spark, f"t_{g}", g, args.keys) for g in GRANULARITIES}
    samples: dict[str, list[dict[str, float]]] = {g: [] for g in GRANULARITIES}
    rewritten = dict.fromkeys(GRANULARITIES, 0)
    rng, qrng = random.Random(args.seed), random.Random(args.seed + 1)
    version = 0
    for _ in range(args.cycles):
        for _ in range(args.per_cycle):
            version += 1
            ids = rng.sample(range(args.keys), args.batch)
            for g in GRANULARITIES:  # the same changes, the same query keys, alternating nothing else
                merge(spark, tables[g], ids, version)
            key_state = qrng.getstate()
            for g in GRANULARITIES:
                qrng.setstate(key_state)
                samples[g].append(measure(spark, py, tables[g], qrng, args.keys))
        for g in GRANULARITIES:
            rewritten[g] += maintain(spark, tables[g])
    rows = {g: spark.sql(f"SELECT count(*), round(sum(balance), 2) FROM {tables[g]}").first() for g in GRANULARITIES}
    assert rows["file"] == rows["partition"], rows  # the same table state either way
    write(args, samples, rewritten, {g: spark.sql(f"SELECT sum(file_size_in_bytes) FROM {tables[g]}.files")
                                     .first()[0] for g in GRANULARITIES})


def write(args: argparse.Namespace, samples: dict[str, list[dict[str, float]]], rewritten: dict[str, int],
          live: dict[str, int]) -> None:
    m = machine()
    keys = ("data_files", "delete_files", "point_ms", "range_ms", "aggregate_ms", "spark_aggregate_ms")
    lines = ["# CDC delete files between compactions: file-scoped vs partition-scoped position deletes", "",
             f"Machine: {m['cpu']}, {m['cores']} cores; {args.cycles} cycles of {args.per_cycle} MERGEs of "
             f"{args.batch} updates over {args.keys:,} keys (seed {args.seed}); after each cycle icetide's hot step "
             "(small data files merged, deletes applied past 30 %, delete files rewritten). Figures after every "
             "MERGE: mean (max). Query times: PyIceberg best of 3 unless named.", "",
             "| granularity | " + " | ".join(keys) + " | bytes rewritten by maintenance |",
             "|---|" + "---|" * (len(keys) + 1)]
    for g, ss in samples.items():
        cells = [f"{statistics.mean(s[k] for s in ss):.1f} ({max(s[k] for s in ss):.1f})" for k in keys]
        lines.append(f"| {g} | " + " | ".join(cells) + f" | {rewritten[g]:,} |")
    lines += ["", f"Live bytes at the end: {live}."]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
