"""CDC edges: no Kafka metadata columns, Debezium's Kafka tombstones, and a crash between a MERGE and
its tombstones followed by an older change for the deleted key."""

from __future__ import annotations

import json
import logging
from typing import Any

import yaml

from icetide.demo.events import create_topic
from tests.fixtures.cdc_stream import ChangeStream, assert_final_state, cdc_config, generate, send_changes
from tests.fixtures.records import dumps
from tests.fixtures.stack import run_in_process, start, unique


def _set_target(cfg: Any, **target: Any) -> None:
    raw = yaml.safe_load(cfg.read_text())
    raw["target"].update(target)
    cfg.write_text(yaml.safe_dump(raw))


def _one_partition(kafka: Any, lake: Any, tmp_path: Any, prefix: str) -> tuple[str, Any, Any]:
    """A one-partition topic, a CDC table ordered by ``version`` and a sender of JSON changes to it."""
    topic, table = unique(prefix), f"it.{unique(prefix)}"
    create_topic(kafka.bootstrap, topic, 1)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"ordering": "version"})

    def send(*changes: dict[str, Any]) -> None:
        stream = ChangeStream(messages=[(int(ch["id"]), dumps(ch)) for ch in changes])
        send_changes(kafka.bootstrap, topic, stream, partitions=1)
    return table, cfg, send


def test_debezium_tombstones_are_skipped_deletes_without_before_applied_and_no_metadata_columns_exact(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path) -> None:
    topic, table = unique("cdct"), f"it.{unique('cdct')}"
    create_topic(kafka.bootstrap, topic, 4)
    # #41 (3): every 4th delete has a null `before` (REPLICA IDENTITY NOTHING): deleted by the key
    # Debezium writes into the Kafka key, never counted as a Kafka tombstone
    stream = generate(5_000, 40_000, seed=51, debezium=True, bad_every=997, kafka_tombstones=True,
                      null_before_every=4)
    assert stream.tombstones > 1000 and stream.null_before > 200
    send_changes(kafka.bootstrap, topic, stream, json_keys=True)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"format": "debezium", "ordering": "source.lsn"})
    _set_target(cfg, kafka_metadata_columns=False)

    runner = run_in_process(spark, cfg)

    assert_final_state(spark, table, stream)
    assert not [c for c in spark.table(f"icetide.{table}").columns if c.startswith("_kafka_")]
    dlq = {r[0]: r[1] for r in spark.sql(f"SELECT error_class, count(*) FROM icetide.{table}_dlq GROUP BY 1").collect()}
    assert dlq == stream.bad, "Kafka tombstones must not be dead letters"
    c = runner.writer.counters
    assert c.tombstones_skipped == stream.tombstones
    assert c.records == len(stream.messages)


def test_a_crash_between_merge_and_tombstones_never_lets_an_older_change_resurrect_a_row(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path) -> None:
    table, cfg, send = _one_partition(kafka, lake, tmp_path, "cdcm")
    log = tmp_path / "run.log"

    send({"id": 1, "name": "a", "balance": 1.0, "op": "insert", "version": 1},
         {"id": 2, "name": "b", "balance": 2.0, "op": "insert", "version": 1})
    run_in_process(spark, cfg)
    send({"id": 1, "name": "a", "balance": 1.0, "op": "delete", "version": 5})
    # the MERGE of the delete commits, then the process dies before the tombstone is appended
    killed = start(cfg, log, "--until-idle", "--for", "600", fault="between_merge_and_tombstones")
    assert killed.wait(700) == -9, log.read_text()[-3000:]
    assert "fault injection: killing the process at between_merge_and_tombstones" in log.read_text()
    spark.catalog.refreshTable(f"icetide.{table}")
    assert {r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()} == {2}
    run_in_process(spark, cfg)  # the replay records the tombstone
    tombs = spark.sql(f"SELECT id, _cdc_ordering FROM icetide.{table}_tombstones").collect()
    assert {(r[0], r[1]) for r in tombs} == {(1, 5)}
    # an older change for the deleted key arrives late: it must not bring the row back
    send({"id": 1, "name": "stale", "balance": 9.0, "op": "update", "version": 3},
         {"id": 2, "name": "b2", "balance": 3.0, "op": "update", "version": 2})
    run_in_process(spark, cfg)
    rows = {r[0]: r[1] for r in spark.sql(f"SELECT id, name FROM icetide.{table}").collect()}
    assert rows == {2: "b2"}


def test_a_kill_between_a_merge_on_its_branch_and_its_publish_lands_the_batch_once(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path) -> None:
    """The fenced MERGE is on its branch, not yet on main, when the process dies: main holds none
    of it, and the next run lands the batch exactly once (the branch left behind is not main's, and
    the next run drops it)."""
    table, cfg, send = _one_partition(kafka, lake, tmp_path, "cdcp")
    log = tmp_path / "run.log"

    send(*({"id": i, "name": f"n{i}", "balance": float(i), "op": "insert", "version": 1} for i in range(10)))
    run_in_process(spark, cfg)
    send({"id": 1, "name": "n1", "balance": 1.0, "op": "delete", "version": 2},
         {"id": 2, "name": "two", "balance": 2.5, "op": "update", "version": 2},
         {"id": 10, "name": "ten", "balance": 10.0, "op": "insert", "version": 1})
    killed = start(cfg, log, "--until-idle", "--for", "600", fault="between_write_and_publish")
    assert killed.wait(700) == -9, log.read_text()[-3000:]
    assert "fault injection: killing the process at between_write_and_publish" in log.read_text()
    spark.catalog.refreshTable(f"icetide.{table}")
    before = {r[0]: r[1] for r in spark.sql(f"SELECT id, name FROM icetide.{table}").collect()}
    assert before == {i: f"n{i}" for i in range(10)}  # nothing of the batch on main
    branches = [r[0] for r in spark.sql(f"SELECT name FROM icetide.{table}.refs WHERE type = 'BRANCH'").collect()]
    assert [b for b in branches if b.startswith("icetide_")], branches  # the write reached its branch
    run_in_process(spark, cfg)
    spark.catalog.refreshTable(f"icetide.{table}")
    # #41 (8): the next run's first commit drops the branch the crash left (it pinned the files its
    # write made for a day, until it expired)
    left = [r[0] for r in spark.sql(f"SELECT name FROM icetide.{table}.refs WHERE type = 'BRANCH'").collect()]
    assert left == ["main"], left
    rows = {r[0]: r[1] for r in spark.sql(f"SELECT id, name FROM icetide.{table}").collect()}
    assert rows == {**{i: f"n{i}" for i in range(10) if i != 1}, 2: "two", 10: "ten"}
    tombs = {(r[0], r[1]) for r in spark.sql(f"SELECT id, _cdc_ordering FROM icetide.{table}_tombstones").collect()}
    assert tombs == {(1, 2)}
    snaps = spark.sql(f"SELECT summary['icetide.batch'] FROM icetide.{table}.snapshots s "
                      f"JOIN icetide.{table}.history h ON s.snapshot_id = h.snapshot_id "
                      "WHERE h.is_current_ancestor AND s.summary['icetide.pipeline'] IS NOT NULL").collect()
    assert len(snaps) == 2, snaps  # the first batch and the replayed one: one commit each on main



def test_a_changes_own_fields_named_like_the_helper_columns_are_kept(spark) -> None:  # type: ignore[no-untyped-def]
    """#41 (6): a change's fields named ``_rn``, ``_TB`` and ``_tb_0`` (any case: Spark resolves names
    case-insensitively) survive the newest-change-per-key pick and the tombstone filter unchanged.
    icetide's helper columns sit under the reserved ``_cdc_`` prefix, which no record field may use.
    On the session's Spark, no pipeline run (a second or two)."""
    from icetide.config.target import CdcSettings
    from icetide.ingest.cdc import OP, ORDERING, POSITION, latest_per_key, not_buried

    cdc = CdcSettings(primary_key=["id"], ordering="version")
    changes = spark.createDataFrame(
        [(1, "r-old", "t-old", "z-old", 1, 10, 0, "upsert"), (1, "r-new", "t-new", "z-new", 2, 11, 0, "upsert"),
         (2, "r-2", "t-2", "z-2", 5, 12, 0, "upsert"), (3, "r-3", "t-3", "z-3", 9, 13, 0, "upsert")],
        f"id BIGINT, _rn STRING, _TB STRING, _tb_0 STRING, {ORDERING} BIGINT, _kafka_offset BIGINT, "
        f"_kafka_partition INT, {OP} STRING")
    latest = latest_per_key(changes, cdc)
    got = {r["id"]: (r["_rn"], r["_TB"], r["_tb_0"]) for r in latest.collect()}
    assert got == {1: ("r-new", "t-new", "z-new"), 2: ("r-2", "t-2", "z-2"), 3: ("r-3", "t-3", "z-3")}, got

    # key 2 was deleted at ordering 7 (the change at 5 is older: buried); key 3's delete at 4 is older
    tombstones = spark.createDataFrame([(2, 7), (3, 4)], f"id BIGINT, {ORDERING} BIGINT")
    kept = not_buried(latest, tombstones, cdc)
    assert sorted(kept.columns) == sorted(latest.columns) and POSITION in kept.columns
    rows = {r["id"]: (r["_rn"], r["_TB"], r["_tb_0"]) for r in kept.collect()}
    assert rows == {1: ("r-new", "t-new", "z-new"), 3: ("r-3", "t-3", "z-3")}, rows


def test_a_debezium_change_without_a_readable_after_is_never_a_skipped_tombstone(spark) -> None:  # type: ignore[no-untyped-def]
    """#41 review: a change that is not a delete and has no readable ``after`` (op ``t``/``m``, a null
    ``after``, a malformed or non-object value) keeps a value, so it is parsed and dead-lettered by
    class, never counted as a Kafka tombstone; only a null Kafka value is one. A key whose own column
    is named ``schema`` is the key, not the converter's envelope. On the session's Spark, no pipeline run."""

    from icetide.config.target import CdcSettings
    from icetide.ingest.cdc import OP, key_row, unwrap

    cdc = CdcSettings(format="debezium", primary_key=["id"], ordering="source.lsn")
    values = {
        "truncate": '{"op":"t","before":null,"after":null,"source":{"lsn":5}}',
        "message": '{"op":"m","source":{"lsn":6},"message":{"prefix":"x"}}',
        "create without after": '{"op":"c","before":null,"after":null,"source":{"lsn":7}}',
        "malformed": '{"op":"c","after":{"id":1',
        "not an object": '[1,2,3]',
        "tombstone": None,
        "good": '{"op":"u","before":null,"after":{"id":3,"v":"x"},"source":{"lsn":9}}',
    }
    rows = spark.createDataFrame(
        [(k, None if v is None else v.encode(), b'{"schema":"s1","id":3}') for k, v in values.items()],
        "k STRING, value BINARY, _kafka_key BINARY")
    got = {r["k"]: (r["value"], r[OP]) for r in unwrap(rows, cdc).select("k", "value", OP).collect()}
    assert got["tombstone"][0] is None
    for k in values:
        if k != "tombstone":
            assert got[k][0] is not None, f"{k}: its value was dropped (it would be skipped as a tombstone)"
    assert got["truncate"][1] is None and got["message"][1] is None  # unknown_operation dead letters
    assert bytes(got["good"][0]) == b'{"id":3,"v":"x"}'
    keys = spark.createDataFrame([('{"schema":"s1","id":3}',), ('{"schema":{"type":"struct"},"payload":{"id":4}}',),
                                  ('{"schema":{"type":"struct"},"payload":null}',), ("[1]",)], "_kafka_key STRING")
    assert [r[0] for r in keys.select(key_row()).collect()] == ['{"schema":"s1","id":3}', '{"id":4}', None, None]


def _batches_of(cfg: Any, records: int) -> None:
    raw = yaml.safe_load(cfg.read_text())
    raw["source"]["max_offsets_per_trigger"] = records
    cfg.write_text(yaml.safe_dump(raw))


def _events(caplog: Any) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records
            if r.name == "icetide.ingest.sink" and r.getMessage().startswith('{"event": "batch"')]


def test_plain_changes_settle_their_shapes_and_a_debezium_row_sent_as_a_string_still_evolves(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path, caplog) -> None:
    """#39 item 4: a plain change's shape is its row's, so a CDC table's shapes settle like an append
    table's (a batch of known shapes skips inference) and a new string field whose shapes are all
    strings is typed with no count over the batch. A Debezium row may come as a JSON string (MongoDB's
    connector), whose fields the envelope's shape never sees: a field new inside it, in a batch of a
    known envelope shape, is still inferred and lands. One partition, batches of 100 changes."""
    caplog.set_level(logging.INFO, logger="icetide")
    caplog.set_level(logging.DEBUG, logger="icetide.ingest.value_checks")
    table, cfg, send = _one_partition(kafka, lake, tmp_path, "cdcs")
    _batches_of(cfg, 100)
    send(*({"id": i % 50, "name": f"n{i}", "balance": float(i), "op": "insert" if i < 50 else "update",
            "version": i} for i in range(400)))
    runner = run_in_process(spark, cfg)
    rows = {r[0]: r[1] for r in spark.sql(f"SELECT id, name FROM icetide.{table}").collect()}
    assert rows == {k: f"n{350 + k}" for k in range(50)}
    # each batch after the first (which evolved the table: op, version) was parsed once, into its cache
    assert runner.writer.per_table.parsed_in_cache == 3
    events = [e for e in _events(caplog) if e["records"]]
    assert len(events) == 4 and table in events[0]["inferred"], [e["inferred"] for e in events]
    assert [table in e["inferred"] for e in events[1:]] == [False, False, False], [e["inferred"] for e in events]
    assert any("strings in every shape" in r.getMessage() and "'op'" in r.getMessage() for r in caplog.records
               if r.name == "icetide.ingest.value_checks"), "the new op column's kinds were counted over the batch"

    topic, table = unique("cdcg"), f"it.{unique('cdcg')}"
    create_topic(kafka.bootstrap, topic, 1)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"format": "debezium", "ordering": "source.lsn"})
    _batches_of(cfg, 100)

    def change(i: int) -> bytes:
        row = {"id": i, "name": f"n{i}", "balance": float(i), **({"email": f"u{i}@x"} if i >= 250 else {}),
               **({f"f{i - 249}": i} if 250 <= i < 258 else {})}  # one record each: no 1-in-64 sample holds them all
        return dumps({"op": "c", "before": None, "after": json.dumps(row), "source": {"lsn": i}})
    send_changes(kafka.bootstrap, topic, ChangeStream(messages=[(i, change(i)) for i in range(400)]), partitions=1)
    runner = run_in_process(spark, cfg)
    got = spark.sql(f"SELECT count(*), count(email), {', '.join(f'count(f{k})' for k in range(1, 9))} "
                    f"FROM icetide.{table}").first()
    assert tuple(got) == (400, 150, *([1] * 8)), got
    # the table is made from target.schema before the first batch, so every batch is parsed into its
    # cache but batch 2, which evolved the table (email, f1..f8): parsed again against the new schema
    assert runner.writer.per_table.parsed_in_cache == 3
