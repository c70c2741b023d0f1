"""Health collection cost on a table with >= 20,000 data files and >= 2,000 snapshots.

Builds the table with real writes (2,000 commits of 10 small files each, 20 daily partitions),
then times `icetide.health.collector.collect` and records Spark's task input metrics during the
collection. Data files are Parquet; the metadata tables read Avro manifests. The run also times the
same collection with every data file moved away, to show the figures do not depend on them.

    .venv/bin/python -m benchmarks.health.collect_cost [--commits 2000] [--files-per-commit 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
os.environ.setdefault("ICETIDE_HOME", str(REPO / ".icetide"))


def _input_bytes(spark, group: str) -> int:  # type: ignore[no-untyped-def]
    """Task input bytes of every stage of the job group, from Spark's status REST API."""
    import urllib.request

    base = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"

    def get(path: str):  # type: ignore[no-untyped-def]
        with urllib.request.urlopen(base + path, timeout=30) as r:
            return json.load(r)

    stage_ids = {sid for j in get("/jobs") if j.get("jobGroup") == group for sid in j["stageIds"]}
    return sum(att.get("inputBytes", 0) for sid in stage_ids for att in get(f"/stages/{sid}"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--files-per-commit", type=int, default=10)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args()

    from pyspark.sql import functions as F

    from icetide.config import load_config
    from icetide.health.collector import collect
    from icetide.spark import build_session

    work = Path(tempfile.mkdtemp(prefix="icetide-hc-"))
    cfg_path = work / "p.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": "hc", "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ["unused"]},
        "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 'catalog.db'}", "warehouse": str(work / "wh")},
        "target": {"table": "hc.big"}, "spark": {"master": "local[2]"}}))
    spark = build_session(load_config(cfg_path))
    t = "icetide.hc.big"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS icetide.hc")
    spark.sql(f"CREATE TABLE {t} (id BIGINT, day DATE, v STRING) USING iceberg PARTITIONED BY (day) "
              "TBLPROPERTIES ('write.distribution-mode'='none', 'commit.manifest-merge.enabled'='false', "
              "'write.metadata.delete-after-commit.enabled'='true', 'write.metadata.previous-versions-max'='10')")
    base = spark.range(args.files_per_commit * 5).withColumn("v", F.lit("x" * 40))
    started = time.monotonic()
    for c in range(args.commits):
        df = (base.withColumn("day", F.date_add(F.lit("2026-11-01").cast("date"), F.lit(c % 20)))
              .select("id", "day", "v").repartition(args.files_per_commit))
        df.writeTo(t).append()
        if c % 200 == 0:
            print(f"commit {c} ({time.monotonic() - started:.0f}s)", flush=True)
    build_s = time.monotonic() - started

    spark.sparkContext.setJobGroup("icetide-health", "health collection")
    timings = []
    for _ in range(3):
        s = time.monotonic()
        h = collect(spark, t)
        timings.append(time.monotonic() - s)
    input_bytes = _input_bytes(spark, "icetide-health")
    data_bytes = h.data_bytes
    location = spark.sql(f"DESCRIBE TABLE EXTENDED {t}").where("col_name = 'Location'").first()[1]
    data_dir = Path(location.removeprefix("file:")) / "data"
    shutil.move(str(data_dir), str(work / "moved-data"))
    s = time.monotonic()
    without = collect(spark, t)
    without_s = time.monotonic() - s
    same = without.summary()["data_files"] == h.data_files and without.partition_rows() == h.partition_rows()
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    result = {
        "machine": {"cpu": cpu, "cores": os.cpu_count(), "spark_master": "local[2]"},
        "data_files": h.data_files, "snapshots": h.snapshots, "manifests": h.manifests,
        "partitions": len(h.partitions), "data_bytes": data_bytes, "build_seconds": round(build_s, 1),
        "collect_seconds": [round(x, 3) for x in timings], "collect_seconds_best": round(min(timings), 3),
        "spark_input_bytes_during_3_collections": input_bytes,
        "collect_seconds_with_data_files_moved_away": round(without_s, 3),
        "figures_identical_without_data_files": same,
    }
    print(json.dumps(result, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "collect_cost.json").write_text(json.dumps(result, indent=2))
    (args.out / "collect_cost.md").write_text(
        "# Health collection cost\n\n"
        f"Machine: {cpu}, {os.cpu_count()} cores; Spark local[2].\n\n"
        f"Table: {h.data_files:,} data files ({data_bytes:,} bytes), {h.snapshots:,} snapshots, "
        f"{h.manifests:,} manifests, {len(h.partitions)} partitions; built in {build_s:.0f} s.\n\n"
        "| measurement | value |\n|---|---|\n"
        f"| collection time (best of 3) | {min(timings):.2f} s |\n"
        f"| collection times | {', '.join(f'{x:.2f} s' for x in timings)} |\n"
        f"| Spark input bytes during the 3 collections (manifests + metadata) | {input_bytes:,} |\n"
        f"| data bytes in the table | {data_bytes:,} |\n"
        f"| collection with every data file moved away | {without_s:.2f} s, figures identical: {same} |\n"
    )
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
