"""Steady batches, routed or into one table, are written in one pass over the batch; anything the
pass cannot settle (a shape the schema does not fit, bad records, a new table, a bad routing value)
still lands exactly once through the usual path, and the files of a table the pass aborted are gone.
Real Kafka, Spark and Iceberg."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from typing import Any

import yaml

from icetide.app.runner import Runner
from icetide.config import load_config
from icetide.demo.events import create_topic
from tests.fixtures.records import Background, dumps, send, wait_until
from tests.fixtures.stack import counts, pipeline_dict, routed_config, unique


def test_steady_batches_take_one_pass_and_the_rest_still_lands(kafka, spark, lake, tmp_path,
                                                                caplog) -> None:  # type: ignore[no-untyped-def]
    ns = unique("op")
    topic = f"op-{ns[3:]}"
    create_topic(kafka.bootstrap, topic, 2)
    path = routed_config(kafka, lake, tmp_path, ns, topic, schema="id STRING, kind STRING, n BIGINT, ts TIMESTAMP")
    raw = yaml.safe_load(path.read_text())
    raw["stream"]["discovery_records"] = 120  # the heads of the 2 partitions hold 3 of the first batch's 4 tables
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    caplog.set_level(logging.INFO, logger="icetide")
    produced: Counter[str] = Counter()
    ids: dict[str, list[str]] = {}
    seq = iter(range(10**9))

    def record(kind: str, **fields: Any) -> bytes:
        i = f"r{next(seq)}"
        produced[kind] += 1
        ids.setdefault(kind, []).append(i)
        return dumps({"id": i, "kind": kind, "n": 7, "ts": "2026-11-26T10:00:00Z", **fields})

    def events() -> list[dict[str, Any]]:
        return [json.loads(r.getMessage()) for r in caplog.records
                if r.name == "icetide.ingest.sink" and r.getMessage().startswith('{"event": "batch"')]

    def landed(dead: int) -> bool:
        return (sum(e["records"] for e in events()) == sum(produced.values()) + dead
                and all(counts(spark, ns).get(k, 0) == n for k, n in produced.items()))

    # The first batch, produced before the pipeline starts: 600 records of three tables, then 100 of
    # a fourth that start deeper in each partition than the 120 records discovery reads.
    send(kafka.bootstrap, topic, [record(k) for k in ("orders", "clicks", "views") * 200]
         + [record("late") for _ in range(100)], 2)
    runner = Runner(cfg, spark=spark)
    with Background(runner):
        wait_until(lambda: landed(0), 240, "the first rows")
        first = len(events())
        # #39 item 3: the first batch found its tables from the partitions' heads, created them from
        # target.schema and wrote them in one pass (their shapes settled from the pass's kept values);
        # the table the heads did not show took the usual path, created there.
        opening = events()[0]
        phases = {"discover_read", "discover_create", "one_pass_job", "admit"}
        assert opening["records"] == 700 and phases <= set(opening["timings"]), opening
        assert sorted(opening["created"]) == [f"{ns}.{k}" for k in ("clicks", "late", "orders", "views")], opening
        assert opening["inferred"] and set(opening["inferred"]) >= {f"{ns}.{k}" for k in ("clicks", "orders", "views")}
        by_one_pass = {r.getMessage().rsplit(".", 1)[1] for r in caplog.records if r.name == "icetide.ingest.one_pass"
                       and r.getMessage().startswith(f"committing batch {opening['batch']} to ")}
        assert by_one_pass == {"clicks", "orders", "views"}, by_one_pass
        send(kafka.bootstrap, topic, [record(k) for k in ("orders", "clicks", "views") * 200], 2)
        wait_until(lambda: landed(0), 240, "rows of known shapes")
        steady = [e for e in events()[first:] if e["records"]]
        assert steady, "no batch after the first"
        for e in steady:  # written in one pass: no routing pass, no cache, no inference
            assert "one_pass_job" in e["timings"] and "admit" not in e["timings"], e["timings"]
        assert {t.split(".")[1] for e in steady for t in e["written"]} == {"orders", "clicks", "views"}

        mark = len(events())
        mixed = (
            [record("orders", meta={"deep": "yes"}) for _ in range(100)]  # a new nested field
            + [record("clicks") for _ in range(100)] + [record("views") for _ in range(100)]
            + [dumps({"id": "bad", "kind": "clicks", "n": "seven"}) for _ in range(50)]  # type mismatch
            + [record("refunds") for _ in range(100)]  # a new table
            + [dumps({"id": "bad", "kind": "../x"}) for _ in range(20)]  # a hostile routing value
            + [b'{"id": "bad", "kind": "clicks", ' for _ in range(20)]  # malformed JSON
        )
        send(kafka.bootstrap, topic, mixed, 2)
        wait_until(lambda: landed(90), 240, "the mixed rows and 90 dead letters")
        later = [e for e in events()[mark:] if e["records"]]
        # orders now has its own schema: the one pass parses it apart from the tables that share one
        after = len(events())
        send(kafka.bootstrap, topic, [record(k, **({"meta": {"deep": "no"}} if k == "orders" else {}))
                                      for k in ("orders", "views", "refunds") * 100], 2)
        wait_until(lambda: landed(90), 240, "rows after the evolution")
        final = [e for e in events()[after:] if e["records"]]

    assert runner.restarts == 0
    # Each later batch tried the one pass first (the three tables were written recently) ...
    assert all("one_pass_job" in e["timings"] for e in later), [e["timings"] for e in later]
    # ... and what it could not settle went through the usual path: orders' new shape was inferred
    # there, refunds created, the bad records dead-lettered.
    assert any("admit" in e["timings"] for e in later)
    assert any(f"{ns}.orders" in e["inferred"] for e in later)
    assert any(f"{ns}.refunds" in e["created"] for e in later)
    assert sum(e["dead_letters"] for e in later) == 90

    assert all("one_pass_job" in e["timings"] for e in final), [e["timings"] for e in final]

    c = counts(spark, ns)
    assert {k: c[k] for k in produced} == dict(produced)
    for kind, want in ids.items():
        got = [r[0] for r in spark.sql(f"SELECT id FROM icetide.{ns}.{kind}").collect()]
        assert len(got) == len(set(got)) and set(got) == set(want), f"{kind}: lost or duplicated rows"
    assert spark.sql(f"SELECT count(*) FROM icetide.{ns}.orders WHERE meta.deep = 'yes'").first()[0] == 100
    assert spark.sql(f"SELECT count(*) FROM icetide.{ns}.orders WHERE meta.deep = 'no'").first()[0] == 100
    classes = {(r[0], r[1]): r[2] for r in spark.sql(
        f"SELECT error_class, target_table, count(*) FROM icetide.{ns}.dead_letters GROUP BY 1, 2").collect()}
    assert classes == {("type_mismatch", f"{ns}.clicks"): 50, ("invalid_route", None): 20,
                       ("malformed_json", None): 20}, classes

    # The one pass wrote orders' mixed batch with the old schema, then aborted it: no file of it is
    # left behind, and every data file on disk is one the table references.
    location = spark.sql(f"DESCRIBE TABLE EXTENDED icetide.{ns}.orders").where("col_name = 'Location'").first()[1]
    root = location.removeprefix("file:")
    on_disk = {os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "data"))
               for f in fs if f.endswith(".parquet")}
    referenced = {r[0].removeprefix("file:") for r in spark.sql(
        f"SELECT file_path FROM icetide.{ns}.orders.all_data_files").collect()}
    assert on_disk and on_disk == referenced, on_disk ^ referenced


def test_one_table_takes_one_pass_from_its_first_batch(kafka, spark, lake, tmp_path,
                                                       caplog) -> None:  # type: ignore[no-untyped-def]
    """A single-table pipeline with ``target.schema``: its first batch creates the table and writes
    it in one pass; a new shape that fits the schema is settled from the pass's kept values; a new
    field, a type mismatch and malformed JSON still evolve the table or become dead letters, once."""
    ns = unique("opt")
    topic = f"opt-{ns[4:]}"
    table = f"{ns}.events"
    create_topic(kafka.bootstrap, topic, 2)
    raw = pipeline_dict(kafka, lake, tmp_path, topic, table)
    raw["target"]["schema"] = "id STRING, event_time TIMESTAMP, user_id BIGINT, event_type STRING"
    raw["stream"]["batch_log_table"] = f"{ns}.batches"
    path = tmp_path / f"{ns}.yaml"
    path.write_text(yaml.safe_dump(raw))
    caplog.set_level(logging.INFO, logger="icetide")
    ids: list[str] = []
    seq = iter(range(10**9))

    def record(**fields: Any) -> bytes:
        i = f"e{next(seq)}"
        ids.append(i)
        return dumps({"id": i, "event_time": "2026-11-26T10:00:00Z", "user_id": 7, "event_type": "view", **fields})

    def events() -> list[dict[str, Any]]:
        return [e for e in (json.loads(r.getMessage()) for r in caplog.records if r.name == "icetide.ingest.sink"
                            and r.getMessage().startswith('{"event": "batch"')) if e["records"]]

    def landed(dead: int) -> bool:
        return sum(e["records"] for e in events()) == len(ids) + dead and \
            spark.sql(f"SELECT count(*) FROM icetide.{table}").first()[0] == len(ids)

    runner = Runner(load_config(path), spark=spark)
    with Background(runner):
        send(kafka.bootstrap, topic, [record() for _ in range(300)], 2)
        wait_until(lambda: spark.catalog.tableExists(f"icetide.{table}") and landed(0), 240, "the first rows")
        first = events()
        assert first[0]["created"] == [table], first[0]
        for e in first:  # the table made from target.schema, then the batch written in one pass
            assert "one_pass_job" in e["timings"] and "admit" not in e["timings"], e["timings"]
        mark = len(events())
        # null where a string was: a new shape, and one the schema fits (no inference over the batch)
        send(kafka.bootstrap, topic, [record(event_type=None) for _ in range(100)], 2)
        wait_until(lambda: landed(0), 240, "rows of a new shape that fits")
        fitting = events()[mark:]
        assert all("one_pass_job" in e["timings"] and "admit" not in e["timings"] for e in fitting), fitting
        assert any(table in e["inferred"] for e in fitting), fitting
        mark = len(events())
        mixed = ([record(meta={"source": "app"}) for _ in range(100)]  # a new field: evolution
                 + [dumps({"id": "bad", "event_time": "2026-11-26T10:00:00Z", "user_id": "seven"})
                    for _ in range(30)]  # type mismatch
                 + [b'{"id": "bad", "user_id": ' for _ in range(20)])  # malformed JSON
        send(kafka.bootstrap, topic, mixed, 2)
        wait_until(lambda: landed(50), 240, "the new field's rows and 50 dead letters")
        later = events()[mark:]

    assert runner.restarts == 0
    assert any("admit" in e["timings"] and e["evolved"].get(table) for e in later), later
    got = [r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()]
    assert len(got) == len(set(got)) and set(got) == set(ids), "lost or duplicated rows"
    assert spark.sql(f"SELECT count(*) FROM icetide.{table} WHERE meta.source = 'app'").first()[0] == 100
    assert spark.sql(f"SELECT count(*) FROM icetide.{table} WHERE event_type IS NULL").first()[0] == 100
    classes = {r[0]: r[1] for r in spark.sql(
        f"SELECT error_class, count(*) FROM icetide.{table}_dlq GROUP BY 1").collect()}
    assert classes == {"type_mismatch": 30, "malformed_json": 20}, classes


def test_a_table_asking_for_a_hash_distribution_is_shuffled_by_partition_in_the_one_pass(
        kafka, spark, lake, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """A table with ``write.distribution-mode=hash`` (Iceberg's default, the one Spark's own append
    honours with a shuffle) is written by the one pass too, its rows shuffled by the table's
    partition first: each batch writes one file per partition, though two tasks read it, and nothing is
    lost or written twice. Before, the one pass refused such a table and every batch took the usual
    path (a cache, admission, then Spark's append)."""
    ns = unique("oph")
    topic = f"oph-{ns[4:]}"
    table = f"{ns}.events"
    create_topic(kafka.bootstrap, topic, 2)
    raw = pipeline_dict(kafka, lake, tmp_path, topic, table)
    raw["target"]["properties"] = {"write.distribution-mode": "hash"}
    # every kind of key: a time transform, a bucket, a truncation (each the catalog's function)
    raw["target"]["partition_by"] = ["days(event_time)", "bucket(4, user_id)", "truncate(1, event_type)"]
    raw["source"]["records_per_task"] = 100  # two tasks a batch: without the shuffle, two files a day
    path = tmp_path / f"{ns}.yaml"
    path.write_text(yaml.safe_dump(raw))
    caplog.set_level(logging.INFO, logger="icetide")
    days = ("2026-11-24", "2026-11-25", "2026-11-26")
    ids = [f"h{i}" for i in range(600)]
    values = [dumps({"id": i, "event_time": f"{days[k % 3]}T{k % 24:02d}:00:00Z", "user_id": k, "event_type": "view",
                     "amount": 1.5}) for k, i in enumerate(ids)]

    def events() -> list[dict[str, Any]]:
        return [e for e in (json.loads(r.getMessage()) for r in caplog.records if r.name == "icetide.ingest.sink"
                            and r.getMessage().startswith('{"event": "batch"')) if e["records"]]

    def landed(n: int) -> bool:
        return sum(e["records"] for e in events()) == n and \
            spark.sql(f"SELECT count(*) FROM icetide.{table}").first()[0] == n

    runner = Runner(load_config(path), spark=spark)
    with Background(runner):
        send(kafka.bootstrap, topic, values[:300], 2)
        wait_until(lambda: spark.catalog.tableExists(f"icetide.{table}") and landed(300), 240, "the first rows")
        send(kafka.bootstrap, topic, values[300:], 2)
        wait_until(lambda: landed(600), 240, "the second rows")
    assert runner.restarts == 0
    batches = events()
    for e in batches:  # the table made from target.schema, then every batch written in one pass
        assert "one_pass_job" in e["timings"] and "admit" not in e["timings"], e["timings"]
    got = [r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()]
    assert len(got) == len(set(got)) and set(got) == set(ids), "lost or duplicated rows"
    # each batch's rows of one partition met in one task: one file per partition the batch held
    files = spark.sql(f"SELECT snapshot_id, count(*), count(DISTINCT data_file.partition) "
                      f"FROM icetide.{table}.entries GROUP BY snapshot_id").collect()
    assert len(files) >= 2 and all(r[2] >= 6 for r in files), files  # 3 days × 4 buckets a batch
    assert [r[1] for r in files] == [r[2] for r in files], files
