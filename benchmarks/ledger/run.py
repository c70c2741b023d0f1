"""What the exactly-once ledger costs in table metadata, as partitions and commits grow.

Side by side in one run, on one JDBC/SQLite catalog and local warehouse, three arms of ``--commits``
appends each (one Iceberg snapshot per commit, through Iceberg's Java API, with a tiny data file so
only metadata is measured), every batch covering ``--partitions`` partitions of one topic:

- ``vanilla``: no summary properties (what a plain Spark+Iceberg sink carries);
- ``legacy``: icetide before this change: the batch's ranges of every partition *and* the cumulative
  watermark of every partition, as plain JSON, in every snapshot;
- ``icetide``: the batch's non-empty ranges only, deflated (see icetide.lake.offsets).

Measured: metadata.json size and commit time every ``--every`` commits, and the time icetide takes
to read a table's watermark at the end (with and without a recent mirror).

    .venv/bin/python -m benchmarks.ledger.run --partitions 1000 --commits 1000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results"


def legacy_properties(run: str, batch: int, ranges: dict[tuple[str, int], tuple[int, int]],
                      watermark: dict[tuple[str, int], int]) -> dict[str, str]:
    """The summary entries icetide wrote before the ledger carried only the batch (for comparison)."""
    def enc(d: dict[tuple[str, int], Any]) -> str:
        out: dict[str, dict[str, Any]] = {}
        for (t, p), v in sorted(d.items()):
            out.setdefault(t, {})[str(p)] = list(v) if isinstance(v, tuple) else v
        return json.dumps(out, separators=(",", ":"), sort_keys=True)
    return {"icetide.pipeline": "bench", "icetide.run": run, "icetide.batch": str(batch),
            "icetide.batch-offsets": enc(ranges), "icetide.watermark": enc(watermark)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    print(f"seed {args.seed}")

    from icetide.config.models import PipelineConfig
    from icetide.lake.offsets import BatchRanges, commit_properties, read_watermark, set_property
    from icetide.spark import build_session

    work = Path(tempfile.mkdtemp(prefix="icetide-ledger-"))
    cfg = PipelineConfig.model_validate({
        "name": "bench",
        "source": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
        "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 'catalog.db'}", "warehouse": str(work / "wh")},
        "target": {"table": "bench.unused"},
        "spark": {"master": "local[2]"},
    })
    spark = build_session(cfg)
    jvm: Any = spark._jvm
    spark.sql("CREATE NAMESPACE IF NOT EXISTS icetide.bench")
    rng = random.Random(args.seed)
    results: dict[str, Any] = {"machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
                               "partitions": args.partitions, "commits": args.commits, "arms": {}}
    for arm in ("vanilla", "legacy", "icetide"):
        name = f"icetide.bench.ledger_{arm}"
        spark.sql(f"CREATE TABLE {name} (id BIGINT) USING iceberg")
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
        ends = {("t", p): rng.randrange(10**6, 10**9) for p in range(args.partitions)}
        samples = []
        window: list[float] = []
        for i in range(args.commits):
            ranges = {}
            for tp, end in ends.items():
                step = rng.randrange(1, 500)
                ranges[tp] = (end, end + step)
                ends[tp] = end + step
            props: dict[str, str] = {}
            if arm == "legacy":
                props = legacy_properties("run1", i, ranges, dict(ends))
            elif arm == "icetide":
                props = commit_properties("bench", "run1", i, BatchRanges(ranges))
            f = (jvm.org.apache.iceberg.DataFiles.builder(table.spec()).withPath(str(work / f"{arm}-{i}.parquet"))
                 .withFileSizeInBytes(100).withRecordCount(1).withFormat("PARQUET").build())
            append = table.newFastAppend().appendFile(f)
            for k, v in props.items():
                append = append.set(k, v)
            t0 = time.perf_counter()
            append.commit()
            window.append(time.perf_counter() - t0)
            if (i + 1) % args.every == 0:
                location = table.operations().current().metadataFileLocation().removeprefix("file:")
                samples.append({"commits": i + 1, "metadata_json_bytes": os.path.getsize(location),
                                "commit_ms_mean": round(1000 * sum(window) / len(window), 1)})
                window = []
                print(arm, samples[-1], flush=True)
        arm_out: dict[str, Any] = {"samples": samples,
                                   "summary_bytes_per_snapshot": sum(len(k) + len(v) for k, v in props.items())}
        if arm != "vanilla":
            spark.catalog.refreshTable(name)
            t0 = time.perf_counter()
            wm = read_watermark(spark, name, "bench")
            arm_out["read_watermark_s_no_mirror"] = round(time.perf_counter() - t0, 2)
            assert wm is not None and wm.offsets == ends, f"{arm}: the ledger does not read back exactly"
            if arm == "icetide":
                set_property(spark, name, "bench", wm)
                spark.catalog.refreshTable(name)
                t0 = time.perf_counter()
                again = read_watermark(spark, name, "bench")
                arm_out["read_watermark_s_after_mirror"] = round(time.perf_counter() - t0, 2)
                assert again is not None and again.offsets == ends
        results["arms"][arm] = arm_out
    OUT.mkdir(exist_ok=True)
    (OUT / "ledger.json").write_text(json.dumps(results, indent=1))
    report(results)
    spark.stop()


def report(r: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for arm, a in r["arms"].items():
        xs = [s["commits"] for s in a["samples"]]
        ax[0].plot(xs, [s["metadata_json_bytes"] / 1e6 for s in a["samples"]], marker="o", label=arm)
        ax[1].plot(xs, [s["commit_ms_mean"] for s in a["samples"]], marker="o", label=arm)
    ax[0].set(xlabel="snapshots", ylabel="metadata.json (MB)", title=f"{r['partitions']} partitions per batch")
    ax[1].set(xlabel="snapshots", ylabel="commit time (ms, mean of the window)")
    for a in ax:
        a.legend()
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT / "ledger.png", dpi=110)
    last = {arm: a["samples"][-1] for arm, a in r["arms"].items()}
    v = last["vanilla"]
    lines = [f"# Ledger metadata: {r['partitions']} partitions per batch, {r['commits']} commits", "",
             f"Machine: {r['machine']}. Script: `python -m benchmarks.ledger.run --partitions {r['partitions']} "
             f"--commits {r['commits']}`.", "",
             "| arm | summary bytes / snapshot | metadata.json at the end | ÷ vanilla | commit ms (last window) "
             "| ÷ vanilla | read watermark (s) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for arm, a in r["arms"].items():
        s = last[arm]
        read = a.get("read_watermark_s_no_mirror", "")
        if "read_watermark_s_after_mirror" in a:
            read = f"{read} (after a mirror: {a['read_watermark_s_after_mirror']})"
        lines.append(f"| {arm} | {a['summary_bytes_per_snapshot']:,} | {s['metadata_json_bytes'] / 1e6:.2f} MB | "
                     f"{s['metadata_json_bytes'] / v['metadata_json_bytes']:.1f}× | {s['commit_ms_mean']} | "
                     f"{s['commit_ms_mean'] / v['commit_ms_mean']:.1f}× | {read} |")
    lines += ["", "![metadata and commit time](ledger.png)", ""]
    (OUT / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
