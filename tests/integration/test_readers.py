"""The JVM-free reader (PyIceberg) and the Spark reader give the same figures on the same tables,
and the read-only commands answer without a JVM.

Tables cover what differs between the two: partition transforms (identity on strings, dates and
ints with nulls, hours, bucket, truncate), an evolved partition spec, merge-on-read deletes, an
unpartitioned table, a pipeline's watermarks and dead letters, the maintenance log and history.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.config import load_config
from icetide.health.collector import collect
from icetide.health.report import history_rows, maintenance_rows
from icetide.health.watch import collect_all
from icetide.ingest.dead_letters import Filters, list_groups
from icetide.lake.offsets import read_watermark
from icetide.lake.pipelines import pipeline_watermarks
from icetide.lake.readers import open_reader
from icetide.maintenance import layout
from icetide.maintenance.cycle import plan_all, run_cycle
from tests.fixtures.records import dumps, send
from tests.fixtures.stack import icetide_cli, pipeline_dict, run_in_process, unique

NOW = 1_900_000_000_000  # one "now" for both readers: hot/cold and ages are then equal


def _build(spark, ns: str) -> list[str]:  # type: ignore[no-untyped-def]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS icetide.{ns}")
    mor = "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read'"
    spark.sql(f"CREATE TABLE icetide.{ns}.many (id BIGINT, s STRING, d DATE, n INT, ts TIMESTAMP) USING iceberg "
              f"PARTITIONED BY (s, d, n, hours(ts), bucket(4, id), truncate(2, s)) TBLPROPERTIES ({mor})")
    for i in range(6):
        s = "NULL" if i == 5 else f"'k{i % 3}é'"
        spark.sql(f"INSERT INTO icetide.{ns}.many VALUES ({i}, {s}, DATE '2026-11-0{1 + i % 2}', "
                  f"{'NULL' if i % 2 else i}, TIMESTAMP '2026-11-27 0{i}:30:00'), "
                  f"({i + 100}, {s}, DATE '2026-11-01', 1, TIMESTAMP '2026-11-27 0{i}:45:00')")
    spark.sql(f"UPDATE icetide.{ns}.many SET n = 7 WHERE id = 100")  # merge-on-read: a position delete
    spark.sql(f"CREATE TABLE icetide.{ns}.evolved (id BIGINT, p STRING, q STRING) USING iceberg PARTITIONED BY (p)")
    spark.sql(f"INSERT INTO icetide.{ns}.evolved VALUES (1, 'a', 'x'), (2, 'b', 'y')")
    spark.sql(f"ALTER TABLE icetide.{ns}.evolved ADD PARTITION FIELD q")
    spark.sql(f"INSERT INTO icetide.{ns}.evolved VALUES (3, 'a', 'x'), (4, 'a', 'z')")
    spark.sql(f"CREATE TABLE icetide.{ns}.flat (id BIGINT, v DOUBLE) USING iceberg")
    for i in range(3):
        spark.sql(f"INSERT INTO icetide.{ns}.flat VALUES ({i}, {i * 1.5}), ({i + 10}, 1e300)")
    # a commit that added nothing (a batch with no rows for a table): a snapshot without manifests
    spark.sql(f"CREATE TABLE icetide.{ns}.empty_commit (id BIGINT) USING iceberg")
    jvm_table = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, f"icetide.{ns}.empty_commit")
    jvm_table.newAppend().commit()
    return [f"{ns}.many", f"{ns}.evolved", f"{ns}.flat", f"{ns}.empty_commit"]


def _same(a: Any, b: Any, what: str) -> None:
    assert a == b, f"{what} differs between the readers:\nspark:     {a}\npyiceberg: {b}"


def _health(h: Any) -> dict[str, Any]:
    return {**h.summary(), "seconds_to_collect": None, "partitions": h.partition_rows(),
            "snapshot_times_ms": h.snapshot_times_ms, "write_times_ms": h.write_times_ms}


@pytest.fixture(scope="module")
def lake_tables(spark, kafka, lake, tmp_path_factory):  # type: ignore[no-untyped-def]
    """A pipeline run (table, watermarks, dead letters, history) plus hand-built tables, one namespace."""
    work = tmp_path_factory.mktemp("readers")
    ns = unique("rd")
    topic = unique("rd-topic")
    records = [dumps({"id": f"e{i}", "event_time": f"2026-11-2{i % 3}T10:00:00Z", "user_id": i,
                      "event_type": "click", "amount": 1.5}) for i in range(300)]
    records += [b"not json", b"[1,2]", dumps({"id": "x", "amount": "lots"})]
    send(kafka.bootstrap, topic, records, partitions=3)
    path = work / "p.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict(
        kafka, lake, work, topic, f"{ns}.events", dead_letter={"table": f"{ns}.dead_letters"},
        health={"namespaces": [ns], "history_table": f"{ns}.health"},
        maintenance={"log_table": f"{ns}.maintenance",
                     "policy": {"min_input_files": 2, "hot_partition_quiet_seconds": 0, "snapshots_trigger": 2,
                                "snapshot_retain_last": 1, "snapshot_max_age_seconds": 1}})))
    run_in_process(spark, path)
    cfg = load_config(path)
    tables = _build(spark, ns)
    collect_all(spark, cfg, record=True, alert=False)
    time.sleep(1.5)
    run_cycle(spark, cfg, [f"{ns}.flat"])  # a maintenance log to read back
    collect_all(spark, cfg, record=True, alert=False)
    return cfg, path, [f"{ns}.events", f"{ns}.dead_letters", *tables]


def test_both_readers_give_the_same_figures(spark, lake_tables) -> None:  # type: ignore[no-untyped-def]
    cfg, _path, tables = lake_tables
    fast, slow = open_reader(cfg), open_reader(cfg, spark)
    ns = tables[0].split(".")[0]
    _same(slow.list_tables(ns), fast.list_tables(ns), "the table list")
    for t in tables:
        _same(slow.spec(t), fast.spec(t), f"{t}: the partition spec")
        a = _health(collect(slow, t, cfg.health.thresholds_for(t), now_ms=NOW))
        b = _health(collect(fast, t, cfg.health.thresholds_for(t), now_ms=NOW))
        _same(a, b, f"{t}: health figures")
    many = _health(collect(fast, tables[2], now_ms=NOW))
    # the figures are real: the partition keys carry nulls, transforms and non-ASCII text as Spark names them
    keys = [p["partition"] for p in many["partitions"]]
    assert any('"s":"k1é"' in k for k in keys) and any('"s"' not in k for k in keys), keys
    assert many["delete_files"] == 1 and many["data_files"] == 13, many
    # the compaction of `flat` is a snapshot, not a write: the settle-by-commits rule counts writes only
    flat = _health(collect(fast, f"{ns}.flat", now_ms=NOW))
    assert len(flat["snapshot_times_ms"]) - len(flat["write_times_ms"]) == 1, flat
    _same(plan_all(slow, cfg, tables, now_ms=NOW), plan_all(fast, cfg, tables, now_ms=NOW), "plans")
    for column in ("id", "ts", "s"):
        _same(layout.clustering(slow, tables[2], column), layout.clustering(fast, tables[2], column),
              f"clustering on {column}")


def test_offsets_dead_letters_and_history_are_the_same(spark, lake_tables) -> None:  # type: ignore[no-untyped-def]
    cfg, _path, tables = lake_tables
    fast, slow = open_reader(cfg), open_reader(cfg, spark)
    wms = pipeline_watermarks(fast, cfg)
    _same({t: w.encode() for t, w in pipeline_watermarks(slow, cfg).items()}, {t: w.encode() for t, w in wms.items()},
          "watermarks")
    events = f"icetide.{tables[0]}"
    ledger = read_watermark(spark, events, cfg.name)  # what the pipeline itself resumes from
    assert ledger is not None and wms[events].offsets == ledger.offsets
    assert sum(wms[events].offsets.values()) == 303  # 3 partitions, every record consumed
    a, b = list_groups(slow, cfg, Filters()), list_groups(fast, cfg, Filters())
    _same(asdict(a), asdict(b), "dead letters")
    assert b.total == 3 and {g["error_class"] for g in b.groups} >= {"malformed_json", "not_a_json_object"}
    _same(history_rows(slow, cfg, 24), history_rows(fast, cfg, 24), "health history")
    per_table = Counter(r["table_name"] for r in history_rows(fast, cfg, 24))
    assert per_table[f"icetide.{tables[0]}"] == 2, per_table
    actions = maintenance_rows(fast, cfg, 24)
    _same(maintenance_rows(slow, cfg, 24), actions, "maintenance actions")
    assert actions, "the cycle recorded no action"


def test_read_commands_start_no_jvm(lake_tables, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With no java reachable, every read-only command still answers (Spark would fail to start)."""
    _cfg, path, tables = lake_tables
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java"), "SPARK_HOME": str(tmp_path / "no-spark"),
           "PATH": ":".join(p for p in os.environ["PATH"].split(":") if not Path(p, "java").exists())}
    status = icetide_cli("-q", "status", "-c", str(path), "-o", "json", env=env, timeout=120)
    assert status.returncode == 0, status.stderr[-3000:]
    assert {s["table"].split(".", 1)[1] for s in json.loads(status.stdout)} >= set(tables)
    for args in (["health", tables[2]], ["plan"], ["offsets"], ["dead-letters", "list"],
                 ["report", "--out", str(tmp_path / "r.html")]):
        res = icetide_cli("-q", *args, "-c", str(path), *(["-o", "json"] if args[0] != "report" else []),
                          env=env, timeout=120)
        assert res.returncode == 0, f"icetide {' '.join(args)}: {res.stderr[-3000:]}"
    forced = icetide_cli("status", "-c", str(path), "--engine", "spark", env=env, timeout=120)
    assert forced.returncode != 0  # proves the environment has no JVM for Spark


def test_status_with_kafka_down_answers_fast_and_shows_lag_unreachable(lake_tables, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _cfg, path, tables = lake_tables
    raw = yaml.safe_load(path.read_text())
    raw["source"]["bootstrap_servers"] = "127.0.0.1:1"  # nothing listens there
    down = tmp_path / "down.yaml"
    down.write_text(yaml.safe_dump(raw))
    up = icetide_cli("-q", "status", "-c", str(path), "-o", "json", timeout=120)
    started = time.monotonic()
    res = icetide_cli("-q", "status", "-c", str(down), "-o", "json", timeout=120)
    took = time.monotonic() - started
    assert res.returncode == 0, res.stderr[-3000:]
    by_table = {s["table"].split(".", 1)[1]: s for s in json.loads(res.stdout)}
    assert by_table[tables[0]]["kafka_unreachable"] is True and by_table[tables[0]]["kafka_lag"] is None
    assert by_table[tables[2]]["kafka_unreachable"] is False  # not a table of the pipeline
    assert {s["table"].split(".", 1)[1]: s for s in json.loads(up.stdout)}[tables[0]]["kafka_lag"] == 0
    # the broker's wait is bounded (1 s) rather than the client's default; the rest is Python starting up
    assert took < 15, took  # unbounded, the client waits far longer (8.4 s seen beside the chaos run)
    text = icetide_cli("status", "-c", str(down), timeout=120, env={**os.environ, "COLUMNS": "160"})
    assert "unreachable" in text.stdout, text.stdout


def test_dead_letters_show_one_letter_whole_and_lists_keep_names_at_60_and_80_columns(lake_tables) -> None:  # type: ignore[no-untyped-def]
    cfg, path, _tables = lake_tables
    res = icetide_cli("dead-letters", "show", "--class", "malformed_json", "-c", str(path), "-o", "json", timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    letter = json.loads(res.stdout)
    assert (letter["value"], letter["error_class"], letter["_kafka_topic"]) == ("not json", "malformed_json",
                                                                                cfg.source.topics[0])
    again = icetide_cli("dead-letters", "show", "--topic", letter["_kafka_topic"], "--partition",
                        str(letter["_kafka_partition"]), "--offset", str(letter["_kafka_offset"]), "-c", str(path),
                        timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    where = f"{letter['_kafka_topic']}[{letter['_kafka_partition']}]@{letter['_kafka_offset']}"
    assert f"dead letter {where}" in again.stdout
    assert "value (8 bytes):\nnot json" in again.stdout and "class:   malformed_json" in again.stdout
    none = icetide_cli("dead-letters", "show", "--class", "no_such_class", "-c", str(path), timeout=120)
    assert none.returncode == 2 and "no dead letter matches" in none.stderr
    for columns in ("60", "80"):
        listed = icetide_cli("dead-letters", "list", "-c", str(path), timeout=120,
                             env={**os.environ, "COLUMNS": columns})
        assert listed.returncode == 0, listed.stderr[-3000:]
        assert cfg.source.topics[0] in listed.stdout and "malformed_json" in listed.stdout, listed.stdout
        assert max(map(len, listed.stdout.splitlines())) <= int(columns), listed.stdout
        offsets = icetide_cli("offsets", "-c", str(path), timeout=120, env={**os.environ, "COLUMNS": columns})
        assert offsets.returncode == 0, offsets.stderr[-3000:]
        assert _tables[0] in offsets.stdout and cfg.source.topics[0] in offsets.stdout, offsets.stdout
        assert max(map(len, offsets.stdout.splitlines())) <= int(columns), offsets.stdout
