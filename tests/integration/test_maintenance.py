"""The maintenance control plane on real tables: plan, hot-partition gating, execution, priority."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml

from icetide.config import load_config
from icetide.maintenance.cycle import plan_all, run_cycle
from icetide.maintenance.partitions import PartitionField, where
from tests.fixtures.stack import icetide_cli, pipeline_dict, unique


def files_by_day(spark, table: str) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    out: dict[str, list[str]] = {}
    for r in spark.sql(f"SELECT to_json(partition) p, file_path FROM {table}.files WHERE content = 0").collect():
        out.setdefault(json.loads(r["p"])["ts_day"], []).append(r["file_path"])
    return {k: sorted(v) for k, v in out.items()}


def checksum(spark, table: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    r = spark.sql(f"SELECT count(*) n, sum(hash(id, ts, v)) h FROM {table}").first()
    return int(r["n"]), int(r["h"])


def checksum_of(spark, table: str, where: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    r = spark.sql(f"SELECT count(*) n, sum(hash(id, ts, v)) h FROM {table} WHERE {where}").first()
    return int(r["n"]), int(r["h"])


def make_cfg(kafka, lake, tmp_path: Path, ns: str, **maintenance) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / f"m_{unique('c')}.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict(
        kafka, lake, tmp_path, "unused", f"{ns}.unused",
        health={"namespaces": [ns], "history_table": f"{ns}.health"},
        maintenance={"log_table": f"{ns}.maintenance", **maintenance})))
    return path


def small_files(spark, table: str, day: str, n: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, TIMESTAMP '{day} 0{i % 10}:00:00', 'v{i}')")


def create(spark, table: str) -> None:  # type: ignore[no-untyped-def]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, ts TIMESTAMP, v STRING) USING iceberg PARTITIONED BY (days(ts)) "
              "TBLPROPERTIES ('format-version'='2')")


def test_full_compaction_never_touches_the_hot_partition(spark, kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns = unique("mt")
    table = f"icetide.{ns}.events"
    create(spark, table)
    small_files(spark, table, "2026-11-01", 8)  # cold
    time.sleep(7)
    small_files(spark, table, "2026-11-25", 8)  # hot: written just now
    # minor compaction of hot partitions off: this test is about the full (cold) compaction alone
    cfg_path = make_cfg(kafka, lake, tmp_path, ns, policy={
        "hot_partition_quiet_seconds": 6,
        "steps": ["expire_snapshots", "rewrite_data_files", "rewrite_position_delete_files", "rewrite_manifests"]})
    cfg = load_config(cfg_path)
    before_files, before_sum = files_by_day(spark, table), checksum(spark, table)

    [p] = plan_all(spark, cfg)
    [step] = [s for s in p.steps if s.action == "rewrite_data_files"]
    assert step.args["where"] == "(ts >= TIMESTAMP '2026-11-01 00:00:00' AND ts < TIMESTAMP '2026-11-02 00:00:00')"
    assert step.figures["small_files"] == 8 and "8 small files (≥ 5)" in step.reason
    assert len(p.skipped) == 1 and p.skipped[0].startswith('{"ts_day":"2026-11-25"}: hot (written ')

    # A stream keeps writing the hot partition while maintenance runs.
    stop = threading.Event()
    streamed: list[int] = []

    def stream() -> None:
        i = 1000
        while not stop.is_set():
            spark.sql(f"INSERT INTO {table} VALUES ({i}, TIMESTAMP '2026-11-25 12:00:00', 's{i}')")
            streamed.append(i)
            i += 1
            time.sleep(0.5)

    writer = threading.Thread(target=stream, daemon=True)
    writer.start()
    try:
        _, records = run_cycle(spark, cfg)
    finally:
        stop.set()
        writer.join(30)
    [rec] = [r for r in records if r.step == "rewrite_data_files"]
    assert (rec.outcome, rec.files_in, rec.files_out) == ("ok", 8, 1)
    after = files_by_day(spark, table)
    assert len(after["2026-11-01"]) == 1
    assert set(before_files["2026-11-25"]) <= set(after["2026-11-25"])  # none of the hot files rewritten
    assert len(after["2026-11-25"]) == 8 + len(streamed)
    n, _ = checksum(spark, table)
    assert n == before_sum[0] + len(streamed)
    assert checksum_of(spark, table, "id < 1000") == before_sum
    log = spark.sql(f"SELECT step, outcome, files_in, files_out, reason FROM icetide.{ns}.maintenance").collect()
    assert [(r["step"], r["outcome"], r["files_in"], r["files_out"]) for r in log] == \
        [("rewrite_data_files", "ok", 8, 1)]

    res = icetide_cli("plan", "-c", str(cfg_path), "--output", "json", timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    [cli_plan] = json.loads(res.stdout)
    # the cold partition is healthy now; the (no longer written) 2026-11-25 partition is what is left
    assert all(s["partitions"] == ['{"ts_day":"2026-11-25"}'] for s in cli_plan["steps"])
    assert cli_plan["steps"] or cli_plan["skipped"][0].startswith('{"ts_day":"2026-11-25"}: hot')


def test_expiry_and_manifest_rewrite_fire_on_thresholds(spark, kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns = unique("mx")
    table = f"icetide.{ns}.events"
    create(spark, table)
    for day in range(1, 4):
        small_files(spark, table, f"2026-10-0{day}", 4)  # 12 commits, 4 files per partition (< min 5)
    time.sleep(2)
    before = checksum(spark, table)
    cfg = load_config(make_cfg(kafka, lake, tmp_path, ns, policy={
        "snapshots_trigger": 10, "snapshot_retain_last": 3, "snapshot_max_age_seconds": 1,
        "manifests_trigger": 10, "hot_partition_quiet_seconds": 1, "snapshot_expiry": "procedure",
        "steps": ["expire_snapshots", "rewrite_manifests"]}))  # this test is about these two thresholds
    [p] = plan_all(spark, cfg)
    assert [s.action for s in p.steps] == ["expire_snapshots", "rewrite_manifests"]
    assert p.steps[0].reason == "12 snapshots > trigger 10; 9 older than the age floor"
    assert p.steps[1].reason == "12 manifests > trigger 10"
    _, records = run_cycle(spark, cfg)
    assert [(r.step, r.outcome) for r in records] == [("expire_snapshots", "ok"), ("rewrite_manifests", "ok")]
    snaps = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]
    manifests = spark.sql(f"SELECT count(*) FROM {table}.manifests").first()[0]
    assert snaps == 4  # 3 kept + the manifest rewrite's own snapshot
    assert manifests < 12
    assert checksum(spark, table) == before


def test_priority_order_and_budget_of_one_rewrite(spark, kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns = unique("mp")
    sizes = {"t1": 6, "t2": 14, "t3": 9, "t4": 20, "t5": 11}
    for name, n in sizes.items():
        create(spark, f"icetide.{ns}.{name}")
        small_files(spark, f"icetide.{ns}.{name}", "2026-09-01", n)
    time.sleep(2)
    cfg = load_config(make_cfg(kafka, lake, tmp_path, ns, policy={"hot_partition_quiet_seconds": 1},
                               rewrites_per_cycle=1))
    plans = plan_all(spark, cfg)
    # documented rule: priority = (100 - score) + boost + waited (20 when never maintained); highest first
    assert [p.priority for p in plans] == sorted((p.priority for p in plans), reverse=True)
    assert all(p.priority == pytest.approx(100 - p.score + 20) for p in plans)
    assert [p.table.split(".")[-1] for p in plans] == ["t4", "t2", "t5", "t3", "t1"]

    _, records = run_cycle(spark, cfg)
    ran = [r.table.split(".")[-1] for r in records if r.step == "rewrite_data_files" and r.outcome == "ok"]
    deferred = [r.table.split(".")[-1] for r in records if r.outcome == "over_budget"]
    assert ran == ["t4"] and deferred == ["t2", "t5", "t3", "t1"]
    # next cycle: t4 is healthy and just maintained; the next most degraded gets its turn
    _, records = run_cycle(spark, cfg)
    assert [r.table.split(".")[-1] for r in records if r.outcome == "ok" and r.step == "rewrite_data_files"] == ["t2"]


def test_query_telemetry_puts_the_most_queried_table_first(spark, kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from icetide.maintenance.planner import demand

    ns = unique("mq")
    for name in ("a_quiet", "b_busy"):  # the same health; names would order a_quiet first
        create(spark, f"icetide.{ns}.{name}")
        small_files(spark, f"icetide.{ns}.{name}", "2026-09-01", 8)
    spark.sql(f"CREATE TABLE icetide.{ns}.queries (table_name STRING, queried_at TIMESTAMP, scan_ms BIGINT) "
              "USING iceberg")
    spark.sql(f"INSERT INTO icetide.{ns}.queries SELECT '{ns}.b_busy', current_timestamp(), 100 FROM range(31)")
    spark.sql(f"INSERT INTO icetide.{ns}.queries SELECT '{ns}.a_quiet', TIMESTAMP '2020-01-01 00:00:00', 1 "
              "FROM range(500)")  # outside the window
    time.sleep(2)
    cfg = load_config(make_cfg(kafka, lake, tmp_path, ns, policy={"hot_partition_quiet_seconds": 1},
                               telemetry_table=f"{ns}.queries", telemetry_window="24 hours"))
    plans = {p.table.split(".")[-1]: p for p in plan_all(spark, cfg, [f"{ns}.a_quiet", f"{ns}.b_busy"])}
    assert plans["b_busy"].queries == 31 and plans["a_quiet"].queries == 0
    assert plans["a_quiet"].score == plans["b_busy"].score
    assert plans["b_busy"].priority - plans["a_quiet"].priority == pytest.approx(demand(31)) == 20.0
    assert next(p.table.split(".")[-1] for p in plan_all(spark, cfg, [f"{ns}.a_quiet", f"{ns}.b_busy"])) == "b_busy"


def test_partition_filters_refuse_unsafe_values() -> None:
    ident = [PartitionField("region", "identity", "region")]
    assert where(ident, '{"region":"eu-west-1"}') == "region = 'eu-west-1'"
    assert where(ident, '{"region":null}') == "region IS NULL"
    for hostile in ("x' OR '1'='1", "a\\\\b", 'q"q', "a;DROP TABLE t", "é"):
        assert where(ident, json.dumps({"region": hostile})) is None
    hours = [PartitionField("ts_hour", "hours", "ts")]
    assert where(hours, '{"ts_hour":490000}') == \
        "ts >= TIMESTAMP '2025-11-24 16:00:00' AND ts < TIMESTAMP '2025-11-24 17:00:00'"
    months = [PartitionField("ts_month", "months", "ts")]
    assert where(months, '{"ts_month":671}') == \
        "ts >= TIMESTAMP '2025-12-01 00:00:00' AND ts < TIMESTAMP '2026-01-01 00:00:00'"
    assert where([PartitionField("b", "bucket", "id")], '{"b":3}') is None


def test_orphan_cleanup_removes_leftovers_keeps_in_flight_and_referenced(  # type: ignore[no-untyped-def]
        spark, kafka, lake, tmp_path) -> None:
    ns = unique("mo")
    table = f"icetide.{ns}.events"
    create(spark, table)
    small_files(spark, table, "2026-08-01", 3)
    before = checksum(spark, table)
    referenced = {p.removeprefix("file:") for p in files_by_day(spark, table)["2026-08-01"]}
    data_dir = Path(next(iter(referenced))).parent
    three_hours_ago = time.time() - 3 * 3600
    leftovers = []
    for i in range(2):  # a crashed writer's files: written, never committed, hours ago
        f = data_dir / f"crashed-writer-{i}.parquet"
        shutil.copy(next(iter(referenced)), f)
        os.utime(f, (three_hours_ago, three_hours_ago))
        leftovers.append(str(f))
    in_flight = data_dir / "in-flight-write.parquet"  # a write still in progress: fresh
    shutil.copy(next(iter(referenced)), in_flight)
    cfg = load_config(make_cfg(kafka, lake, tmp_path, ns, policy={
        "steps": ["remove_orphan_files"], "orphan_min_age_seconds": 3600}))

    _, records = run_cycle(spark, cfg, dry_run=True)
    [dry] = records
    assert dry.outcome == "dry_run"
    assert sorted(r["orphan_file_location"].removeprefix("file:") for r in dry.result) == sorted(leftovers)
    assert all(Path(f).exists() for f in leftovers)  # a dry run deletes nothing

    # icetide's own write in flight since 4 h ago protects even the 3 h old leftovers
    _, records = run_cycle(spark, cfg, in_flight_since_ms=lambda: int((time.time() - 4 * 3600) * 1000))
    assert records[0].outcome == "ok" and records[0].files_in == 0
    assert all(Path(f).exists() for f in leftovers)

    # another process's icetide run in flight since 4 h ago (its marker under the table location)
    # protects them from a standalone `icetide maintain`, which has no in-process callback
    from icetide.lake import inflight
    from icetide.lake.table_io import TableIO

    io = TableIO.of(spark, table)
    inflight.mark(io, "other-process", "run1", int((time.time() - 4 * 3600) * 1000))
    _, records = run_cycle(spark, cfg)
    assert records[0].outcome == "ok" and records[0].files_in == 0
    assert all(Path(f).exists() for f in leftovers)
    inflight.clear(io, "other-process", "run1")
    # a writer of the previous version, whose marker sits in metadata/, is protected the same way
    legacy = Path(io.location.removeprefix("file:")) / "metadata" / "icetide-inflight-old-version.json"
    legacy.write_text(json.dumps({"pipeline": "old-version", "run": "r0",
                                  "since_ms": int((time.time() - 4 * 3600) * 1000)}))
    _, records = run_cycle(spark, cfg)
    assert records[0].outcome == "ok" and records[0].files_in == 0
    assert all(Path(f).exists() for f in leftovers) and legacy.exists()
    legacy.unlink()
    # a crashed writer's marker (older than the stale limit) protects nothing and is never deleted
    inflight.mark(io, "crashed", "run0", int(time.time() * 1000) - inflight.STALE_AFTER_MS - 1)
    marker = Path(inflight.marker_path(io.location, "crashed", "run0").removeprefix("file:"))
    os.utime(marker, (three_hours_ago, three_hours_ago))

    _, records = run_cycle(spark, cfg)
    assert (records[0].outcome, records[0].files_in) == ("ok", 2)
    assert not any(Path(f).exists() for f in leftovers)
    assert marker.exists()
    assert in_flight.exists() and all(Path(f).exists() for f in referenced)
    assert checksum(spark, table) == before


def test_expiry_by_maintenance_keeps_the_ingest_offsets(spark, kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from icetide.lake.offsets import BatchRanges, commit_properties, read_watermark, table_property

    ns = unique("mw")
    table = f"icetide.{ns}.events"
    create(spark, table)
    for batch in range(12):  # tagged commits of pipeline "pipe", never mirrored to the property
        ranges = BatchRanges({("t", 0): (batch * 10, batch * 10 + 10)})
        writer = spark.createDataFrame([(batch, None, "v")], "id BIGINT, ts TIMESTAMP, v STRING").writeTo(table)
        for k, v in commit_properties("pipe", "run1", batch, ranges).items():
            writer = writer.option(f"snapshot-property.{k}", v)
        writer.append()
    spark.sql(f"CALL icetide.system.rewrite_data_files(table => '{table}', options => map('min-input-files','1'))")
    assert table_property(spark, table, "icetide.watermark.pipe") is None
    # One more commit, so the rewrite's snapshot expires too: in the driver Iceberg deletes a file
    # once the snapshot that removed it expires (incremental cleanup), not the expiry before.
    spark.createDataFrame([(99, None, "w")], "id BIGINT, ts TIMESTAMP, v STRING").writeTo(table).append()
    live = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    replaced = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.all_data_files").collect()} - live
    assert len(replaced) == 12 and all(Path(f.removeprefix("file:")).exists() for f in replaced)
    time.sleep(2)
    cfg = load_config(make_cfg(kafka, lake, tmp_path, ns, policy={
        "steps": ["expire_snapshots"], "snapshots_trigger": 5, "snapshot_retain_last": 1,
        "snapshot_max_age_seconds": 1, "hot_partition_quiet_seconds": 1}))
    [plan] = plan_all(spark, cfg)
    assert plan.steps[0].args["via"] == "driver"  # the default: Iceberg's ExpireSnapshots, no Spark job
    _, records = run_cycle(spark, cfg)
    assert [(r.step, r.outcome) for r in records] == [("expire_snapshots", "ok")]
    assert records[0].result == [{"expired_snapshots": 13}]  # 12 appends and the rewrite
    assert not any(Path(f.removeprefix("file:")).exists() for f in replaced)  # the files only they held
    assert all(Path(f.removeprefix("file:")).exists() for f in live)
    # no snapshot with the tags is left, yet the ledger still says offset 120
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots WHERE summary['icetide.pipeline'] IS NOT NULL"
                     ).first()[0] == 0
    wm = read_watermark(spark, table, "pipe")
    assert wm is not None and wm.offsets == {("t", 0): 120} and wm.batch == 11
