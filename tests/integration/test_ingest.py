"""Ingestion on the real stack: Kafka broker, Spark, Iceberg (JDBC catalog on SQLite)."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition

from icetide.config import load_config
from icetide.demo.events import create_topic, produce, sample_values
from icetide.errors import CheckpointMismatchError
from icetide.health.collector import collect
from icetide.health.watch import add_kafka_lag
from icetide.lake.meta_spark import SparkMeta
from icetide.lake.offsets import read_watermark
from tests.fixtures.stack import icetide_cli, run_in_process, table_ids, unique


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe"), "log_level": 0})
    try:
        return {(topic, p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        c.close()


def test_ingest_lands_every_record_once_and_dead_letters_bad_ones(kafka, spark, make_pipeline) -> None:  # type: ignore[no-untyped-def]
    topic, table = unique("t"), f"it.{unique('events')}"
    create_topic(kafka.bootstrap, topic, 4)
    values = list(sample_values(6000, bad_every=40))
    produced = produce(kafka.bootstrap, topic, values, partitions=4)
    expected_bad = Counter(err for _, err in values if err is not None)

    runner = run_in_process(spark, make_pipeline(topic, table), 240)

    ids = table_ids(spark, table)
    assert len(ids) == produced.good and sorted(ids) == sorted(produced.ids)
    dlq = f"icetide.{table}_dlq"
    got = Counter({r["error_class"]: r["n"] for r in spark.sql(
        f"SELECT error_class, count(*) n FROM {dlq} GROUP BY error_class").collect()})
    assert got == expected_bad
    # raw bytes, coordinates and a reason are kept for every dead letter
    bad_values = {v for v, err in values if err is not None and v is not None}
    rows = spark.sql(f"SELECT value, _kafka_topic, _kafka_offset, error_message FROM {dlq}").collect()
    assert {bytes(r["value"]) for r in rows if r["value"] is not None} == bad_values
    assert all(r["_kafka_topic"] == topic and r["_kafka_offset"] >= 0 and r["error_message"] for r in rows)
    mismatch = spark.sql(f"SELECT error_message FROM {dlq} WHERE error_class = 'type_mismatch'").first()
    assert mismatch is not None and mismatch[0] == "fields do not match the table schema: amount (expected double)"
    # produced = written + dead-lettered, and the counters agree
    assert runner.writer.counters.written == produced.good
    assert runner.writer.counters.dead_letters == produced.bad == sum(expected_bad.values())
    # every commit is tagged; the newest watermark equals Kafka's end offsets
    wm = read_watermark(spark, f"icetide.{table}", runner.cfg.name)
    assert wm is not None and wm.offsets == end_offsets(kafka.bootstrap, topic, 4)
    summaries = spark.sql(f"SELECT summary FROM icetide.{table}.snapshots "
                          "WHERE CAST(summary['added-records'] AS BIGINT) > 0").collect()
    assert summaries and all(s[0]["icetide.pipeline"] == runner.cfg.name for s in summaries)
    assert all("icetide.batch-offsets" in s[0] and "icetide.batch-planned-at-ms" in s[0] for s in summaries)
    # a batch far below source.records_per_task is written by one task: one file per table partition
    # it touched, not one per Kafka partition (4 here)
    files = [(int(s[0]["added-data-files"]), int(s[0]["changed-partition-count"])) for s in summaries]
    assert all(f == p for f, p in files), files
    cols = spark.table(f"icetide.{table}").columns
    assert {"_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key"} <= set(cols)

    # health of an icetide table: freshness, commit latency and Kafka lag
    h = collect(SparkMeta(spark, "icetide"), table)
    add_kafka_lag(spark, runner.cfg, [h])
    assert h.icetide_pipelines == [runner.cfg.name]
    assert h.kafka_lag == 0 and h.freshness_ms is not None and 0 <= h.freshness_ms < 600_000
    assert h.commit_latency_ms is not None and h.commit_latency_ms >= 0
    produce(kafka.bootstrap, topic, sample_values(10, first_id=50_000), partitions=4)
    add_kafka_lag(spark, runner.cfg, [h])
    assert h.kafka_lag == 10


def test_replayed_batch_after_commit_is_skipped(kafka, spark, make_pipeline, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Spark replays a batch whose commit marker was lost (crash after the Iceberg commit)."""
    topic, table = unique("t"), f"it.{unique('replay')}"
    create_topic(kafka.bootstrap, topic, 2)
    produced = produce(kafka.bootstrap, topic, sample_values(3000), partitions=2)
    cfg = make_pipeline(topic, table)
    run_in_process(spark, cfg, 240)
    commits = sorted((tmp_path / "checkpoint" / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert commits
    commits[-1].unlink()  # as if the process died between the Iceberg commit and Spark's commit log
    snapshots_before = spark.sql(f"SELECT count(*) FROM icetide.{table}.snapshots").first()[0]

    runner = run_in_process(spark, cfg, 240)

    assert sorted(table_ids(spark, table)) == sorted(produced.ids)
    assert runner.writer.counters.last is not None
    assert table in runner.writer.counters.last.skipped
    assert spark.sql(f"SELECT count(*) FROM icetide.{table}.snapshots").first()[0] == snapshots_before


def test_lost_checkpoint_resumes_from_table_offsets_after_compaction_and_expiry(  # type: ignore[no-untyped-def]
        kafka, spark, make_pipeline, tmp_path) -> None:
    topic, table = unique("t"), f"it.{unique('lost')}"
    create_topic(kafka.bootstrap, topic, 4)
    first = produce(kafka.bootstrap, topic, sample_values(4000, seed=1), partitions=4)
    cfg = make_pipeline(topic, table)
    run_in_process(spark, cfg, 240)
    fq = f"icetide.{table}"
    # Compaction then aggressive expiry: no snapshot carrying icetide's summary keys survives.
    # (rewrite-all: each day may hold a single file, which a plain rewrite leaves alone)
    spark.sql(f"CALL icetide.system.rewrite_data_files(table => '{table}', options => map('rewrite-all','true'))")
    spark.sql(f"CALL icetide.system.expire_snapshots(table => '{table}', older_than => current_timestamp(), "
              "retain_last => 1)")
    assert spark.sql(
        f"SELECT count(*) FROM {fq}.snapshots WHERE summary['icetide.pipeline'] IS NOT NULL").first()[0] == 0
    wm = read_watermark(spark, fq, load_config(cfg).name)
    assert wm is not None and wm.offsets == end_offsets(kafka.bootstrap, topic, 4)

    shutil.rmtree(tmp_path / "checkpoint")
    second = produce(kafka.bootstrap, topic, sample_values(3000, seed=2, first_id=10_000), partitions=4)
    run_in_process(spark, cfg, 240)

    ids = table_ids(spark, table)
    assert len(ids) == len(set(ids)) == first.good + second.good
    assert Counter(ids) == Counter(first.ids + second.ids)


def test_lost_checkpoint_fail_mode_refuses_with_explanation(kafka, spark, make_pipeline, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic, table = unique("t"), f"it.{unique('refuse')}"
    create_topic(kafka.bootstrap, topic, 1)
    produce(kafka.bootstrap, topic, sample_values(500), partitions=1)
    cfg = make_pipeline(topic, table, stream={"trigger_interval": "2 seconds", "on_missing_checkpoint": "fail",
                                              "checkpoint_location": str(tmp_path / "checkpoint")})
    run_in_process(spark, cfg, 240)
    shutil.rmtree(tmp_path / "checkpoint")
    with pytest.raises(CheckpointMismatchError, match=r"^stream.checkpoint_location: no checkpoint at .*"
                       r"but tables already hold offsets of pipeline"):
        run_in_process(spark, cfg, 240)
    res = icetide_cli("run", "-c", str(cfg), timeout=300)
    assert res.returncode == 2
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"icetide: stream.checkpoint_location: no checkpoint at {tmp_path / 'checkpoint'}, "
                           f"but tables already hold offsets of pipeline"), res.stderr
    assert len(table_ids(spark, table)) == 500
