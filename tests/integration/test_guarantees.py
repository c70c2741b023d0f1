"""The guarantees' second pass (#31), one test per scenario that broke them, on the shared real stack
(Kafka, Spark, Iceberg): CDC ties across batches, a stale run's MERGE, Debezium values widening a
column, a table named like an internal alias, fencing after snapshot expiry, per-run in-flight
markers, a stopped run's mirror, partitions with no resume point, a topic deleted and created again."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import functions as F

from icetide.config import load_config
from icetide.config.models import PipelineConfig
from icetide.demo.events import create_topic
from icetide.errors import FencedError, TopicRecreatedError
from icetide.ingest import cdc, source
from icetide.ingest.ledger import Ledger
from icetide.lake import inflight
from icetide.lake.offsets import PROPERTY_PREFIX, BatchRanges, Watermark, read_watermark, set_property, table_property
from icetide.lake.table_io import TableIO
from tests.fixtures.cdc_stream import ChangeStream, cdc_config, send_changes
from tests.fixtures.records import dumps
from tests.fixtures.stack import icetide_cli, pipeline_dict, run_in_process, unique


def _send(bootstrap: str, topic: str, *changes: dict[str, Any]) -> None:
    send_changes(bootstrap, topic, ChangeStream(messages=[(int(c.get("id", 0)), dumps(c)) for c in changes]),
                 partitions=1)


def _rows(spark: Any, table: str, *cols: str) -> dict[Any, Any]:
    spark.catalog.refreshTable(f"icetide.{table}")
    return {r[0]: r[1] for r in spark.sql(f"SELECT {', '.join(cols)} FROM icetide.{table}").collect()}


def _edit(path: Path, **sections: dict[str, Any]) -> None:
    raw = yaml.safe_load(path.read_text())
    for section, values in sections.items():
        if section == "name":
            raw["name"] = values
        else:
            raw.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(raw))


# -- CDC state ------------------------------------------------------------------------------------
def test_item1_a_tie_on_the_ordering_goes_to_the_later_change_across_batches(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path) -> None:
    topic, table = unique("tie"), f"it.{unique('tie')}"
    create_topic(kafka.bootstrap, topic, 1)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"ordering": "version"})
    _edit(cfg, source={"max_offsets_per_trigger": 2})  # a batch boundary after every second change
    _send(kafka.bootstrap, topic, {"id": 1, "name": "A", "balance": 1.0, "op": "insert", "version": 5},
          {"id": 2, "name": "x", "balance": 2.0, "op": "insert", "version": 5},
          # batch N+1: the same ordering value again (ts_ms repeated within a millisecond)
          {"id": 1, "name": "B", "balance": 1.0, "op": "update", "version": 5},
          {"id": 2, "name": "x", "balance": 2.0, "op": "delete", "version": 5},
          # batch N+2: a re-insert with the delete's ordering, later in Kafka, is newer than the tombstone
          {"id": 2, "name": "again", "balance": 3.0, "op": "insert", "version": 5},
          {"id": 3, "name": "c", "balance": 3.0, "op": "insert", "version": 1})
    runner = run_in_process(spark, cfg)
    assert runner.writer.counters.batches == 3
    assert _rows(spark, table, "id", "name") == {1: "B", 2: "again", 3: "c"}
    assert {r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}_tombstones").collect()} == {2}
    # every row carries the position that decided it (offset, partition)
    assert _rows(spark, table, "id", "_cdc_position.offset") == {1: 2, 2: 4, 3: 5}


def test_item2_a_stale_run_cannot_resurrect_a_key_another_run_deleted(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path) -> None:
    topic, table = unique("stale"), f"it.{unique('stale')}"
    create_topic(kafka.bootstrap, topic, 1)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"ordering": "version", "tombstones": False})
    fq = f"icetide.{table}"
    _send(kafka.bootstrap, topic, {"id": 1, "name": "a", "balance": 1.0, "op": "insert", "version": 1},
          {"id": 2, "name": "b", "balance": 2.0, "op": "insert", "version": 1})
    run_in_process(spark, cfg)
    pipeline = load_config(cfg)
    # a second run of the pipeline reads the ledger, then pauses (a standby took over an idle topic)
    stale = Ledger(spark, pipeline, "stalerun0001")
    pending = stale.begin(fq, 10_000, BatchRanges({(topic, 0): (2, 3)}))
    assert pending is not None and pending.base[0] is not None
    # meanwhile the healthy run deletes key 1
    _send(kafka.bootstrap, topic, {"id": 1, "name": "a", "balance": 1.0, "op": "delete", "version": 5})
    run_in_process(spark, cfg)
    assert set(_rows(spark, table, "id", "name")) == {2}
    # the stale run wakes up with an older change for key 1 (not matched: an insert)
    older = (spark.table(fq).where("id = 2").withColumn("id", F.lit(1).cast("bigint"))
             .withColumn("name", F.lit("resurrected")).withColumn(cdc.ORDERING, F.lit(3).cast("bigint"))
             .withColumn(cdc.OP, F.lit("upsert")))
    assert pipeline.target.cdc is not None
    with pytest.raises(FencedError, match="icetide-fence"):
        cdc.merge_retrying_conflicts(spark, pending.tags, older, fq, pipeline.target.cdc,
                                     fence=stale.merge_fence(pending))
    assert _rows(spark, table, "id", "name") == {2: "b"}
    assert [r[0] for r in spark.sql(f"SELECT name FROM {fq}.refs").collect()] == ["main"]  # no branch left


def test_item3_debezium_values_widen_an_int_column(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic, table = unique("dbzw"), f"it.{unique('dbzw')}"
    create_topic(kafka.bootstrap, topic, 1)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"format": "debezium", "ordering": "source.lsn"})
    _edit(cfg, target={"schema": "id BIGINT, name STRING, qty INT"})

    def change(key: int, qty: int, lsn: int) -> dict[str, Any]:
        return {"before": None, "after": {"id": key, "name": f"n{key}", "qty": qty}, "op": "c",
                "ts_ms": 1795600000000, "source": {"lsn": lsn}}

    _edit(cfg, source={"max_offsets_per_trigger": 1})  # the second change comes in a batch of its own
    _send(kafka.bootstrap, topic, change(1, 7, 1), change(2, 3_000_000_000, 2))
    runner = run_in_process(spark, cfg)
    assert spark.table(f"icetide.{table}").schema["qty"].dataType.simpleString() == "bigint"
    assert _rows(spark, table, "id", "qty") == {1: 7, 2: 3_000_000_000}
    assert (runner.writer.counters.batches, runner.writer.counters.dead_letters) == (2, 0)


# -- fencing, markers, ledger ----------------------------------------------------------------------
def _ledger_config(kafka: Any, lake: Path, tmp_path: Path, name: str, table: str) -> PipelineConfig:
    path = tmp_path / f"{name}.yaml"
    raw = pipeline_dict(kafka, lake, tmp_path / name, "t", table)
    raw["name"] = name
    raw["stream"]["watermark_mirror_interval"] = "1 hour"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def _append(spark: Any, ledger: Ledger, table: str, batch: int, offset: int) -> None:
    rows = spark.range(offset, offset + 1).select(F.col("id").cast("bigint").alias("id"))
    assert ledger.commit(table, rows, lambda d: d, batch, BatchRanges({("t", 0): (offset, offset + 1)}), None) == 1


def _shared_table(spark: Any) -> str:
    ns = unique("fence")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS icetide.{ns}")
    fq = f"icetide.{ns}.shared"
    spark.sql(f"CREATE TABLE {fq} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    return fq


def test_item5_snapshot_expiry_does_not_make_a_healthy_run_look_fenced(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fq = _shared_table(spark)
    a = Ledger(spark, _ledger_config(kafka, lake, tmp_path, "pipe-a", "x.a"), "runa")
    b = Ledger(spark, _ledger_config(kafka, lake, tmp_path, "pipe-b", "x.b"), "runb")
    _append(spark, a, fq, 0, 0)
    mine = read_watermark(spark, fq, "pipe-a")
    assert mine is not None
    set_property(spark, fq, "pipe-a", mine)  # what maintenance does before it expires snapshots
    for i in range(3):  # another pipeline shares the table (dead letters do by default)
        _append(spark, b, fq, i, 100 + i)
    spark.sql(f"CALL icetide.system.expire_snapshots(table => '{fq.split('.', 1)[1]}', "
              f"older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)")
    tagged = spark.sql(f"SELECT count(*) FROM {fq}.snapshots WHERE summary['icetide.pipeline'] = 'pipe-a'").first()
    assert tagged[0] == 0  # the healthy run's last snapshot is gone
    _append(spark, a, fq, 1, 1)  # was: FencedError ("found no commit of the pipeline")
    # and a run whose ledger is not the mirrored one is still fenced
    other = Ledger(spark, a.cfg, "zombie")
    other._watermarks[fq] = Watermark(offsets={("t", 0): 1}, run="runa", batch=0)
    with pytest.raises(FencedError):
        _append(spark, other, fq, 2, 2)


def test_a_fenced_append_takes_a_column_named_with_a_dot(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The fenced append through icetide's own writer (dead letters; tombstone tables, keyed by the
    CDC key) takes a column named like ``service.name`` as one column (review, session 34: the frame
    read it as a nested field and the commit failed). ~5 s on the session's Spark."""
    ns = unique("dot")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS icetide.{ns}")
    fq = f"icetide.{ns}.tomb"
    spark.sql(f"CREATE TABLE {fq} (`service.name` STRING, n BIGINT) USING iceberg "
              "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')")
    ledger = Ledger(spark, _ledger_config(kafka, lake, tmp_path, "pipe-dot", "x.dot"), "rundot")
    took: list[int | None] = []
    append_job = ledger._append_job

    def spy(*args: Any) -> int | None:
        took.append(append_job(*args))
        return took[-1]

    ledger._append_job = spy  # type: ignore[method-assign]
    rows = spark.createDataFrame([("checkout", 1), ("api", 2)], "`service.name` STRING, n BIGINT")
    assert ledger.commit(fq, rows, lambda d: d, 0, BatchRanges({("t", 0): (0, 2)}), None) == 2
    assert took == [2]  # icetide's writer took the table (None: Spark's append, which this does not test)
    assert sorted(tuple(r) for r in spark.table(fq).collect()) == [("api", 2), ("checkout", 1)]


def test_item6_in_flight_markers_are_per_run(spark) -> None:  # type: ignore[no-untyped-def]
    fq = _shared_table(spark)
    io = TableIO.of(spark, fq)
    now = int(time.time() * 1000)
    inflight.mark(io, "orders", "run-paused", now - 60_000)
    inflight.mark(io, "orders", "run-active", now - 1_000)
    inflight.clear(io, "orders", "run-active")  # the active run commits and clears its own marker
    assert inflight.oldest(io, now) == now - 60_000  # the paused run's staged files stay protected
    inflight.clear(io, "orders", "run-paused")
    assert inflight.oldest(io, now) is None
    # a run whose commit lands sweeps only the markers of writes that can no longer commit
    inflight.mark(io, "orders", "run-crashed", now - 50_000, base=("run-a", 3))  # fenced once B committed
    inflight.mark(io, "orders", "run-c", now - 40_000, base=("run-b", 8))  # read B's commit: may still land
    inflight.mark(io, "other-pipeline", "run-x", now - 30_000, base=("run-a", 3))
    assert inflight.sweep(io, "orders", "run-b", ("run-b", 8)) == ["run-crashed"]
    assert inflight.oldest(io, now) == now - 40_000


def test_item7_a_stopped_fenced_run_never_moves_the_mirror_backwards(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fq = _shared_table(spark)
    cfg = _ledger_config(kafka, lake, tmp_path, "pipe-m", "x.m")
    first = Ledger(spark, cfg, "runfirst")
    _append(spark, first, fq, 0, 0)  # not mirrored yet (the interval is an hour)
    second = Ledger(spark, cfg, "runsecond")
    _append(spark, second, fq, 1, 1)
    second.flush_mirrors()
    ahead = table_property(spark, fq, PROPERTY_PREFIX + "pipe-m")
    assert ahead is not None and Watermark.from_property(ahead).run == "runsecond"
    first.flush_mirrors()  # the first run stops (without having noticed it lost)
    first.forget()
    first.flush_mirrors()
    now = table_property(spark, fq, PROPERTY_PREFIX + "pipe-m")
    assert now == ahead, "a stopped run moved the mirrored offsets backwards"


def test_item8_a_table_named_like_an_internal_alias_is_written(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic, ns = unique("alias"), unique("alias")
    create_topic(kafka.bootstrap, topic, 1)
    cfg = cdc_config(kafka, lake, tmp_path, topic, f"{ns}._icetide_src", {"ordering": "version"})
    _edit(cfg, name=unique("alias").replace("_", "-"))
    _send(kafka.bootstrap, topic, {"id": 1, "name": "a", "balance": 1.0, "op": "insert", "version": 1},
          {"id": 1, "name": "b", "balance": 1.0, "op": "update", "version": 2})
    run_in_process(spark, cfg)
    assert _rows(spark, f"{ns}._icetide_src", "id", "name") == {1: "b"}


# -- Kafka-side reality --------------------------------------------------------------------------
def test_item10_a_partition_without_a_resume_point_starts_at_its_earliest_offset(kafka, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic = unique("parts")
    create_topic(kafka.bootstrap, topic, 3)
    path = tmp_path / "p.yaml"
    raw = pipeline_dict(kafka, tmp_path, tmp_path, topic, "x.p")
    raw["source"]["starting_offsets"] = "latest"
    path.write_text(yaml.safe_dump(raw))
    offsets = json.loads(source.starting_offsets_json(load_config(path).source, {(topic, 0): 0})[0])
    # partition 0 resumes; 1 and 2 (added since, never read) start at the beginning, not at 'latest'
    assert offsets == {topic: {"0": 0, "1": 0, "2": 0}}


def _events(start: int, n: int) -> list[bytes]:
    return [dumps({"id": f"e{i}", "event_time": "2026-11-28T10:00:00Z", "user_id": i, "event_type": "view",
                   "amount": 1.0}) for i in range(start, start + n)]


def _delete_below(bootstrap: str, topic: str, offset: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.delete_records([TopicPartition(topic, 0, offset)]).values()
    assert future.result(30).low_watermark == offset


@pytest.mark.parametrize("mode", ["continue", "stop"])
def test_item9_records_kafka_deleted_while_the_pipeline_was_down(kafka, spark, lake, tmp_path, mode, caplog) -> None:  # type: ignore[no-untyped-def]
    """The real broker deletes records below the pipeline's next offset while it is down (retention
    over a long weekend, done here with AdminClient.delete_records). 'continue': the run goes on from
    the oldest record still there, the gap is reported exactly, every surviving record lands once;
    'stop': the run ends with the partition and the lost range named, and nothing of the batch lands."""
    from tests.fixtures.records import send

    topic, table = unique("gone"), f"it.{unique('gone')}"
    create_topic(kafka.bootstrap, topic, 1)
    path = tmp_path / "gone.yaml"
    raw = pipeline_dict(kafka, lake, tmp_path, topic, table)
    raw["source"]["on_data_loss"] = mode
    if mode == "continue":  # a pattern: a topic created later is read from its start (#41, hole 5)
        raw["source"].pop("topics")
        raw["source"]["topic_pattern"] = f"{topic}(-late)?"
    path.write_text(yaml.safe_dump(raw))
    send(kafka.bootstrap, topic, _events(0, 100))
    run_in_process(spark, path)
    send(kafka.bootstrap, topic, _events(100, 100))
    _delete_below(kafka.bootstrap, topic, 150)
    if mode == "stop":
        with pytest.raises(Exception, match=rf"source.on_data_loss: .*{topic}\[0\] offsets 100-149 \(50 records\)"):
            run_in_process(spark, path)
        ids = [r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()]
        assert sorted(ids) == sorted(f"e{i}" for i in range(100))
        return
    # before the restart, `icetide offsets` shows what Kafka deleted unread
    shown = icetide_cli("offsets", "-c", str(path), "-o", "json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    held = json.loads(shown.stdout)[f"icetide.{table}"]
    assert (held["kafka_oldest"], held["deleted_unread"]) == ({f"{topic}[0]": 150}, {f"{topic}[0]": 50})
    # ... and the health figures: a metric and a critical reason (an alert) while the pipeline is down
    from icetide.health.watch import collect_all

    [health] = collect_all(spark, load_config(path), [table], alert=False)
    assert (health.kafka_lag, health.kafka_deleted_unread) == (100, 50)
    assert health.tier == "critical" and any(r.startswith("critical: Kafka deleted 50 records") for r in health.reasons)
    # a topic the pattern matches now, whose first 40 records retention deleted before the pipeline
    # ever read it: not a loss (it was reported as one, and with `stop` stopped every restart)
    late = f"{topic}-late"
    create_topic(kafka.bootstrap, late, 1)
    send(kafka.bootstrap, late, [dumps({"id": f"late{i}", "event_time": "2026-11-28T10:00:00Z", "user_id": i,
                                        "event_type": "view", "amount": 1.0}) for i in range(100)])
    _delete_below(kafka.bootstrap, late, 40)
    runner = run_in_process(spark, path)
    spark.catalog.refreshTable(f"icetide.{table}")
    ids = [r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()]
    assert sorted(ids) == sorted([*(f"e{i}" for i in [*range(100), *range(150, 200)]),
                                  *(f"late{i}" for i in range(40, 100))])  # each once
    c = runner.writer.counters
    assert (c.lost_records, c.gaps) == (50, {f"{topic}[0]": [[100, 150]]})
    assert f"50 records deleted by Kafka before they were read ({topic}[0] 100-149)" in runner_summary(runner)
    logged = spark.sql(f"SELECT DISTINCT kafka_gaps FROM icetide.icetide.ingest_batches WHERE run = '{runner.run_id}' "
                       "AND kafka_gaps IS NOT NULL").collect()
    assert [json.loads(r[0]) for r in logged] == [{f"{topic}[0]": [100, 150]}]
    alerts = [json.loads(r.getMessage()) for r in caplog.records if r.name == "icetide.alerts"]
    assert [(a["event"], a["partition"], a["records"], a["severity"]) for a in alerts] == [
        ("kafka_gap", f"{topic}[0]", 50, "critical")]
    # the checkpoint lost too: the tables' offsets are the resume point, and what retention deleted
    # above them is reported as a batch's gap is (it was a log line only)
    import shutil

    shutil.rmtree(tmp_path / "checkpoint")
    send(kafka.bootstrap, topic, _events(200, 100))
    _delete_below(kafka.bootstrap, topic, 250)
    caplog.clear()
    runner = run_in_process(spark, path)
    spark.catalog.refreshTable(f"icetide.{table}")
    ids = [r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()]
    assert len(ids) == len(set(ids)) == 100 + 50 + 60 + 50
    c = runner.writer.counters
    assert (c.lost_records, c.gaps) == (50, {f"{topic}[0]": [[200, 250]]})
    alerts = [json.loads(r.getMessage()) for r in caplog.records if r.name == "icetide.alerts"]
    assert [(a["event"], a["partition"], a["records"], a["batch"]) for a in alerts] == [
        ("kafka_gap", f"{topic}[0]", 50, None)]


def runner_summary(runner: Any) -> str:
    from icetide.app.runner import RunSummary

    return RunSummary(runner.run_id, runner.writer.counters, "idle").describe()


def test_item11_a_renamed_pipeline_is_refused_unless_it_adopts_the_old_offsets(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from icetide.errors import ConfigError
    from tests.fixtures.records import send

    topic, table = unique("ren"), f"it.{unique('ren')}"
    create_topic(kafka.bootstrap, topic, 1)
    old_name, new_name = unique("old").replace("_", "-"), unique("new").replace("_", "-")

    def config(name: str, **source: Any) -> Path:
        raw = pipeline_dict(kafka, lake, tmp_path / name, topic, table)
        raw["name"] = name
        raw["source"].update(source)
        raw["stream"]["takeover_after"] = "3 seconds"  # the adopted pipeline just stopped: a short wait (#41, 8)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        return path

    send(kafka.bootstrap, topic, _events(0, 100))
    run_in_process(spark, config(old_name))
    send(kafka.bootstrap, topic, _events(100, 50))
    with pytest.raises(ConfigError, match=rf"hold offsets of pipeline '{old_name}'.*adopt_offsets_from: {old_name}"):
        run_in_process(spark, config(new_name))
    run_in_process(spark, config(new_name, adopt_offsets_from=old_name))
    spark.catalog.refreshTable(f"icetide.{table}")
    ids = [r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()]
    assert sorted(ids) == sorted(f"e{i}" for i in range(150))  # resumed exactly where the old name stopped


# -- records as real producers write them -------------------------------------------------------
def test_item12_field_names_are_kept_as_producers_write_them(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.fixtures.records import send

    topic, table = unique("names"), f"it.{unique('names')}"
    create_topic(kafka.bootstrap, topic, 1)
    path = tmp_path / "names.yaml"
    raw = pipeline_dict(kafka, lake, tmp_path, topic, table)
    raw["target"] = {"table": table}  # the schema comes from the records
    raw["source"]["max_offsets_per_trigger"] = 6  # the first six records make the table, then the rest
    path.write_text(yaml.safe_dump(raw))
    first = [{"id": f"r{i}", "user-agent": "curl/8.5", "service.name": "checkout", "Order Id": 100 + i, "2fa": True,
              "größe": 1.5, "attributes": {"http.status_code": 200}, "re-tries": i} for i in range(5)]
    first.append({"id": "r5", "re-tries": "many"})  # one outlier: the column stays a number
    # later: a struct whose path equals the dotted column, and a name with a control character
    later = [{"id": "r6", "service": {"name": "x"}}, {"id": "r7", "bell\u0007": 1}, {"id": "r8", "user-agent": "wget"}]
    send(kafka.bootstrap, topic, [dumps(r) for r in [*first, *later]])
    run_in_process(spark, path)
    fq = f"icetide.{table}"
    df = spark.table(fq)
    want = {"user-agent": "string", "service.name": "string", "Order Id": "bigint", "2fa": "boolean",
            "größe": "double", "attributes": "struct<http.status_code:bigint>", "re-tries": "bigint"}
    assert {c: df.schema[c].dataType.simpleString() for c in want} == want
    got = {r[0]: r[1:] for r in df.select("id", "user-agent", "`service.name`", "Order Id", "größe",
                                          F.col("attributes").getField("http.status_code"), "re-tries").collect()}
    assert got["r3"] == ("curl/8.5", "checkout", 103, 1.5, 200, 3)
    classes = {r[0]: r[1] for r in spark.sql(f"SELECT error_class, count(*) FROM {fq}_dlq GROUP BY 1").collect()}
    assert classes == {"type_mismatch": 1, "ambiguous_field": 1, "invalid_field": 1}
    assert "service" not in spark.table(fq).columns
    assert spark.table(fq).where(F.col("id") == "r8").select("user-agent").first()[0] == "wget"


def test_item12_sanitize_maps_names_to_identifiers_and_keeps_the_producers_name(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path) -> None:
    from tests.fixtures.records import send

    topic, table = unique("sane"), f"it.{unique('sane')}"
    create_topic(kafka.bootstrap, topic, 1)
    path = tmp_path / "sane.yaml"
    raw = pipeline_dict(kafka, lake, tmp_path, topic, table)
    raw["target"] = {"table": table, "field_names": "sanitize"}
    raw["source"]["max_offsets_per_trigger"] = 3
    path.write_text(yaml.safe_dump(raw))
    send(kafka.bootstrap, topic, [dumps({"id": f"r{i}", "user-agent": "curl", "2fa": True,
                                         "attributes": {"service.name": "api"}}) for i in range(3)]
         # a later batch adds a sanitized column to the table and still reads the earlier ones
         + [dumps({"id": "r3", "user-agent": "wget", "größe": 2.5, "attributes": {"service.name": "web"}})])
    runner = run_in_process(spark, path)
    assert runner.writer.counters.batches == 2
    fq = f"icetide.{table}"
    spark.catalog.refreshTable(fq)
    df = spark.table(fq)
    assert {"user_x2Dagent", "_2fa", "gr_xF6_xDFe", "attributes"} <= set(df.columns)
    assert df.schema["attributes"].dataType.simpleString() == "struct<service_x2Ename:string>"
    assert df.schema["user_x2Dagent"].metadata.get("comment") == "icetide original name: user-agent"
    rows = {r[0]: r[1:] for r in df.select("id", "user_x2Dagent", "gr_xF6_xDFe", "attributes.service_x2Ename",
                                           "_2fa").collect()}
    assert rows == {"r0": ("curl", None, "api", True), "r1": ("curl", None, "api", True),
                    "r2": ("curl", None, "api", True), "r3": ("wget", 2.5, "web", None)}
    assert runner.writer.counters.dead_letters == 0
    # #41, hole 7: the mapping lives in a table property (created with the table, extended with each
    # evolution in the same commit), so an edited column comment does not drop the values, and a
    # literal field equal to a sanitized column is refused, never read into that column
    names = json.loads(table_property(spark, fq, "icetide.original-names") or "{}")
    assert names == {"user_x2Dagent": "user-agent", "_2fa": "2fa", "attributes.service_x2Ename": "service.name",
                     "gr_xF6_xDFe": "größe"}
    spark.sql(f"ALTER TABLE {fq} ALTER COLUMN user_x2Dagent COMMENT 'the client that sent it'")
    send(kafka.bootstrap, topic, [dumps({"id": "r4", "user-agent": "httpie"}),
                                  dumps({"id": "r5", "user_x2Dagent": "a literal"})])
    runner = run_in_process(spark, path)
    spark.catalog.refreshTable(fq)
    got = {r[0]: r[1] for r in spark.table(fq).where("id IN ('r4', 'r5')").select("id", "user_x2Dagent").collect()}
    assert got == {"r4": "httpie"}  # was: r4 null (matched by the edited comment), r5 'a literal'
    dead = spark.sql(f"SELECT error_class FROM icetide.{table.split('.')[0]}.{table.split('.')[1]}_dlq").collect()
    assert [r[0] for r in dead] == ["name_collision"]


# -- a topic deleted and created again (#41) ------------------------------------------------------------
def _recreate(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Delete ``topic`` and create it again under its name: its offsets start at 0 again, its id is new."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def topic_id() -> str:
        for _ in range(60):  # a topic just created is known to the controller a moment later
            try:
                return str(admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id)
            except Exception:
                time.sleep(0.5)
        raise AssertionError(f"{topic} has no id")

    old = topic_id()
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    deadline = time.monotonic() + 120
    while True:  # the deletion completes in the background; until then the name is taken
        try:
            admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
            break
        except Exception:
            assert time.monotonic() < deadline, f"{topic} could not be created again"
            time.sleep(1)
    assert topic_id() != old


def _named(prefix: str, start: int, n: int) -> list[bytes]:
    return [dumps({"id": f"{prefix}{i}", "event_time": "2026-11-28T10:00:00Z", "user_id": i, "event_type": "view",
                   "amount": 1.0}) for i in range(start, start + n)]


def test_item15_a_topic_deleted_and_created_again_is_read_again_from_its_start(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path) -> None:
    """#41, hole 2: 2,000 records of a topic ingested, the topic deleted and created again while the
    pipeline is stopped, 500 new records produced (offsets 0-499, all below the old position).
    ``stop``: the run ends at its start, naming the topic and the fix, and writes nothing. ``restart``
    (the default): all 500 land once, and a second topic of the same pipeline, not recreated, goes on
    exactly where it was; a later run reads neither again. Costs three short runs to idle and one that
    stops at its start (about a minute), 3,050 records."""
    from tests.fixtures.records import send

    topic, other, table = unique("again"), unique("other"), f"it.{unique('again')}"
    create_topic(kafka.bootstrap, topic, 1)
    create_topic(kafka.bootstrap, other, 1)
    path = tmp_path / "again.yaml"
    raw = pipeline_dict(kafka, lake, tmp_path, topic, table)
    raw["source"].update(topics=[topic, other], on_topic_recreated="stop")
    path.write_text(yaml.safe_dump(raw))
    send(kafka.bootstrap, topic, _named("a", 0, 2000))
    send(kafka.bootstrap, other, _named("b", 0, 300))
    run_in_process(spark, path)
    recorded = json.loads((tmp_path / "checkpoint" / "icetide-topics.json").read_text())["topic_ids"]
    assert set(recorded) == {topic, other}

    _recreate(kafka.bootstrap, topic)
    send(kafka.bootstrap, topic, _named("n", 0, 500))
    send(kafka.bootstrap, other, _named("b", 300, 100))
    before = sorted([*(f"a{i}" for i in range(2000)), *(f"b{i}" for i in range(300))])
    with pytest.raises(TopicRecreatedError, match=rf"source\.on_topic_recreated: topic '{topic}' \(topic id \S+ -> "
                                                  r"\S+\).*Nothing was written.*set source\.on_topic_recreated: "
                                                  r"restart"):
        run_in_process(spark, path)
    spark.catalog.refreshTable(f"icetide.{table}")
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()) == before

    _edit(path, source={"on_topic_recreated": "restart"})
    runner = run_in_process(spark, path)  # was: "0 batches", none of the 500 ever landed
    want = before + [f"n{i}" for i in range(500)] + [f"b{i}" for i in range(300, 400)]
    spark.catalog.refreshTable(f"icetide.{table}")
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()) == sorted(want)  # each once
    assert list(runner.writer.counters.recreated) == [topic]
    assert f"topic {topic} was deleted and created again" in runner_summary(runner)
    assert len(list(tmp_path.glob("checkpoint.recreated-*"))) == 1  # the old checkpoint, set aside
    mirror = table_property(spark, f"icetide.{table}", PROPERTY_PREFIX + load_config(path).name)
    assert mirror is not None and topic in Watermark.from_property(mirror).restarts

    send(kafka.bootstrap, topic, _named("n", 500, 100))
    send(kafka.bootstrap, other, _named("b", 400, 50))
    runner = run_in_process(spark, path)
    assert runner.writer.counters.recreated == {}
    want += [f"n{i}" for i in range(500, 600)] + [f"b{i}" for i in range(400, 450)]
    spark.catalog.refreshTable(f"icetide.{table}")
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()) == sorted(want)
    assert len(list(tmp_path.glob("checkpoint.recreated-*"))) == 1


# -- every commit path fenced; a compaction during a fenced write (#41) -------------------------------
def _at(monkeypatch: pytest.MonkeyPatch, point: str, table: str, action: Any) -> list[str]:
    """Run ``action`` once, the first time this process reaches ``point`` for ``table``: another
    process's commit landing while this one is paused there. Returns the points reached."""
    from icetide import faults

    reached: list[str] = []
    real = faults.point

    def hook(name: str, detail: str = "") -> None:
        if name == point and detail == table:
            reached.append(name)
            if len(reached) == 1:
                action()
        real(name, detail)

    monkeypatch.setattr(faults, "point", hook)
    return reached


def test_item16_an_append_spark_commits_itself_is_fenced(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path, monkeypatch) -> None:
    """#41, hole 1: a partial replay (and a table that asks for a write ordering) is appended by
    Spark's own writer, which was fenced only by a fresh read before the write: a run paused after
    that read, while a standby commits the same range, then landed it too (duplicates). Now it
    stages on a branch and lands through the fence, so the paused run's append is refused.
    Costs about 10 s (no pipeline run)."""
    from pyspark.sql import Observation

    fq = _shared_table(spark)
    cfg = _ledger_config(kafka, lake, tmp_path, "pipe-h", "x.h")
    _append(spark, Ledger(spark, cfg, "runfirst"), fq, 0, 0)
    paused, standby = Ledger(spark, cfg, "runpaused"), Ledger(spark, cfg, "runstandby")
    paused.watermark(fq), standby.watermark(fq)  # both read the ledger: batch 0
    reached = _at(monkeypatch, "before_table_commit", fq, lambda: _append(spark, standby, fq, 1, 1))
    stats = Observation("paused")
    rows = spark.range(1, 2).select(F.col("id").cast("bigint").alias("id")).observe(stats, F.count(F.lit(1)))
    with pytest.raises(FencedError, match="icetide-fence"):  # was: appended, id 1 twice
        paused.commit(fq, rows, lambda d: d, 1, BatchRanges({("t", 0): (1, 2)}), None, stats)
    assert reached == ["before_table_commit"]  # the paused run reached it (and the standby committed there)
    assert sorted(r[0] for r in spark.table(fq).collect()) == [0, 1]
    assert [r[0] for r in spark.sql(f"SELECT name FROM {fq}.refs").collect()] == ["main"]  # no branch left


def _cdc_table(kafka: Any, spark: Any, lake: Path, tmp_path: Path) -> tuple[str, PipelineConfig]:
    """A CDC table whose keys 1-4 and 5-8 were written by two batches (their own data files)."""
    topic, table = unique("hot"), f"it.{unique('hot')}"
    create_topic(kafka.bootstrap, topic, 1)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"ordering": "version", "tombstones": False})
    for keys in (range(1, 5), range(5, 9)):
        _send(kafka.bootstrap, topic, *[{"id": k, "name": f"n{k}", "balance": 1.0, "op": "insert", "version": 1}
                                        for k in keys])
        run_in_process(spark, cfg)
    return table, load_config(cfg)


def test_item17_a_compaction_landing_during_a_fenced_merge(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path, monkeypatch) -> None:
    """#41, hole 4: a compaction that lands while a fenced MERGE sits on its branch made the
    fast-forward fail ("Cannot fast-forward: main is not an ancestor"), and the MERGE ran again, so
    in-run maintenance of a busy CDC table could exhaust the retries. Now the MERGE's snapshot is
    replayed onto the compacted head with Spark's own conflict checks: a compaction of other files
    costs no retry; one of the files the MERGE's deletes reference is a conflict, the MERGE runs
    again once, and no old row version comes back. Costs about 50 s (two short runs, two MERGEs)."""
    table, cfg = _cdc_table(kafka, spark, lake, tmp_path)
    fq = f"icetide.{table}"
    ledger = Ledger(spark, cfg, "hotrun")
    want = {k: f"n{k}" for k in range(1, 9)}
    assert cfg.target.cdc is not None
    for batch, (key, where, retried) in enumerate([(1, "id >= 5", 0), (2, "id <= 4", 1)]):
        files = {r[0] for r in spark.sql(f"SELECT file_path FROM {fq}.files WHERE content = 0").collect()}

        def compact(where: str = where) -> None:
            spark.sql(f"CALL icetide.system.rewrite_data_files(table => '{table}', where => '{where}', "
                      "options => map('rewrite-all', 'true'))").collect()

        reached = _at(monkeypatch, "between_write_and_publish", fq, compact)
        pending = ledger.begin(fq, 10_000 + batch, BatchRanges({(cfg.source.topics[0], 0): (8 + batch, 9 + batch)}))
        assert pending is not None
        change = (spark.table(fq).where(f"id = {key}").withColumn("name", F.lit("updated"))
                  .withColumn(cdc.ORDERING, F.lit(2).cast("bigint")).withColumn(cdc.OP, F.lit("upsert")))
        retries = cdc.merge_retrying_conflicts(spark, pending.tags, change, fq, cfg.target.cdc,
                                               fence=ledger.merge_fence(pending))
        ledger.finish(pending, None)
        assert reached, "the compaction did not land between the MERGE and its publish"
        now = {r[0] for r in spark.sql(f"SELECT file_path FROM {fq}.files WHERE content = 0").collect()}
        assert files - now, f"the compaction ({where}) rewrote nothing: the test proves nothing"
        assert retries == retried, where  # was 1 for both
        want[key] = "updated"
        assert _rows(spark, table, "id", "name") == want
        assert spark.sql(f"SELECT count(*) FROM {fq}").first()[0] == 8  # no old version of a key back
        assert [r[0] for r in spark.sql(f"SELECT name FROM {fq}.refs").collect()] == ["main"]
        head = spark.sql(f"SELECT summary FROM {fq}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
        assert head.get("icetide.batch") == str(10_000 + batch) and head.get("icetide.pipeline") == cfg.name
