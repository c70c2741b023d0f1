"""Protobuf values (#42) in the Confluent wire format through a real schema registry (Apicurio), real
Kafka, real Spark and Iceberg; the tables read back through PyIceberg.

One pipeline, run as `icetide run` processes: SIGKILLed at three named points (after a table
commit, before one, after a batch before Spark's checkpoint), then run to idle; the final state is
asserted exactly (every good record once, with its values; every bad record once in the dead
letters, with its class: proto2 enum numbers the enum does not name among them); `icetide check`
first. Cost in CI, measured alone on the 2-core machine: 64 s for the test (`check` and four
`icetide run` JVM starts), 74 s for the module with its session's Kafka and registry started (the
CDS archive already made).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.catalog import pyiceberg_catalog
from icetide.config import load_config
from icetide.ingest.formats.protobuf_schema import main_name
from tests.fixtures.avro import register as register_avro
from tests.fixtures.avro import set_compatibility
from tests.fixtures.protobuf import classes, frame, register
from tests.fixtures.records import send
from tests.fixtures.stack import icetide_cli, pipeline_dict, start, unique

pytestmark = pytest.mark.integration

UTC = dt.UTC
MONEY = """syntax = "proto3";
package common;
enum Currency { EUR = 0; USD = 1; }
message Money { int64 units = 1; Currency currency = 2; }
"""
ORDER = """syntax = "proto3";
package acme;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "common/money.proto";

message Order {
  // the order's id
  int64 id = 1;
  string customer = 2;
  google.protobuf.Timestamp placed_at = 3;
  Address address = 4;
  repeated Line lines = 5;
  repeated string tags = 6;
  map<string, int64> counts = 7;
  oneof payment {
    string card = 8;
    int64 cash_cents = 9;
  }
  Status status = 10;
  google.protobuf.Int64Value discount = 11;
  google.protobuf.StringValue coupon = 12;
  bytes raw = 13;
  optional int32 priority = 14;
  uint64 big = 15;
  common.Money total = 16;
  map<string, Line> by_sku = 17;
  //NOTE

  message Line { string sku = 1; uint32 qty = 2; }
  message Address { string city = 1; optional string zip = 2; }
  enum Status { NEW = 0; PAID = 1; }
}
"""
# proto2: closed enums (a number the enum does not name is no value of the field); its columns are the table's
LEGACY = """syntax = "proto2";
package legacy;
message Order {
  optional int64 id = 1;
  repeated Status tags = 6;
  optional Status status = 10;
  optional Money total = 16;
  enum Status { NEW = 0; PAID = 1; }
  message Money { optional int64 units = 1; optional Currency currency = 2; }
  enum Currency { EUR = 0; USD = 1; }
}
"""
V1 = ORDER.replace("  //NOTE\n", "")
V2 = ORDER.replace("  //NOTE\n", "  string note = 18;\n")  # a schema change adding a field
GOOD = 3_000
AT = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def order(cls: Any, i: int, v2: bool) -> Any:
    o = cls["acme.Order"](id=i, tags=[f"t{i}", "x"], raw=bytes([i % 256, 0, 255]), big=2**64 - 1 - i)
    if i % 5:
        o.customer = f"c{i}"  # else unset: proto3's default, ""
    o.placed_at.seconds = int(AT.timestamp()) + i
    o.placed_at.nanos = 1_000 * i % 1_000_000_000 + 999  # the 999 ns are below a timestamp's microsecond
    if i % 4:
        o.address.city = "Oslo"
        if i % 3:
            o.address.zip = f"{i:05d}"
    o.lines.add(sku=f"s{i}", qty=4_294_967_295 - i % 3)  # uint32 past int's range
    o.counts["a"], o.counts["b"] = i, -i
    if i % 3 == 0:
        o.card = f"visa{i}"
    elif i % 3 == 1:
        o.cash_cents = i
    o.status = 7 if i % 50 == 7 else i % 2  # 7: a number the enum does not name (proto3 keeps it)
    if i % 2:
        o.discount.value = i % 4 - 1  # 0 or 2: a wrapper holding 0 is 0, not null
    if i % 5 == 0:
        o.coupon.value = ""
    if i % 2 == 0:
        o.priority = 0  # set to its default: 0, not null
    o.total.units, o.total.currency = 100 * i, i % 2
    o.by_sku[f"s{i}"].qty = i
    if v2:
        o.note = f"n{i}"
    return o


def expected(i: int, v2: bool) -> dict[str, Any]:
    return {
        "id": i, "customer": f"c{i}" if i % 5 else "",
        "placed_at": AT + dt.timedelta(seconds=i, microseconds=(1_000 * i % 1_000_000_000) // 1000),
        "address": ({"city": "Oslo", "zip": f"{i:05d}" if i % 3 else None} if i % 4 else None),
        "lines": [{"sku": f"s{i}", "qty": 4_294_967_295 - i % 3}], "tags": [f"t{i}", "x"],
        "counts": {"a": i, "b": -i},
        "card": f"visa{i}" if i % 3 == 0 else None, "cash_cents": i if i % 3 == 1 else None,
        "status": "7" if i % 50 == 7 else ("PAID" if i % 2 else "NEW"),
        "discount": i % 4 - 1 if i % 2 else None, "coupon": "" if i % 5 == 0 else None,
        "raw": bytes([i % 256, 0, 255]), "priority": 0 if i % 2 == 0 else None,
        "big": decimal.Decimal(2**64 - 1 - i),
        "total": {"units": 100 * i, "currency": "USD" if i % 2 else "EUR"},
        "by_sku": {f"s{i}": {"sku": "", "qty": i}}, "note": f"n{i}" if v2 else None,
    }


def scan(cfg_path: Path, table: str) -> list[dict[str, Any]]:
    return list(pyiceberg_catalog(load_config(cfg_path)).load_table(table).scan().to_arrow().to_pylist())


def test_protobuf_types_versions_and_bad_input_exactly_once_across_kills(kafka, lake, tmp_path, registry) -> None:  # type: ignore[no-untyped-def]
    topic, ns = unique("proto"), unique("proto")
    table = f"{ns}.orders"
    subject = f"{topic}-value"
    money_subject = f"{ns}-common-money"
    register(registry.url, money_subject, MONEY)
    refs = [("common/money.proto", money_subject, 1)]
    v1_id = register(registry.url, subject, V1, refs)
    set_compatibility(registry.url, subject, "NONE")  # the change is the test's, not the registry's
    v2_id = register(registry.url, subject, V2, refs)
    rec_id = register(registry.url, f"{ns}-node-value", 'syntax = "proto3";\npackage t;\n'
                      "message Node { int64 id = 1; Node next = 2; }")
    avro_id = register_avro(registry.url, f"{ns}-avro-value", {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"}]})
    legacy_id = register(registry.url, f"{ns}-legacy-value", LEGACY)
    assert len({v1_id, v2_id, rec_id, avro_id, legacy_id}) == 5
    files = {"common/money.proto": MONEY}
    c1 = classes({**files, main_name(v1_id): V1}, main_name(v1_id))
    c2 = classes({**files, main_name(v2_id): V2}, main_name(v2_id))

    good = [frame(v2_id, order(c2, i, True)) if i >= GOOD // 2 else frame(v1_id, order(c1, i, False))
            for i in range(GOOD)]
    late = order(c1, 1, False)
    late.placed_at.seconds = 253_402_300_800  # 10000-01-01: no timestamp column holds it
    bad = {  # record → (class, what its message says)
        b"\x01" + good[0][1:]: ("bad_magic_byte", "the first byte is 0x01"),
        b"\x00\x00\x01": ("truncated_record", "fewer than the 5 of the Confluent header"),
        frame(987_654, order(c1, 1, False)): ("unknown_schema_id", "schema id 987654 is not in the schema registry"),
        frame(v1_id, b"\x08"): ("undecodable", "not decoded as acme.Order (schema id"),
        frame(v1_id, b"\x0b" * 20_000): ("undecodable", "too many levels of nesting"),  # groups nested 20,000 deep
        frame(v1_id, late): ("undecodable", "a google.protobuf.Timestamp out of its range"),
        frame(v1_id, order(c1, 1, False), (7,)): ("undecodable", f"schema id {v1_id} has no message at indexes [7]"),
        b"\x00" + v1_id.to_bytes(4, "big") + b"\x03": ("undecodable", "the message indexes after the schema id do not"),
        frame(v1_id, c1["acme.Order"](customer="x" * 150_000)): ("oversized_value", "exceeds source.max_value_bytes"),
        frame(rec_id, b""): ("unsupported_schema", "message t.Node contains itself (t.Node → t.Node)"),
        frame(avro_id, b""): ("unsupported_schema", f"schema id {avro_id} is AVRO, not Protobuf"),
        # proto2 enum numbers the enum does not name (protobuf-java would read the field as absent), at
        # the top level (id 1, status 7), in a repeated field (tags 1, 9) and in a nested message
        frame(legacy_id, b"\x08\x01\x50\x07"): ("undecodable", "field status (number 10) holds 7, a number "
                                                                "enum legacy.Order.Status does not name"),
        frame(legacy_id, b"\x08\x02\x30\x01\x30\x09"): ("undecodable", "field tags (number 6) holds 9"),
        frame(legacy_id, b"\x08\x03\x82\x01\x04\x08\x01\x10\x05"): (
            "undecodable", "field total.currency (number 2) holds 5, a number enum legacy.Order.Currency"),
    }
    # the bad records among the first batch's, the second version's from halfway (the table gains its column)
    send(kafka.bootstrap, topic, [*good[:100], *bad, *good[100:]], partitions=2)
    cfg_dict = pipeline_dict(kafka, lake, tmp_path, topic, table)
    cfg_dict["source"].update({"format": "protobuf", "schema_registry": {"url": registry.url, "max_wait_s": 300},
                               "max_offsets_per_trigger": 600, "max_value_bytes": 100_000})
    cfg_dict["target"] = {"table": table}  # no schema: the columns come from the registry
    cfg_dict["stream"]["trigger_interval"] = "1 second"
    cfg = tmp_path / "p.yaml"
    cfg.write_text(yaml.safe_dump(cfg_dict))
    res = icetide_cli("check", "-c", str(cfg), "-o", "json")  # the latest schema compiles: no warning
    assert res.returncode == 0, res.stderr
    checked = json.loads(res.stdout)
    assert [(x["subject"], x["id"]) for x in checked["subjects"]] == [(subject, v2_id)] and checked["warnings"] == []
    log = tmp_path / "run.log"
    # killed after batch 0's table commit (its dead letters not yet), then before batch 2's (the one
    # whose records add the column: evolved, nothing written), then after the replay of batch 2
    # before Spark's checkpoint
    for fault in (f"after_table_commit@1:{table}", f"before_table_commit@3:{table}", "after_batch_before_checkpoint@1"):
        proc = start(cfg, log, "--until-idle", fault=fault)
        assert proc.wait(600) != 0, f"{fault} did not kill the run:\n{log.read_text()[-3000:]}"
    proc = start(cfg, log, "--until-idle")
    assert proc.wait(600) == 0, log.read_text()[-3000:]

    rows = scan(cfg, table)
    assert len(rows) == GOOD and sorted(r["id"] for r in rows) == list(range(GOOD))  # each exactly once
    for r in rows:
        i = r["id"]
        want = expected(i, i >= GOOD // 2)
        got = {k: r[k] for k in want} | {"counts": dict(r["counts"]),
                                        "by_sku": {k: v for k, v in r["by_sku"]}}  # maps read back as pairs
        assert got == want, i

    iceberg = pyiceberg_catalog(load_config(cfg)).load_table(table).schema()
    columns = [f.name for f in iceberg.fields if not f.name.startswith("_kafka_")]
    assert columns == [*expected(0, True)]  # the .proto's order, v2's note added last
    types = {n: str(iceberg.find_type(n)) for n in columns}
    assert {n: types[n] for n in ("id", "customer", "placed_at", "tags", "card", "cash_cents", "status", "discount",
                                  "coupon", "raw", "priority", "big", "note")} == {
        "id": "long", "customer": "string", "placed_at": "timestamptz", "tags": "list<string>", "card": "string",
        "cash_cents": "long", "status": "string", "discount": "long", "coupon": "string", "raw": "binary",
        "priority": "int", "big": "decimal(20, 0)", "note": "string"}
    assert str(iceberg.find_type("counts")) == "map<string, long>"
    assert str(iceberg.find_type("lines.element.qty")) == "long"  # uint32: the unsigned value
    assert str(iceberg.find_type("total.currency")) == "string"  # an enum of a referenced file
    assert iceberg.find_field("id").doc == "the order's id"

    letters = scan(cfg, f"{table}_dlq")
    assert len(letters) == len(bad)  # each exactly once, across the kills
    got_letters = {r["value"]: (r["error_class"], r["error_message"]) for r in letters}
    assert set(got_letters) == set(bad)
    for value, (cls, says) in bad.items():
        assert got_letters[value][0] == cls and says in got_letters[value][1], (cls, got_letters[value])
