"""Avro in the Confluent wire format through a real schema registry (Apicurio), real Kafka, real
Spark and Iceberg; tables read back through PyIceberg (no JVM)."""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import io
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.catalog import pyiceberg_catalog
from icetide.config import load_config
from tests.fixtures.avro import UPDATED, avro_pipeline, debezium_encoder, encode, register, schema_id, serializer
from tests.fixtures.records import send
from tests.fixtures.stack import run_in_process, unique

pytestmark = pytest.mark.integration

UTC = dt.UTC
ADDR = {"type": "record", "name": "Addr", "fields": [
    {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "string"], "default": None}]}
V1: dict[str, Any] = {"type": "record", "name": "Event", "namespace": "com.acme", "fields": [
    {"name": "id", "type": "string", "doc": "the event's id"},
    {"name": "n", "type": "int"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "price", "type": {"type": "fixed", "name": "Price", "size": 8, "logicalType": "decimal",
                               "precision": 16, "scale": 4}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "local_ts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
    {"name": "raw", "type": "bytes"},
    {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "addr", "type": ["null", ADDR], "default": None},
    {"name": "choice", "type": ["int", "string"]},
    {"name": "ok", "type": "boolean"},
    {"name": "ratio", "type": "float"},
]}
#: v2: a new field with a default, and n promoted int → long (BACKWARD compatible)
V2 = copy.deepcopy(V1)
V2["fields"][1] = {"name": "n", "type": "long"}
V2["fields"].append({"name": "note", "type": "string", "default": "none"})


def record(i: int) -> dict[str, Any]:
    return {"id": f"e{i}", "n": i, "amount": decimal.Decimal(f"{i}.25"), "price": decimal.Decimal(f"{i}.1234"),
            "ts": dt.datetime(2026, 5, 1, 12, 0, 0, i, tzinfo=UTC),
            "ts_ms": dt.datetime(2026, 5, 1, 12, 0, 0, 1000 * (i % 1000), tzinfo=UTC),
            "local_ts": dt.datetime(2026, 5, 1, 8, 30, 0, 7), "day": dt.date(2026, 5, 1 + i % 28),
            "at": dt.time(13, 14, 15, 16000), "uid": uuid.UUID(int=i), "color": "GREEN" if i % 2 else "RED",
            "raw": bytes([i % 256, 0, 255]), "fx": b"\x01\x02\x03\x04", "tags": [f"t{i}", "x"],
            "attrs": {"a": i, "b": -i}, "items": [{"sku": f"s{i}", "qty": i % 7}],
            "addr": {"city": "Oslo", "zip": None} if i % 3 else None, "choice": i if i % 2 else f"c{i}",
            "ok": bool(i % 2), "ratio": 0.5}


def write_config(path: Path, cfg: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


def scan(cfg_path: Path, table: str) -> list[dict[str, Any]]:
    return list(pyiceberg_catalog(load_config(cfg_path)).load_table(table).scan().to_arrow().to_pylist())


def dead_letters(cfg_path: Path, table: str) -> list[dict[str, Any]]:
    """The dead-letter table's rows; none when no batch needed the table."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return scan(cfg_path, table)
    except NoSuchTableError:
        return []


def test_two_versions_every_type_and_every_bad_input_in_one_batch(kafka, lake, tmp_path, spark, registry) -> None:  # type: ignore[no-untyped-def]
    """Two schema versions interleaved in one batch, every Avro type, and one record of each bad
    input kind among them: the good ones land exactly, each bad one is a dead letter of its class."""
    topic, ns = unique("avro-types"), unique("avro")
    table = f"{ns}.events"
    v1, v2 = serializer(registry.url, V1), serializer(registry.url, V2)
    first = encode(v1, topic, record(0))  # registers v1 before v2 (v2 is the subject's latest)
    values = [first] + [encode(v2 if i % 2 else v1, topic, record(i) | ({"note": f"n{i}"} if i % 2 else {}))
                        for i in range(1, 40)]
    assert len({schema_id(v) for v in values}) == 2
    recursive = {"type": "record", "name": "Node", "namespace": ns, "fields": [
        {"name": "id", "type": "long"}, {"name": "next", "type": ["null", "Node"], "default": None}]}
    rec_id = register(registry.url, f"{ns}-other-value", recursive)
    # the same record name with a type change that is no widening (string → long), another subject
    clash = copy.deepcopy(V1)
    clash["fields"][0] = {"name": "id", "type": "long"}
    clash_id = register(registry.url, f"{ns}-clash-value", clash)
    header = lambda i: b"\x00" + i.to_bytes(4, "big")  # noqa: E731
    bad = {
        "bad_magic_byte": b"\x01" + values[1][1:],
        "truncated_record": b"\x00\x00\x01",
        "unknown_schema_id": header(987_654) + b"\x02",
        "undecodable": header(schema_id(values[1])) + b"\x02",  # "e" then nothing where "n" must be
        "unsupported_schema": header(rec_id) + b"\x02\x00",
        "incompatible_schema": header(clash_id) + b"\x02",
    }
    send(kafka.bootstrap, topic, [*values[:20], *bad.values(), *values[20:]], partitions=2)
    cfg = write_config(tmp_path / "p.yaml", avro_pipeline(kafka, lake, tmp_path, topic, table, registry.url))
    runner = run_in_process(spark, cfg)
    assert runner.writer.counters.batches == 1  # both versions and the bad records in one batch

    rows = {r["id"]: r for r in scan(cfg, table)}
    assert len(rows) == 40
    for i in range(40):
        r, want = rows[f"e{i}"], record(i)
        assert r["n"] == i and isinstance(r["n"], int)
        assert r["note"] == (f"n{i}" if i % 2 else None)  # each record as its own version wrote it (#40)
        assert r["amount"] == want["amount"] and r["price"] == want["price"]
        assert r["ts"] == want["ts"]  # to the microsecond, with zone
        assert r["ts_ms"] == want["ts_ms"]
        assert r["local_ts"] == want["local_ts"] and r["local_ts"].tzinfo is None
        assert r["day"] == want["day"]
        assert r["at"] == 13 * 3_600_000 + 14 * 60_000 + 15_016  # milliseconds after midnight
        assert r["uid"] == str(want["uid"])
        assert r["color"] == want["color"] and r["raw"] == want["raw"] and r["fx"] == want["fx"]
        assert r["tags"] == want["tags"]
        assert dict(r["attrs"]) == want["attrs"]
        assert r["items"] == want["items"]
        assert r["addr"] == ({"city": "Oslo", "zip": None} if i % 3 else None)
        assert r["choice"] == ({"member_int": i, "member_string": None} if i % 2
                               else {"member_int": None, "member_string": f"c{i}"})
        assert r["ok"] is bool(i % 2) and r["ratio"] == 0.5

    iceberg = pyiceberg_catalog(load_config(cfg)).load_table(table).schema()
    assert [f.name for f in iceberg.fields][:3] == ["id", "n", "amount"]  # the writer's order
    assert str(iceberg.find_type("n")) == "long"
    assert str(iceberg.find_type("ts")) == "timestamptz" and str(iceberg.find_type("local_ts")) == "timestamp"
    assert str(iceberg.find_type("amount")) == "decimal(12, 2)"
    assert iceberg.find_field("id").doc == "the event's id"
    assert "milliseconds after midnight" in (iceberg.find_field("at").doc or "")

    letters = {r["error_class"]: r for r in dead_letters(cfg, f"{table}_dlq")}
    assert sorted(letters) == sorted(bad)
    for cls, value in bad.items():
        assert letters[cls]["value"] == value  # the original bytes, for a replay
    assert f"schema id {rec_id}" in letters["unsupported_schema"]["error_message"]
    assert "contains itself" in letters["unsupported_schema"]["error_message"]
    assert f"schema id {clash_id}" in letters["incompatible_schema"]["error_message"]
    assert "id is string in the table but bigint" in letters["incompatible_schema"]["error_message"]
    assert "987654" in letters["unknown_schema_id"]["error_message"]


def test_python_type_mapping_matches_spark_from_avro(spark) -> None:  # type: ignore[no-untyped-def]
    """The table types icetide derives without a JVM are exactly what Spark's from_avro decodes."""
    from pyspark.sql.types import StructType

    from icetide.ingest.formats import avro_types

    jvm = spark._jvm
    unions = {"type": "record", "name": "U", "namespace": "t", "fields": [  # Spark's stable union names (#40)
        {"name": "u", "type": ["null", {"type": "record", "name": "Addr", "namespace": "geo", "fields": [
            {"name": "city", "type": "string"}]}, {"type": "long", "logicalType": "timestamp-millis"}, "string",
            {"type": "enum", "name": "E", "symbols": ["A"]}, {"type": "array", "items": "int"},
            {"type": "map", "values": "long"}, {"type": "fixed", "name": "F2", "size": 2}, "boolean"]},
        {"name": "v", "type": ["string", "int"]}, {"name": "w", "type": ["geo.Addr", "null", "bytes"]}]}
    for schema in (V1, V2, unions):
        text = json.dumps(schema)
        java_type = jvm.org.apache.spark.sql.avro.SchemaConverters.toSqlType(  # stable union names (#40)
            jvm.org.apache.avro.Schema.Parser().parse(text), True, "member_", -1).dataType()
        from_jvm = StructType.fromJson(json.loads(java_type.json()))
        mine = avro_types.to_spark(schema)

        def plain(t: Any) -> Any:  # names and types only (nullability and comments differ by design)
            j = t.jsonValue() if hasattr(t, "jsonValue") else t
            if isinstance(j, dict):
                return {k: plain(v) for k, v in j.items() if k not in ("nullable", "metadata", "containsNull",
                                                                         "valueContainsNull")}
            if isinstance(j, list):
                return [plain(v) for v in j]
            return j

        assert plain(mine) == plain(from_jvm)


def test_record_name_routing_one_topic_many_tables_with_avro_keys(kafka, lake, tmp_path, spark, registry) -> None:  # type: ignore[no-untyped-def]
    """One topic, two record types (record-name subjects) → a table per type; Avro keys (a record
    key and a primitive one) land as JSON text in _kafka_key; a key that does not decode is a dead
    letter that keeps the key's bytes."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, ns = unique("avro-rn"), unique("avrorn")
    order = {"type": "record", "name": "Purchase", "namespace": f"shop.{ns}", "fields": [
        {"name": "id", "type": "long"}, {"name": "total", "type": "double"}]}
    refund = {"type": "record", "name": "Refund", "namespace": f"shop.{ns}", "fields": [
        {"name": "id", "type": "long"}, {"name": "reason", "type": "string"}]}
    so, sr = serializer(registry.url, order, "record_name"), serializer(registry.url, refund, "record_name")
    client = SchemaRegistryClient({"url": registry.url})
    key_record = AvroSerializer(client, json.dumps({"type": "record", "name": "Key", "namespace": ns,
                                                    "fields": [{"name": "id", "type": "long"}]}),
                                conf={"subject.name.strategy": lambda ctx, name: f"{topic}-purchase-key"})
    key_string = AvroSerializer(client, json.dumps("string"),
                                conf={"subject.name.strategy": lambda ctx, name: f"{topic}-refund-key"})
    kctx = SerializationContext(topic, MessageField.KEY)
    records = [(key_record({"id": i}, kctx), encode(so, topic, {"id": i, "total": i * 1.5})) if i % 3
               else (key_string(f"r{i}", kctx), encode(sr, topic, {"id": i, "reason": "x"})) for i in range(30)]
    bad_key = b"\x00" + records[1][0][1:5] + b"\xff"  # a known key schema id, a payload that does not decode
    records.append((bad_key, encode(so, topic, {"id": 99, "total": 0.0})))
    p = Producer({"bootstrap.servers": kafka.bootstrap})
    for k, v in records:
        p.produce(topic, key=bytes(k), value=v)
    assert p.flush(30) == 0
    cfg_dict = avro_pipeline(kafka, lake, tmp_path, topic, f"{ns}.unused", registry.url,
                             target={"route": {"by": "record_name", "table": f"{ns}.{{value}}"}})
    cfg_dict["source"]["schema_registry"]["subject_name_strategy"] = "record_name"
    cfg_dict["source"]["key_format"] = "avro"
    cfg_dict["dead_letter"] = {"table": f"{ns}.dlq"}
    cfg = write_config(tmp_path / "p.yaml", cfg_dict)
    run_in_process(spark, cfg)
    # routed by the full name (#40): shop.<ns>.Purchase → shop_<ns>_purchase
    orders, refunds = scan(cfg, f"{ns}.shop_{ns}_purchase"), scan(cfg, f"{ns}.shop_{ns}_refund")
    assert sorted(r["id"] for r in orders) == [i for i in range(30) if i % 3]
    assert sorted(r["id"] for r in refunds) == [i for i in range(30) if not i % 3]
    assert {r["total"] for r in orders} == {i * 1.5 for i in range(30) if i % 3}
    assert {r["_kafka_key"] for r in orders} == {json.dumps({"id": i}, separators=(",", ":"))
                                                 for i in range(30) if i % 3}
    assert {r["_kafka_key"] for r in refunds} == {f'"r{i}"' for i in range(30) if not i % 3}
    letters = dead_letters(cfg, f"{ns}.dlq")
    assert [(r["error_class"], r["_kafka_key"]) for r in letters] == [("undecodable", bad_key)]
    assert "the key does not decode" in letters[0]["error_message"]


def test_a_new_version_routed_by_record_name_mid_run_lands_with_the_known_one(  # type: ignore[no-untyped-def]
        kafka, lake, tmp_path, spark, registry, caplog) -> None:
    """#39's one pass for Avro (review): routed by record name, a batch mixing a learned schema id
    with a new version of the same record. The pass cannot route the new id's records (their name
    comes from the decode), so it must not commit the table the usual path then routes them to:
    every record lands once, the table evolves, and the next batch of learned ids takes the one pass.
    In-process, one partition, three batches: about 40 s of CI."""
    import logging

    caplog.set_level(logging.INFO, logger="icetide.ingest.sink")
    topic, ns = unique("avro-rnv"), unique("avrornv")
    v1 = {"type": "record", "name": "Ev", "namespace": ns, "fields": [{"name": "id", "type": "long"}]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "tag", "type": ["null", "string"], "default": None}]}
    s1, s2 = serializer(registry.url, v1), serializer(registry.url, v2)
    values = [encode(s1, topic, {"id": i}) for i in range(40)]  # batch 0: the table, id of v1 learned
    values += [encode(s2, topic, {"id": i, "tag": f"t{i}"}) if i % 2 else encode(s1, topic, {"id": i})
               for i in range(40, 80)]  # batch 1: both
    values += [encode(s2, topic, {"id": i, "tag": f"t{i}"}) for i in range(80, 120)]  # batch 2: learned ids
    values += [encode(s2, topic, {"id": i, "tag": f"t{i}"}) for i in range(120, 159)]  # batch 3: learned ids
    values.append(b"\x07" + values[-1][1:])  # and a bad record (not routed: the pass still commits)
    send(kafka.bootstrap, topic, values, partitions=1)
    cfg_dict = avro_pipeline(kafka, lake, tmp_path, topic, f"{ns}.unused", registry.url,
                             target={"route": {"by": "record_name", "table": f"{ns}.{{value}}"}})
    cfg_dict["source"]["max_offsets_per_trigger"] = 40
    cfg_dict["dead_letter"] = {"table": f"{ns}.dlq"}
    cfg = write_config(tmp_path / "p.yaml", cfg_dict)
    run_in_process(spark, cfg)
    table = f"{ns}.{ns}_ev"
    rows = scan(cfg, table)
    assert sorted(r["id"] for r in rows) == list(range(159))
    assert {r["id"]: r["tag"] for r in rows} == {i: f"t{i}" if i >= 40 and (i % 2 or i >= 80) else None
                                                 for i in range(159)}
    assert [r["error_class"] for r in dead_letters(cfg, f"{ns}.dlq")] == ["bad_magic_byte"]
    events = [json.loads(r.getMessage()) for r in caplog.records
              if r.name == "icetide.ingest.sink" and r.getMessage().startswith('{"event": "batch"')]
    learned, last = [e for e in events if e["records"]][-2:]
    assert "one_pass_commit" in learned["timings"] and "admit" not in learned["timings"], learned["timings"]
    # the bad record went to the usual path, the table's 39 rows were committed by the pass
    assert last["written"] == {table: 39} and last["dead_letters"] == 1, last
    assert "one_pass_commit" in last["timings"] and "together_commit" not in last["timings"], last["timings"]


def test_registry_down_for_a_minute_mid_run(kafka, lake, tmp_path, registry) -> None:  # type: ignore[no-untyped-def]
    """The registry stops while the stream holds records of a schema id the pipeline has not seen:
    the batch waits, nothing is dead-lettered, and everything lands once the registry is back."""
    from tests.fixtures.stack import kill_group, start, wait_for

    topic, ns = unique("avro-down"), unique("avrodown")
    table = f"{ns}.events"
    schema = {"type": "record", "name": "Ev", "namespace": ns, "fields": [{"name": "id", "type": "long"}]}
    v2 = {**schema, "fields": [*schema["fields"], {"name": "extra", "type": "string", "default": "d"}]}
    s1, s2 = serializer(registry.url, schema), serializer(registry.url, v2)
    first = [encode(s1, topic, {"id": i}) for i in range(20)]
    send(kafka.bootstrap, topic, first)
    cfg = write_config(tmp_path / "p.yaml", avro_pipeline(kafka, lake, tmp_path, topic, table, registry.url))
    log = tmp_path / "run.log"
    proc = start(cfg, log)
    try:
        wait_for(log, r'"records": 20', 0)
        # registered after the first batch, which learned the subject's latest version: unseen
        later = [encode(s2, topic, {"id": i, "extra": "e"}) for i in range(20, 40)]
        registry.stop()
        send(kafka.bootstrap, topic, later)
        wait_for(log, r"schema registry .* unavailable", 0, timeout=120)
        wait_for(log, r'"event": "schema_registry_unavailable"', 0, timeout=30)  # the alert (log and webhook)
        time.sleep(60)
        registry.start()
        wait_for(log, r"answers again", 0, timeout=120)
        m = wait_for(log, r'"records": 20.*"registry_wait": ([0-9.]+)', log.read_text().index("answers again"),
                     timeout=120)
        assert float(m.group(1)) >= 50  # the batch's wait shows in its event
    finally:
        kill_group(proc)
    ids = sorted(r["id"] for r in scan(cfg, table))
    assert ids == list(range(40))
    assert not dead_letters(cfg, f"{table}_dlq")


def test_debezium_avro_sigkill_twice_exact_final_state(kafka, lake, tmp_path, spark, registry) -> None:  # type: ignore[no-untyped-def]
    """Debezium's Avro converter: envelopes with a semantic type and Kafka tombstones; two SIGKILLs
    mid-batch; the table ends as the exact final state of the change stream (ordering by
    source.lsn, duplicates and replays of old changes delivered), the MicroTimestamp a timestamp."""
    import os
    import random

    from icetide.demo.events import create_topic
    from tests.fixtures.cdc_stream import assert_final_state, cdc_config, generate, send_changes
    from tests.fixtures.stack import kill_group, start, wait_for

    seed = int(os.environ.get("ICETIDE_CRASH_SEED", time.time()))
    print(f"seed {seed}")
    rng = random.Random(seed)
    topic, table = unique("dbz-avro"), f"it.{unique('customers_avro')}"
    create_topic(kafka.bootstrap, topic, 4)
    envelope = debezium_encoder(registry.url, topic)

    # ~5 batches of 4,000: each kill lands in a running batch with batches still to come
    stream = generate(2_000, 20_000, seed=47, debezium=True, kafka_tombstones=True, encoder=envelope)
    send_changes(kafka.bootstrap, topic, stream)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"format": "debezium", "ordering": "source.lsn"})
    raw = yaml.safe_load(cfg.read_text())
    raw["source"].update({"format": "avro", "schema_registry": {"url": registry.url}, "max_offsets_per_trigger": 4_000})
    del raw["target"]["schema"]  # the table's columns come from the registry
    cfg.write_text(yaml.safe_dump(raw))
    log = tmp_path / "run.log"
    for _ in range(2):
        pos = log.stat().st_size if log.exists() else 0
        proc = start(cfg, log)
        wait_for(log, r"committing batch", pos, timeout=300)
        time.sleep(rng.uniform(0.0, 4.0))
        kill_group(proc)
    proc = start(cfg, log, "--until-idle", "--for", "900")
    assert proc.wait(1000) == 0, log.read_text()[-3000:]
    assert_final_state(spark, table, stream)
    assert [f.name for f in spark.table(f"icetide.{table}").schema.fields][:4] == ["id", "name", "balance", "updated"]
    assert spark.table(f"icetide.{table}").schema["updated"].dataType.typeName() == "timestamp_ntz"
    for name, updated in spark.sql(f"SELECT name, updated FROM icetide.{table}").collect():  # the row's own change
        assert updated == UPDATED + dt.timedelta(microseconds=int(name.rsplit("-", 1)[1]))
    assert not dead_letters(cfg, f"{table}_dlq")


def test_avro_exactly_once_across_kills_at_named_points(kafka, lake, tmp_path, spark, registry) -> None:  # type: ignore[no-untyped-def]
    """The exactly-once test on Avro: 12,000 events of two schema versions and 12 bad records,
    the run SIGKILLed after a table commit, before one and after a batch before Spark's checkpoint;
    then every id is in the table exactly once and every bad record in the dead letters once."""
    from tests.fixtures.stack import start

    topic, ns = unique("avro-eo"), unique("avroeo")
    table = f"{ns}.events"
    schema = {"type": "record", "name": "Ev", "namespace": ns, "fields": [
        {"name": "id", "type": "long"}, {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    v2 = {**schema, "fields": [*schema["fields"], {"name": "tag", "type": "string", "default": "-"}]}
    s1, s2 = serializer(registry.url, schema), serializer(registry.url, v2)
    at = dt.datetime(2026, 11, 1, tzinfo=UTC)
    values: list[bytes] = []
    for i in range(12_000):
        values.append(encode(s2, topic, {"id": i, "at": at, "tag": "x"}) if i >= 6_000
                      else encode(s1, topic, {"id": i, "at": at}))
        if i % 1000 == 999:
            values.append(b"\x07" + values[-1][1:])  # bad magic byte
    send(kafka.bootstrap, topic, values, partitions=2)
    cfg_dict = avro_pipeline(kafka, lake, tmp_path, topic, table, registry.url)
    cfg_dict["source"]["max_offsets_per_trigger"] = 2_000
    cfg_dict["stream"]["trigger_interval"] = "1 second"
    cfg = write_config(tmp_path / "p.yaml", cfg_dict)
    log = tmp_path / "run.log"
    for fault in (f"after_table_commit@2:{table}", f"before_table_commit@1:{table}", "after_batch_before_checkpoint@1"):
        proc = start(cfg, log, "--until-idle", fault=fault)
        assert proc.wait(600) != 0, f"{fault} did not kill the run:\n{log.read_text()[-3000:]}"
    proc = start(cfg, log, "--until-idle")
    assert proc.wait(600) == 0, log.read_text()[-3000:]
    ids = [r["id"] for r in scan(cfg, table)]
    assert len(ids) == 12_000 and set(ids) == set(range(12_000))
    letters = dead_letters(cfg, f"{table}_dlq")
    assert len(letters) == 12 and {r["error_class"] for r in letters} == {"bad_magic_byte"}
    # #39: batches of learned schema ids were written in the one pass (straight from Kafka), the bad
    # records and v2's first records (a new id: the table evolves) by the usual path after it
    events = [json.loads(line[line.index("{"):]) for line in log.read_text().splitlines() if '"event": "batch"' in line]
    one_pass = [e for e in events if "one_pass_commit" in e["timings"] and e["written"].get(table)]
    assert len(one_pass) >= 2, [(e["batch"], sorted(e["timings"])) for e in events]


def test_check_lists_the_topics_subjects_and_warns_on_weak_compatibility(kafka, lake, tmp_path, registry) -> None:  # type: ignore[no-untyped-def]
    from icetide.demo.events import create_topic
    from tests.fixtures.avro import set_compatibility
    from tests.fixtures.stack import icetide_cli

    topic, ns = unique("avro-check"), unique("avrock")
    create_topic(kafka.bootstrap, topic, 1)
    schema = {"type": "record", "name": "Ev", "namespace": ns, "fields": [{"name": "id", "type": "long"}]}
    sid = schema_id(encode(serializer(registry.url, schema), topic, {"id": 1}))
    cfg = write_config(tmp_path / "p.yaml", avro_pipeline(kafka, lake, tmp_path, topic, f"{ns}.events", registry.url))
    res = icetide_cli("check", "-c", str(cfg), "-o", "json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["subjects"] == [{"subject": f"{topic}-value", "version": 1, "id": sid, "compatibility": "BACKWARD"}]
    assert out["warnings"] == []
    set_compatibility(registry.url, f"{topic}-value", "FORWARD")
    res = icetide_cli("check", "-c", str(cfg), "-o", "json")
    assert res.returncode == 0, res.stderr
    assert [w[:80] for w in json.loads(res.stdout)["warnings"]] == [
        f"subject {topic}-value: compatibility FORWARD is weaker than BACKWARD: a producer can register a schema"[:80]]
    # a registry that does not answer: one line naming the key, before anything starts
    dead = avro_pipeline(kafka, lake, tmp_path, topic, f"{ns}.events", "http://127.0.0.1:9/apis/ccompat/v7")
    res = icetide_cli("check", "-c", str(write_config(tmp_path / "dead.yaml", dead)))
    assert res.returncode == 2 and "source.schema_registry.url:" in res.stderr and "Traceback" not in res.stderr


# -- schemas as production registries hold them (#40) ---------------------------------------------
DBZ = "io.debezium.time."


def connect(name: str, t: str, **kw: Any) -> dict[str, Any]:
    """A type as Kafka Connect's Avro converters write it: its meaning in ``connect.name``."""
    return {"type": t, "connect.version": 1, "connect.name": name, **kw}


VSD = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data", "fields": [
    {"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}], "connect.version": 1,
    "connect.name": "io.debezium.data.VariableScaleDecimal"}
#: Confluent's converter, a Connect Decimal without connect.decimal.precision: precision 64
CONNECT_DECIMAL = connect("org.apache.kafka.connect.data.Decimal", "bytes", logicalType="decimal", precision=64,
                          scale=2, **{"connect.parameters": {"scale": "2"}})


def envelope(namespace: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    value = {"type": "record", "name": "Value", "namespace": namespace, "fields": fields}
    return {"type": "record", "name": "Envelope", "namespace": namespace, "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"}, {"name": "ts_ms", "type": ["null", "long"], "default": None}]}


def raw_encode(sid: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """The wire format written by hand (a schema the serializer's own parser refuses)."""
    import io

    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + sid.to_bytes(4, "big") + out.getvalue()


def test_registry_histories_evolution_unions_and_references_in_two_runs(kafka, lake, tmp_path, spark, registry) -> None:  # type: ignore[no-untyped-def]
    """One pipeline over nine topics (routed by topic, ``on_tombstone: skip``), run twice (the
    second run is a restart that meets the first run's tables), one item of #40 each: a BACKWARD
    history that deleted a field and an enum symbol (the field is a column, each record holds what
    its own version wrote, before and after a restart); one schema id shared by two subjects (the
    other subject's newer version never reaches its table); a default registries accept and Avro's
    strict parser refuses (the run goes on: Apicurio itself cannot serve that schema by id, HTTP
    400, so its records are dead letters with the reason at once; the same schema from a registry
    that serves it, as Confluent's does, decodes like any other); Kafka tombstones on append tables
    (skipped and counted, no dead letter); and items 5, 7 and 8 on the first run's tables
    (:class:`Evolving`: map-value evolution, fields max_columns refuses, a reordered union, a schema
    reference, a top-level union of records). CI cost: 68 s in a run of the whole module (2 cores,
    one worker); measured alone after one other test, 85 s with items 5, 7 and 8 and 46 s without
    them (in a test of their own, with two runs of its own, they took 82 s)."""
    from tests.fixtures.avro import register_unvalidated

    ns = unique("avrohist")
    hist, tx, ty, lax = (unique(p) for p in ("avro-hist", "avro-x", "avro-y", "avro-lax"))
    color = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
    v1 = {"type": "record", "name": "Person", "namespace": ns, "fields": [
        {"name": "id", "type": "long"}, {"name": "email", "type": "string"}, {"name": "color", "type": color}]}
    v2 = {"type": "record", "name": "Person", "namespace": ns, "fields": [
        {"name": "id", "type": "long"},
        {"name": "color", "type": {**color, "symbols": ["RED", "GREEN"], "default": "RED"}},
        {"name": "note", "type": "string", "default": "-"}]}
    s1, s2 = serializer(registry.url, v1), serializer(registry.url, v2)
    history: list[bytes | None] = [encode(s1, hist, {"id": i, "email": f"p{i}@x", "color": "BLUE" if i % 2 else "RED"})
                                   for i in range(10)]
    history += [encode(s2, hist, {"id": i, "color": "GREEN", "note": "n"}) for i in range(10, 20)]
    history += [None, None, None]  # Kafka tombstones on an append table
    # one id, two subjects: x's second version adds a field with a default; y only ever has the first
    item = {"type": "record", "name": "Item", "namespace": ns, "fields": [{"name": "id", "type": "long"}]}
    item2 = {**item, "fields": [*item["fields"], {"name": "extra", "type": "string", "default": "from-x"}]}
    sx1, sy = serializer(registry.url, item), serializer(registry.url, item)
    xs = [encode(sx1, tx, {"id": 1})]
    ys = [encode(sy, ty, {"id": i}) for i in range(5)]
    shared = schema_id(xs[0]) == schema_id(ys[0])
    xs.append(encode(serializer(registry.url, item2), tx, {"id": 2, "extra": "e"}))
    # a default Avro's strict parser refuses (a string defaulting to null), registered as a later version
    lax1 = {"type": "record", "name": "Lax", "namespace": ns, "fields": [{"name": "id", "type": "long"}]}
    lax2 = {**lax1, "fields": [*lax1["fields"], {"name": "s", "type": "string", "default": None}]}
    first = encode(serializer(registry.url, lax1), lax, {"id": 0})
    lax2_id = register_unvalidated(registry.url, f"{lax}-value", lax2)  # Apicurio's own check refuses it
    plain2 = {**lax2, "fields": [lax2["fields"][0], {"name": "s", "type": "string"}]}  # the same bytes
    laxes = [first, *(raw_encode(lax2_id, plain2, {"id": i, "s": s}) for i, s in ((1, "one"), (2, "two")))]
    for topic, values in ((hist, history), (tx, xs), (ty, ys), (lax, laxes)):
        send(kafka.bootstrap, topic, values)
    evolving = Evolving(kafka, registry.url, ns)
    cfg_dict = avro_pipeline(kafka, lake, tmp_path, hist, f"{ns}.unused", registry.url,
                             target={"route": {"by": "topic", "table": f"{ns}.{{topic}}"}, "on_tombstone": "skip",
                                     "max_columns": Evolving.MAX_COLUMNS})
    cfg_dict["source"]["topics"] = [hist, tx, ty, lax, *evolving.topics]
    cfg_dict["dead_letter"] = {"table": f"{ns}.dlq"}
    cfg = write_config(tmp_path / "p.yaml", cfg_dict)
    started = time.monotonic()
    runner = run_in_process(spark, cfg)
    print(f"run: {time.monotonic() - started:.1f} s")

    def table(topic: str) -> str:
        return f"{ns}.{topic.replace('-', '_')}"

    rows = {r["id"]: r for r in scan(cfg, table(hist))}
    assert sorted(rows) == list(range(20))
    for i in range(10):  # version 1: its email and its enum symbol, whatever version 2 says
        assert (rows[i]["email"], rows[i]["color"], rows[i]["note"]) == (f"p{i}@x", "BLUE" if i % 2 else "RED", None)
    for i in range(10, 20):
        assert (rows[i]["email"], rows[i]["color"], rows[i]["note"]) == (None, "GREEN", "n")
    assert runner.writer.counters.tombstones_skipped == 3
    evolving.check_first(cfg, table)
    # after a restart (a new run, no schema seen yet), records of the old version still hold their email
    send(kafka.bootstrap, hist, [encode(s1, hist, {"id": i, "email": f"p{i}@x", "color": "BLUE"}) for i in (20, 21)])
    evolving.second()
    started = time.monotonic()
    run_in_process(spark, cfg)
    print(f"second run: {time.monotonic() - started:.1f} s")
    later = {r["id"]: r for r in scan(cfg, table(hist)) if r["id"] >= 20}
    assert {i: (r["email"], r["color"]) for i, r in later.items()} == {20: ("p20@x", "BLUE"), 21: ("p21@x", "BLUE")}
    assert shared, "the registry gave the same schema two ids: the shared-id case is not exercised"
    y_table = pyiceberg_catalog(load_config(cfg)).load_table(table(ty))
    assert [f.name for f in y_table.schema().fields if not f.name.startswith("_kafka_")] == ["id"]
    assert sorted(r["id"] for r in scan(cfg, table(ty))) == list(range(5))
    assert sorted((r["id"], r["extra"]) for r in scan(cfg, table(tx))) == [(1, None), (2, "e")]
    assert [r["id"] for r in scan(cfg, table(lax))] == [0]
    letters = dead_letters(cfg, f"{ns}.dlq")
    assert sorted((r["value"], r["error_class"]) for r in letters) == sorted(
        [*((v, "unsupported_schema") for v in laxes[1:]), *evolving.dead_letters()])
    assert all(f"schema id {lax2_id}: the registry answers HTTP 400" in r["error_message"] for r in letters
               if r["error_class"] == "unsupported_schema")
    evolving.check(cfg, table, letters)
    # the lax schema as a registry that serves it gives it: accepted by the JVM check, decoded
    from icetide.ingest.formats import avro as avro_format
    from icetide.ingest.formats import avro_types

    writer = avro_types.parse(lax2_id, json.dumps(lax2))
    avro_format.spark_accepts(spark, writer)
    got = spark.createDataFrame([(laxes[1],)], "value binary").select(
        avro_format.Decoding(writer).column().alias("r")).first()["r"]
    assert (got["id"], got["s"], got[avro_format.OK]) == (1, "one", True)


def test_debezium_semantic_types_and_envelopes_routed_by_record_name(kafka, lake, tmp_path, spark, registry) -> None:  # type: ignore[no-untyped-def]
    """Two Debezium topics in one run, routed by record name: both records are named ``Envelope``
    (namespaces differ), so each gets its own table; Kafka tombstones are skipped, not
    ``missing_route`` dead letters. One topic's types are Debezium's under ``time.precision.mode``
    adaptive (the default), the other's under connect and adaptive_time_microseconds, with a
    Connect Decimal of precision 64 and a VariableScaleDecimal: each column is the type it means;
    a decimal wider than 38 digits and a ZonedTimestamp that is no timestamp are dead letters of
    their own records only. CI cost: 58 s (measured alone, 2 cores)."""
    ns = unique("avrodbz")
    customers_topic, orders_topic = unique("dbz-customers"), unique("dbz-orders")
    cns, ons = f"srv.{ns}.customers", f"srv.{ns}.orders"
    customers = envelope(cns, [  # time.precision.mode: adaptive
        {"name": "id", "type": "long"},
        {"name": "born", "type": ["null", connect(DBZ + "Date", "int")], "default": None},
        {"name": "opens", "type": connect(DBZ + "Time", "int")},  # TIME(3)
        {"name": "created", "type": connect(DBZ + "Timestamp", "long")},  # DATETIME(3)
        {"name": "updated", "type": connect(DBZ + "MicroTimestamp", "long")},  # DATETIME(6)
        {"name": "precise", "type": connect(DBZ + "NanoTimestamp", "long")},
        {"name": "seen", "type": ["null", connect(DBZ + "ZonedTimestamp", "string")], "default": None},
        {"name": "balance", "type": ["null", VSD], "default": None},
        {"name": "credit", "type": CONNECT_DECIMAL},
        {"name": "doc", "type": connect("io.debezium.data.Json", "string")},
        {"name": "uid", "type": connect("io.debezium.data.Uuid", "string")},
        {"name": "tier", "type": connect("io.debezium.data.Enum", "string",
                                         **{"connect.parameters": {"allowed": "a,b"}})},
    ])
    orders = envelope(ons, [  # time.precision.mode: connect (Confluent writes the logical types too) and a MicroTime
        {"name": "id", "type": "long"},
        {"name": "day", "type": connect("org.apache.kafka.connect.data.Date", "int", logicalType="date")},
        {"name": "at", "type": connect("org.apache.kafka.connect.data.Timestamp", "long",
                                       logicalType="timestamp-millis")},
        {"name": "clock", "type": connect(DBZ + "MicroTime", "long")},  # adaptive_time_microseconds
    ])
    sc, so = serializer(registry.url, customers), serializer(registry.url, orders)
    ms, us, ns_ = 1_777_636_800_123, 1_777_636_800_123_456, 1_777_636_800_123_456_789  # 2026-05-01 12:00:00.123…

    def customer(i: int, **over: Any) -> dict[str, Any]:
        row = {"id": i, "born": 20_000 + i, "opens": 3_600_000 + i, "created": ms + i, "updated": us + i,
               "precise": ns_ + i * 1000, "seen": f"2026-05-01T12:00:0{i % 10}.5+02:00",
               "balance": {"scale": 3, "value": (-12345 - i).to_bytes(4, "big", signed=True)},
               "credit": decimal.Decimal(f"123456789012345678901234567890.{i:02d}"), "doc": '{"a":1}',
               "uid": str(uuid.UUID(int=i)), "tier": "a"} | over
        return {"before": None, "after": row, "op": "c", "ts_ms": ms}

    base = dt.datetime(2026, 5, 1, 12, 0, 0, 123000)
    cvalues: list[bytes | None] = [encode(sc, customers_topic, customer(i)) for i in range(6)]
    big = encode(sc, customers_topic, customer(90, credit=decimal.Decimal("1" * 40 + ".25")))  # 42 digits
    not_a_time = encode(sc, customers_topic, customer(91, seen="yesterday"))
    cvalues += [None, big, not_a_time, None]  # tombstones, as Debezium sends after a delete
    ovalues: list[bytes | None] = [encode(so, orders_topic, {"before": None, "op": "r", "ts_ms": ms, "after": {
        "id": i, "day": dt.date(2026, 5, 1 + i), "at": dt.datetime(2026, 5, 1, 9, tzinfo=UTC) + dt.timedelta(hours=i),
        "clock": 45_000_000_000 + i}}) for i in range(4)] + [None]
    send(kafka.bootstrap, customers_topic, cvalues)
    send(kafka.bootstrap, orders_topic, ovalues)
    cfg_dict = avro_pipeline(kafka, lake, tmp_path, customers_topic, f"{ns}.unused", registry.url,
                             target={"route": {"by": "record_name", "table": f"{ns}.{{value}}"}})
    cfg_dict["source"]["topics"] = [customers_topic, orders_topic]
    cfg_dict["dead_letter"] = {"table": f"{ns}.dlq"}
    cfg = write_config(tmp_path / "p.yaml", cfg_dict)
    started = time.monotonic()
    runner = run_in_process(spark, cfg)
    print(f"run: {time.monotonic() - started:.1f} s")

    ctable, otable = f"{ns}.srv_{ns}_customers_envelope", f"{ns}.srv_{ns}_orders_envelope"
    rows = {r["after"]["id"]: r["after"] for r in scan(cfg, ctable)}
    assert sorted(rows) == list(range(6))
    for i, r in rows.items():
        assert r["born"] == dt.date(1970, 1, 1) + dt.timedelta(days=20_000 + i)
        assert r["opens"] == 3_600_000 + i  # milliseconds after midnight (the column comment says so)
        assert r["created"] == base + dt.timedelta(milliseconds=i)
        assert r["created"].tzinfo is None  # Debezium's Timestamp is a local date-time
        assert r["updated"] == base + dt.timedelta(microseconds=456 + i)
        assert r["precise"] == base + dt.timedelta(microseconds=456 + i)  # nanoseconds cut to the microsecond
        assert r["seen"] == dt.datetime(2026, 5, 1, 10, 0, i % 10, 500000, tzinfo=UTC)
        assert r["balance"] == f"-{(12345 + i) // 1000}.{(12345 + i) % 1000:03d}"
        assert r["credit"] == decimal.Decimal(f"123456789012345678901234567890.{i:02d}")
        assert (r["doc"], r["uid"], r["tier"]) == ('{"a":1}', str(uuid.UUID(int=i)), "a")
    schema = pyiceberg_catalog(load_config(cfg)).load_table(ctable).schema()
    types = {n: str(schema.find_type(f"after.{n}")) for n in ("born", "opens", "created", "updated", "precise",
                                                                "seen", "balance", "credit")}
    assert types == {"born": "date", "opens": "int", "created": "timestamp", "updated": "timestamp",
                     "precise": "timestamp", "seen": "timestamptz", "balance": "string", "credit": "decimal(38, 2)"}
    orows = sorted((r["after"]["id"], r["after"]["day"], r["after"]["at"], r["after"]["clock"])
                   for r in scan(cfg, otable))
    assert orows == [(i, dt.date(2026, 5, 1 + i), dt.datetime(2026, 5, 1, 9 + i, tzinfo=UTC), 45_000_000_000 + i)
                     for i in range(4)]
    letters = sorted((r["value"], r["error_class"]) for r in dead_letters(cfg, f"{ns}.dlq"))
    assert letters == sorted([(big, "undecodable"), (not_a_time, "undecodable")])
    assert runner.writer.counters.tombstones_skipped == 3


def test_each_record_is_decoded_once_whatever_the_schemas_width(spark) -> None:  # type: ignore[no-untyped-def]
    """#39: a table's parse reads every column from one decode of the record. As one expression,
    each column was a field of its own ``from_avro`` inside a CASE branch, which Spark's
    common-subexpression elimination does not share: a 40-field schema decoded each record 42 times.
    Asserted on the optimized plan (what runs), and on the rows it gives. No pipeline: seconds."""
    import fastavro
    from pyspark.sql import functions as F

    from icetide.config.registry import SchemaRegistry
    from icetide.ingest import decode
    from icetide.ingest.formats.avro import ID, AvroFormat, Decoding
    from icetide.ingest.formats.avro_types import parse

    fields = [{"name": "id", "type": "string"}, *[{"name": f"f{k}", "type": "long"} for k in range(40)]]
    schema = {"type": "record", "name": "Wide", "namespace": "t", "fields": fields}
    fmt = AvroFormat(SchemaRegistry(url="http://127.0.0.1:9"))
    writer = parse(7, json.dumps(schema))
    fmt.decodings[7], fmt.batch_ids = Decoding(writer), [7]
    values = []
    for i in range(3):
        buf = io.BytesIO()
        record_ = {"id": f"r{i}", **{f"f{k}": i * k for k in range(40)}}
        fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record_)
        values.append(b"\x00" + (7).to_bytes(4, "big") + buf.getvalue())
    rows = spark.createDataFrame([(v,) for v in values], "value binary").withColumn(ID, F.lit(7).cast("long"))
    table = writer.struct  # the table's columns are the record's
    formats_rows = fmt.with_decoded(rows)
    parsed = decode.parse(formats_rows, fmt.parse_columns(spark, table, 1 << 20))
    plan = parsed._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("from_avro(") == 1, plan[:3000]
    got = sorted((r[0]["id"], r[0]["f39"], r[1]) for r in parsed.select(decode.PARSED, decode.ERROR_CLASS).collect())
    assert got == [("r0", 0, None), ("r1", 39, None), ("r2", 78, None)]

    # the one pass's frame (a batch of learned ids, straight from Kafka): one decode too, each id its shape
    from icetide.ingest import routing, shapes
    from icetide.ingest.one_pass_frames import Target, declared_frame, id_of_shape, shape_of_id

    kafka = [F.lit("t").alias("_kafka_topic"), F.lit(0).alias("_kafka_partition"), F.lit(1).cast("long")
             .alias("_kafka_offset"), F.current_timestamp().alias("_kafka_timestamp"),
             F.lit(None).cast("binary").alias("_kafka_key")]
    routed = (rows.select(*kafka, "value", ID).withColumn(routing.TABLE, F.lit("ns.wide"))
              .withColumn(shapes.SHAPE, shape_of_id(F.col(ID))))
    framed, starts = declared_frame(routed, [Target("ns.wide", table, table)], fmt, False, 1 << 20)
    plan = framed._jdf.queryExecution().optimizedPlan().toString()
    # one decode, and the row's columns read straight from it: no struct is built per record
    assert plan.count("from_avro(") == 1 and "named_struct" not in plan, plan[:3000]
    assert framed.columns[4:] == [f"_icetide_r0_{k}" for k in range(41)]
    got = sorted((r["_icetide_r0_0"], r["_icetide_r0_40"], r["good"], id_of_shape(r["shape"]))
                 for r in framed.collect())
    assert starts == [4] and got == [("r0", 0, True, 7), ("r1", 39, True, 7), ("r2", 78, True, 7)]

    # built once per set of learned ids: the next batch's frame reuses the columns
    from icetide.ingest import one_pass_frames
    built = len(one_pass_frames._DECLARED)
    again, _ = declared_frame(routed, [Target("ns.wide", table, table)], fmt, False, 1 << 20)
    assert len(one_pass_frames._DECLARED) == built
    assert sorted((r["_icetide_r0_0"], r["_icetide_r0_40"]) for r in again.collect()) == [("r0", 0), ("r1", 39),
                                                                                          ("r2", 78)]
    # the same id with another writer schema (a registry started afresh): new columns, never the old ones
    fewer = {**schema, "fields": fields[:-1]}  # no f39
    fmt.decodings[7] = Decoding(parse(7, json.dumps(fewer)))
    other, _ = declared_frame(routed, [Target("ns.wide", table, table)], fmt, False, 1 << 20)
    assert len(one_pass_frames._DECLARED) == built + 1
    assert sorted((r["_icetide_r0_0"], r["_icetide_r0_40"]) for r in other.collect()) == [("r0", None),
                                                                                          ("r1", None),
                                                                                          ("r2", None)]



class Evolving:
    """#40 items 5, 7 and 8 as topics of the histories test's run (routed by topic), whose first run
    makes the tables its second run evolves: a map whose struct values gain fields; a version
    declaring more fields than ``target.max_columns`` (:data:`MAX_COLUMNS`) admits; a union whose
    members a version reorders and adds to; a record using a type registered in another subject
    (a schema reference); a top-level union of two referenced record types, and a record of it
    naming no member."""

    MAX_COLUMNS = 8
    ADDED = ("w", "v", "u", "t", "s", "r", "q")  # room for five: the writer's first five, not the names' first

    def __init__(self, kafka: Any, url: str, ns: str) -> None:
        from icetide.demo.events import create_topic

        self.kafka, self.url, self.ns = kafka, url, ns
        self.t_map, self.t_union, self.t_limit, self.t_refs, self.t_multi = (
            unique(p) for p in ("avro-map", "avro-union", "avro-limit", "avro-refs", "avro-multi"))
        self.topics = [self.t_map, self.t_union, self.t_limit, self.t_refs, self.t_multi]
        for t in (self.t_refs, self.t_multi):  # written to after the first run
            create_topic(kafka.bootstrap, t, 1)
        price = {"type": "record", "name": "Price", "namespace": ns, "fields": [{"name": "amount", "type": "long"}]}
        self.map1 = {"type": "record", "name": "Book", "namespace": ns, "fields": [
            {"name": "id", "type": "long"}, {"name": "prices", "type": {"type": "map", "values": price}}]}
        price2 = {**price, "fields": [*price["fields"], {"name": "currency", "type": "string", "default": "EUR"},
                                      {"name": "cents", "type": "int", "default": 0}]}
        self.map2 = {**self.map1, "fields": [self.map1["fields"][0],
                                             {"name": "prices", "type": {"type": "map", "values": price2}}]}
        self.union1 = {"type": "record", "name": "Pick", "namespace": ns, "fields": [
            {"name": "id", "type": "long"}, {"name": "u", "type": ["null", "int", "string"], "default": None}]}
        addr = {"type": "record", "name": "Addr", "namespace": ns, "fields": [{"name": "city", "type": "string"}]}
        self.union2 = {**self.union1, "fields": [self.union1["fields"][0], {
            "name": "u", "type": ["null", addr, "string", "int"], "default": None}]}  # reordered, one added first
        self.limit1 = {"type": "record", "name": "Wide", "namespace": ns, "fields": [
            {"name": n, "type": "long"} for n in ("id", "a", "b")]}
        self.limit2 = {**self.limit1, "fields": [*self.limit1["fields"],
                                                 *({"name": n, "type": "long", "default": 0} for n in self.ADDED)]}
        s_map1, s_union1, s_limit1 = (serializer(url, x) for x in (self.map1, self.union1, self.limit1))
        self.s_limit1 = s_limit1
        send(kafka.bootstrap, self.t_map, [encode(s_map1, self.t_map, {"id": i, "prices": {"eu": {"amount": i}}})
                                           for i in range(3)])
        send(kafka.bootstrap, self.t_union, [encode(s_union1, self.t_union, {"id": i, "u": i if i % 2 else f"s{i}"})
                                             for i in range(4)])
        send(kafka.bootstrap, self.t_limit, [encode(s_limit1, self.t_limit, {"id": i, "a": i, "b": i})
                                             for i in range(2)])

    def second(self) -> None:
        """The second versions, and records of a reference and of a union of records (after the first run)."""
        ns, url, bootstrap = self.ns, self.url, self.kafka.bootstrap
        address = {"type": "record", "name": "Address", "namespace": f"{ns}.common", "fields": [
            {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "string"], "default": None}]}
        on_address = [(f"{ns}.common.Address", f"{ns}-address", 1)]
        register(url, f"{ns}-address", address)
        customer = {"type": "record", "name": "Customer", "namespace": ns, "fields": [
            {"name": "id", "type": "long"}, {"name": "home", "type": f"{ns}.common.Address"},
            {"name": "work", "type": ["null", f"{ns}.common.Address"], "default": None}]}
        refs_id = register(url, f"{self.t_refs}-value", customer, references=on_address)
        order = {"type": "record", "name": "Order", "namespace": ns, "fields": [
            {"name": "id", "type": "long"}, {"name": "ship_to", "type": f"{ns}.common.Address"}]}
        refund = {"type": "record", "name": "Refund", "namespace": ns, "fields": [
            {"name": "id", "type": "long"}, {"name": "reason", "type": "string"}]}
        register(url, f"{ns}-order", order, references=on_address)
        register(url, f"{ns}-refund", refund)
        self.multi_id = register(url, f"{self.t_multi}-value", [f"{ns}.Order", f"{ns}.Refund"],
                                 references=[(f"{ns}.Order", f"{ns}-order", 1), (f"{ns}.Refund", f"{ns}-refund", 1)])
        s_map2, s_union2, s_limit2 = (serializer(url, x) for x in (self.map2, self.union2, self.limit2))
        send(bootstrap, self.t_map, [encode(s_map2, self.t_map, {"id": i, "prices": {"us": {
            "amount": i, "currency": "USD", "cents": i}}}) for i in (3, 4)])
        send(bootstrap, self.t_union, [encode(s_union2, self.t_union, {"id": i, "u": u})
                                       for i, u in ((4, "s4"), (5, 5), (6, {"city": "Oslo"}))])
        self.refused = [encode(s_limit2, self.t_limit, {"id": i, "a": i, "b": i, **dict.fromkeys(self.ADDED, i)})
                        for i in (2, 3)]
        send(bootstrap, self.t_limit, [*self.refused, encode(self.s_limit1, self.t_limit, {"id": 4, "a": 4, "b": 4})])
        inline = {**customer, "fields": [customer["fields"][0], {"name": "home", "type": address},
                                         customer["fields"][2]]}
        send(bootstrap, self.t_refs, [raw_encode(refs_id, inline, {
            "id": i, "home": {"city": f"c{i}", "zip": None}, "work": {"city": "w", "zip": "0150"} if i else None})
            for i in range(2)])
        union = [{**order, "fields": [order["fields"][0], {"name": "ship_to", "type": address}]}, refund]
        self.no_member = b"\x00" + self.multi_id.to_bytes(4, "big") + b"\x08\x02"  # member 4 of 2
        send(bootstrap, self.t_multi, [*(raw_encode(self.multi_id, union, r) for r in (  # type: ignore[arg-type] # a union's record
            (f"{ns}.Order", {"id": 1, "ship_to": {"city": "Bergen", "zip": "5003"}}),
            (f"{ns}.Refund", {"id": 2, "reason": "late"}),
            (f"{ns}.Order", {"id": 3, "ship_to": {"city": "Oslo", "zip": None}}))), self.no_member])

    def dead_letters(self) -> list[tuple[bytes, str]]:
        return sorted([*((v, "schema_limit") for v in self.refused), (self.no_member, "undecodable")])

    def check_first(self, cfg: Path, table: Any) -> None:
        value = pyiceberg_catalog(load_config(cfg)).load_table(table(self.t_map)).schema().find_type("prices")
        assert [f.name for f in value.value_type.fields] == ["amount"]

    def check(self, cfg: Path, table: Any, letters: list[dict[str, Any]]) -> None:
        catalog = pyiceberg_catalog(load_config(cfg))
        # item 5: the map's values took the new fields, in the writer's order; older rows read null there
        books = {r["id"]: dict(r["prices"]) for r in scan(cfg, table(self.t_map))}
        assert books == {**{i: {"eu": {"amount": i, "currency": None, "cents": None}} for i in range(3)},
                         **{i: {"us": {"amount": i, "currency": "USD", "cents": i}} for i in (3, 4)}}
        value = catalog.load_table(table(self.t_map)).schema().find_type("prices").value_type
        assert [f.name for f in value.fields] == ["amount", "currency", "cents"]
        # item 5: max_columns admitted the writer's first five new fields; the version declaring more is refused
        wide = catalog.load_table(table(self.t_limit)).schema()
        assert [f.name for f in wide.fields if not f.name.startswith("_kafka_")] == ["id", "a", "b", *self.ADDED[:5]]
        assert sorted(r["id"] for r in scan(cfg, table(self.t_limit))) == [0, 1, 4]
        # item 7: reordered and added union members keep their columns
        picks = {r["id"]: r["u"] for r in scan(cfg, table(self.t_union))}
        none = {"member_int": None, "member_string": None, "member_Addr": None}
        assert picks == {**{i: none | ({"member_int": i} if i % 2 else {"member_string": f"s{i}"}) for i in range(6)},
                         6: none | {"member_Addr": {"city": "Oslo"}}}
        # item 8: a referenced type, and a top-level union of referenced record types (a row per member's record)
        customers = sorted((r["id"], r["home"], r["work"]) for r in scan(cfg, table(self.t_refs)))
        assert customers == [(0, {"city": "c0", "zip": None}, None),
                             (1, {"city": "c1", "zip": None}, {"city": "w", "zip": "0150"})]
        multi = sorted((r["id"], (r["ship_to"] or {}).get("city"), r["reason"]) for r in scan(cfg, table(self.t_multi)))
        assert multi == [(1, "Bergen", None), (2, None, "late"), (3, "Oslo", None)]
        messages = {r["error_class"]: r["error_message"] for r in letters}
        assert "fields not added to the table: r, q" in messages["schema_limit"]
        assert f"max_columns={self.MAX_COLUMNS}" in messages["schema_limit"]
        assert f"no member of the union of records of schema id {self.multi_id}" in messages["undecodable"]
