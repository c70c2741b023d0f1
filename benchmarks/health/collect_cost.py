"""Health collection cost on a table with >= 20,000 data files and >= 2,000 snapshots.

Builds the table from real Parquet files: 20,000 small files written by Spark into a staging table
(20 daily partitions), then committed to the measured table in 2,000 fast appends of 10 files each
through the Iceberg Java API (what a stream's commits look like, without waiting for 2,000 jobs),
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
    from icetide.lake.readers import open_reader
    from icetide.spark import build_session

    work = Path(tempfile.mkdtemp(prefix="icetide-hc-"))
    cfg_path = work / "p.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": "hc", "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ["unused"]},
        "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 'catalog.db'}", "warehouse": str(work / "wh")},
        "target": {"table": "hc.big"}, "spark": {"master": "local[2]"}}))
    cfg = load_config(cfg_path)
    spark = build_session(cfg)
    t = "icetide.hc.big"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS icetide.hc")
    ddl = ("(id BIGINT, day DATE, v STRING) USING iceberg PARTITIONED BY (day) TBLPROPERTIES ("
           "'write.distribution-mode'='none', 'commit.manifest-merge.enabled'='false', "
           "'write.metadata.delete-after-commit.enabled'='true', 'write.metadata.previous-versions-max'='10')")
    spark.sql(f"CREATE TABLE icetide.hc.staging {ddl}")
    spark.sql(f"CREATE TABLE {t} {ddl}")
    started = time.monotonic()
    # 1) Real Parquet files, written in a few large jobs (20 partitions, equal share each).
    total_files = args.commits * args.files_per_commit
    per_job = 1000
    for j in range(max(1, total_files // per_job)):
        # per_job tasks of 5 consecutive ids, all of one day: exactly one file per task
        first = j * per_job * 5
        (spark.range(first, first + per_job * 5, 1, per_job).withColumn("v", F.lit("x" * 40))
         .withColumn("day", F.date_add(F.lit("2026-11-01").cast("date"), ((F.col("id") / 5).cast("int") % 20)))
         .select("id", "day", "v").writeTo("icetide.hc.staging").append())
    # 2) The same files, committed to the measured table in many small fast appends (as a stream would).
    jvm = spark._jvm
    assert jvm is not None
    util = jvm.org.apache.iceberg.spark.Spark3Util
    staging = util.loadIcebergTable(spark._jsparkSession, "icetide.hc.staging")
    target = util.loadIcebergTable(spark._jsparkSession, t)
    files = []
    tasks = staging.newScan().planFiles()
    it = tasks.iterator()
    while it.hasNext():
        files.append(it.next().file())
    tasks.close()
    assert len(files) >= total_files * 0.99, len(files)
    for c in range(args.commits):
        append = target.newFastAppend()
        for f in files[c * args.files_per_commit:(c + 1) * args.files_per_commit]:
            append.appendFile(f)
        append.commit()
        if c % 500 == 0:
            print(f"commit {c} ({time.monotonic() - started:.0f}s)", flush=True)
    spark.sql("REFRESH TABLE " + t)
    build_s = time.monotonic() - started

    reader = open_reader(cfg, spark)  # the Spark backend: this benchmark measures Spark's input bytes
    spark.sparkContext.setJobGroup("icetide-health", "health collection")
    timings = []
    for _ in range(3):
        s = time.monotonic()
        h = collect(reader, "hc.big")
        timings.append(time.monotonic() - s)
    input_bytes = _input_bytes(spark, "icetide-health")
    data_bytes = h.data_bytes
    # the measured table references the staging table's files
    location = spark.sql("DESCRIBE TABLE EXTENDED icetide.hc.staging").where("col_name = 'Location'").first()[1]
    data_dir = Path(location.removeprefix("file:")) / "data"
    shutil.move(str(data_dir), str(work / "moved-data"))
    s = time.monotonic()
    without = collect(reader, "hc.big")
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
