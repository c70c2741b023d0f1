"""icetide's own tables have retention: a maintenance cycle drops whole old days from the batch log
(metadata only), keeps recent days and dead letters, and records what it did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from icetide.config import load_config
from icetide.maintenance.cycle import run_cycle
from tests.fixtures.stack import pipeline_dict, unique


def test_a_cycle_deletes_old_days_of_icetide_logs_and_keeps_dead_letters(spark, kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from icetide.ingest.batch_log import BATCH_LOG_SCHEMA
    from icetide.ingest.decode import DEAD_LETTER_SCHEMA
    from icetide.lake.tables import ensure_table

    ns = unique("rt")
    path = tmp_path / "r.yaml"
    raw = pipeline_dict(kafka, lake, tmp_path, "unused", f"{ns}.unused",
                        health={"namespaces": [ns], "history_table": f"{ns}.health"},
                        maintenance={"log_table": f"{ns}.maintenance", "own_table_retention": "30 days",
                                     "policy": {"steps": ["expire_snapshots"]}})
    raw["stream"]["batch_log_table"] = f"{ns}.batches"
    raw["dead_letter"] = {"table": f"{ns}.dlq"}
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    batches = ensure_table(spark, "icetide", f"{ns}.batches", BATCH_LOG_SCHEMA, ["days(logged_at)"], {})
    dlq = ensure_table(spark, "icetide", f"{ns}.dlq", DEAD_LETTER_SCHEMA, ["days(_kafka_timestamp)"], {})
    names = [f.name for f in BATCH_LOG_SCHEMA.fields]
    for days_ago in (90, 45, 31, 29, 1, 0):
        cols = ", ".join(f"current_timestamp() - make_interval(0, 0, 0, {days_ago})" if n == "logged_at"
                         else f"CAST(NULL AS {f.dataType.simpleString()})"
                         for n, f in zip(names, BATCH_LOG_SCHEMA.fields, strict=True))
        spark.sql(f"INSERT INTO {batches} SELECT {cols}")
        spark.sql(f"INSERT INTO {dlq} (_kafka_topic, _kafka_timestamp, error_class) "
                  f"VALUES ('t', current_timestamp() - make_interval(0, 0, 0, {days_ago}), 'x')")
    files_before = spark.sql(f"SELECT count(*) FROM {batches}.files").first()[0]

    _, records = run_cycle(spark, cfg, [f"{ns}.batches"])
    expired = [r for r in records if r.step == "expire_rows"]
    assert [(r.table, r.outcome) for r in expired] == [(batches, "ok")], records
    assert expired[0].result[0]["deleted_rows"] == 3
    ages = sorted(r[0] for r in spark.sql(
        f"SELECT datediff(current_date(), to_date(logged_at)) FROM {batches}").collect())
    assert ages == [0, 1, 29]
    # whole partitions dropped: the delete wrote no data file, and no file is left for old days
    op = spark.sql(f"SELECT operation, summary FROM {batches}.snapshots ORDER BY committed_at DESC LIMIT 1").first()
    assert op["operation"] == "delete" and "added-data-files" not in op["summary"], op
    assert spark.sql(f"SELECT count(*) FROM {batches}.files").first()[0] == files_before - 3
    assert spark.sql(f"SELECT count(*) FROM {dlq}").first()[0] == 6  # dead letters are kept unless asked
    logged = spark.sql(f"SELECT step, outcome FROM icetide.{ns}.maintenance WHERE step = 'expire_rows'").collect()
    assert [(r[0], r[1]) for r in logged] == [("expire_rows", "ok")]

    # nothing old left: the next cycle deletes nothing and makes no snapshot
    snaps = spark.sql(f"SELECT count(*) FROM {batches}.snapshots").first()[0]
    _, records = run_cycle(spark, cfg, [f"{ns}.batches"])
    assert not [r for r in records if r.step == "expire_rows"]
    assert spark.sql(f"SELECT count(*) FROM {batches}.snapshots").first()[0] == snaps


def own_log(spark, kafka, lake, tmp_path, policy: dict[str, Any]) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    """A config whose action log is a fresh table (created), with ``policy``: its path and the log."""
    from icetide.lake.tables import ensure_table
    from icetide.maintenance.executor import LOG_SCHEMA

    ns = unique("rto")
    path = tmp_path / f"{ns}.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict(
        kafka, lake, tmp_path, "unused", f"{ns}.unused", health={"namespaces": [ns], "history_table": f"{ns}.health"},
        maintenance={"log_table": f"{ns}.maintenance", "policy": policy})))
    return path, ensure_table(spark, "icetide", f"{ns}.maintenance", LOG_SCHEMA, ["days(started_at)"], {})


def append_log_rows(spark, log_table: str, n: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):  # one file each, as a cycle's one append per cycle does
        spark.sql(f"INSERT INTO {log_table} (started_at, table_name, step, outcome) "
                  f"VALUES (current_timestamp(), 't{i}', 'rewrite_hot_files', 'ok')")


def test_a_cycle_expires_old_snapshots_of_the_log_it_appends_to(spark, kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import time

    path, log_table = own_log(spark, kafka, lake, tmp_path,
                              {"steps": [], "snapshot_max_age_seconds": 1, "snapshot_retain_last": 1})
    append_log_rows(spark, log_table, 3)
    before = spark.sql(f"SELECT count(*) FROM {log_table}.snapshots").first()[0]
    assert before == 4  # ensure_table's empty snapshot and three appends
    time.sleep(1.5)
    _, records = run_cycle(spark, load_config(path), [])
    [rec] = [r for r in records if r.step == "expire_snapshots"]
    assert (rec.table, rec.outcome, rec.result) == (log_table, "ok", [{"expired_snapshots": 3}])
    # the newest kept, then this cycle's own record appended: two snapshots, every row still there
    assert spark.sql(f"SELECT count(*) FROM {log_table}.snapshots").first()[0] == 2
    assert spark.sql(f"SELECT count(*) FROM {log_table} WHERE table_name LIKE 't%'").first()[0] == 3


def _tombstone_pipeline(spark, kafka, lake, tmp_path) -> tuple[str, Path, str]:  # type: ignore[no-untyped-def]
    """A CDC pipeline with a 7-day tombstone horizon and its (empty) tombstone table."""
    ns = unique("rtt")
    path = tmp_path / "t.yaml"
    raw = pipeline_dict(kafka, lake, tmp_path, "unused", f"{ns}.accounts",
                        health={"namespaces": [ns], "history_table": f"{ns}.health"},
                        maintenance={"log_table": f"{ns}.maintenance", "policy": {"steps": ["expire_snapshots"]}})
    raw["target"] = {"table": f"{ns}.accounts", "schema": "id BIGINT, name STRING",
                     "cdc": {"primary_key": ["id"], "ordering": "version", "tombstone_horizon": "7 days"}}
    path.write_text(yaml.safe_dump(raw))
    tomb = f"icetide.{ns}.accounts_tombstones"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS icetide.{ns}")
    spark.sql(f"CREATE TABLE {tomb} (id BIGINT, _cdc_ordering BIGINT, _deleted_at TIMESTAMP) USING iceberg")
    return ns, path, tomb


def test_tombstones_are_trimmed_past_the_cdc_horizon_only(spark, kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns, path, tomb = _tombstone_pipeline(spark, kafka, lake, tmp_path)
    cfg = load_config(path)
    spark.sql(f"INSERT INTO {tomb} VALUES (1, 5, current_timestamp() - INTERVAL 10 DAYS), "
              f"(2, 6, current_timestamp() - INTERVAL 8 DAYS), (3, 7, current_timestamp() - INTERVAL 2 DAYS)")
    _, records = run_cycle(spark, cfg, [f"{ns}.accounts_tombstones"])
    assert [(r.table, r.step, r.outcome) for r in records if r.step == "expire_rows"] == [(tomb, "expire_rows", "ok")]
    # the stream's time is its newest delete (2 days ago): the horizon reaches back 9 days from now
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {tomb}").collect()) == [2, 3]


def test_item4_tombstone_horizon_runs_on_stream_time_not_the_wall_clock(  # type: ignore[no-untyped-def]
        spark, kafka, lake, tmp_path) -> None:
    """#31 item 4: a pipeline catching up on a backlog a year old keeps its tombstones: only those
    older than the horizon before the newest delete it applied go (a wall clock would drop all)."""
    ns, path, tomb = _tombstone_pipeline(spark, kafka, lake, tmp_path)
    spark.sql(f"INSERT INTO {tomb} VALUES (1, 5, TIMESTAMP '2025-01-01 10:00:00'), "
              f"(2, 6, TIMESTAMP '2025-01-20 10:00:00'), (3, 7, TIMESTAMP '2025-01-25 10:00:00')")
    run_cycle(spark, load_config(path), [f"{ns}.accounts_tombstones"])
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {tomb}").collect()) == [2, 3]


def test_hole8_a_caught_up_partition_never_trims_a_lagging_partitions_tombstones(  # type: ignore[no-untyped-def]
        spark, kafka, lake, tmp_path) -> None:
    """#41 (8): the horizon counted back from the newest delete of any partition, so partition 0,
    caught up (a delete today), trimmed the tombstones of partition 1, whose backlog is a month
    behind and may still hold older changes of those keys. Each partition now counts back from its
    own newest delete. About 15 s (one table, one cycle)."""
    ns, path, tomb = _tombstone_pipeline(spark, kafka, lake, tmp_path)
    spark.sql(f"DROP TABLE {tomb}")
    spark.sql(f"CREATE TABLE {tomb} (id BIGINT, _cdc_ordering BIGINT, _deleted_at TIMESTAMP, "
              "_cdc_position STRUCT<offset: BIGINT, partition: INT>) USING iceberg")
    spark.sql(f"INSERT INTO {tomb} VALUES "
              "(1, 5, current_timestamp() - INTERVAL 20 DAYS, named_struct('offset', 1L, 'partition', 0)), "
              "(2, 6, current_timestamp(), named_struct('offset', 9L, 'partition', 0)), "
              "(3, 7, current_timestamp() - INTERVAL 40 DAYS, named_struct('offset', 1L, 'partition', 1)), "
              "(4, 8, current_timestamp() - INTERVAL 35 DAYS, named_struct('offset', 5L, 'partition', 1)), "
              "(5, 9, current_timestamp() - INTERVAL 30 DAYS, named_struct('offset', 7L, 'partition', 1)), "
              "(6, 4, current_timestamp() - INTERVAL 31 DAYS, NULL), "
              "(7, 3, current_timestamp() - INTERVAL 60 DAYS, NULL)")
    run_cycle(spark, load_config(path), [f"{ns}.accounts_tombstones"])
    # partition 0 (now): 1 is past its 7 days; partition 1 (30 days ago): 3 is past its own 7 days,
    # 4 and 5 are not; no position (an older icetide): the earliest time of all (31 days ago), so 7
    # goes and 6 stays. The old code counted back from now for every row: it kept only 2.
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {tomb}").collect()) == [2, 4, 5, 6]


def test_a_cycle_compacts_the_small_files_of_the_log_it_appends_to(spark, kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path, log_table = own_log(spark, kafka, lake, tmp_path, {"steps": ["rewrite_data_files"], "min_input_files": 5})
    append_log_rows(spark, log_table, 4)
    _, records = run_cycle(spark, load_config(path), [])
    assert not [r for r in records if r.step == "rewrite_data_files"]  # 4 files < min_input_files: left alone
    files = spark.sql(f"SELECT count(*) FROM {log_table}.files").first()[0]
    assert files == 4  # and the cycle acted on nothing, so it logged nothing

    append_log_rows(spark, log_table, 2)
    _, records = run_cycle(spark, load_config(path), [])
    [rec] = [r for r in records if r.step == "rewrite_data_files"]
    assert (rec.table, rec.outcome) == (log_table, "ok")
    assert (rec.result[0]["rewritten_data_files_count"], rec.result[0]["added_data_files_count"]) == (6, 1)
    # one compacted file, plus this cycle's own record of the compaction; every row still there once
    assert spark.sql(f"SELECT count(*) FROM {log_table}.files").first()[0] == 2
    assert spark.sql(f"SELECT count(*) FROM {log_table} WHERE table_name LIKE 't%'").first()[0] == 6
    assert spark.sql(f"SELECT count(*) FROM {log_table} WHERE step = 'rewrite_data_files'").first()[0] == 1
