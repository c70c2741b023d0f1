"""JSON Schema values (#42) in the Confluent wire format through a real schema registry (Apicurio),
real Kafka, real Spark and Iceberg, in one pipeline run; the table read back through PyIceberg."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.catalog import pyiceberg_catalog
from icetide.config import load_config
from tests.fixtures.avro import register, set_compatibility
from tests.fixtures.records import send
from tests.fixtures.stack import pipeline_dict, run_in_process, unique

pytestmark = pytest.mark.integration

UTC = dt.UTC
NOT_INCLUDED = {"type": "null", "title": "Not included"}  # Confluent's generator: an optional field


def optional(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [NOT_INCLUDED, schema]}


#: v1: what Confluent's Jackson-based generator writes (optional fields as oneOf, closed objects)
V1: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "additionalProperties": False, "required": ["id", "placedAt"],
    "properties": {
        "id": {"type": "integer", "minimum": 1, "description": "the order's id"},
        "customer": optional({"type": "string"}),
        "placedAt": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "total": {"type": "number"},
        "paid": {"type": "boolean"},
        "address": optional({"type": "object", "additionalProperties": False, "required": ["zip"], "properties": {
            "street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            "city": {"type": "string"}}}),
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}},
        "attrs": {"type": "object", "additionalProperties": {"type": "number"}},
        "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
    },
    "definitions": {"Line": {"type": "object", "additionalProperties": False, "required": ["sku", "qty"],
                             "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}}},
}
#: v2: two fields added (a schema change)
V2 = copy.deepcopy(V1)
V2["properties"]["note"] = optional({"type": "string"})
V2["properties"]["status"] = {"enum": ["new", "paid"]}


def order(i: int, v2: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": i + 1, "placedAt": dt.datetime(2026, 5, 1, 12, 0, 0, i, tzinfo=UTC).isoformat(),
        "day": f"2026-05-{1 + i % 28:02d}", "total": i * 1.5, "paid": bool(i % 2),
        "tags": [f"t{i}", "x"], "attrs": {"a": float(i), "b": -1.0},
        "lines": [{"sku": f"s{i}", "qty": 1 + i % 3}],
    }
    if i % 3 == 1:
        out["customer"] = None  # explicit null: the optional form allows it
    elif i % 3 == 2:
        out["customer"] = f"c{i}"
    if i % 4:
        out["address"] = {"street": "Main St", "zip": f"{10000 + i:05d}", "city": "Oslo"}
    if v2:
        out["note"] = f"n{i}"
        out["status"] = "paid" if i % 2 else "new"
    return out


def wire(schema_id: int, value: Any) -> bytes:
    """The Confluent wire format: byte 0, the 4-byte big-endian schema id, the JSON text."""
    text = value if isinstance(value, bytes) else json.dumps(value).encode()
    return b"\x00" + schema_id.to_bytes(4, "big") + text


def scan(cfg_path: Path, table: str) -> list[dict[str, Any]]:
    return list(pyiceberg_catalog(load_config(cfg_path)).load_table(table).scan().to_arrow().to_pylist())


def test_versions_nested_types_and_every_bad_input_in_one_run(kafka, lake, tmp_path, spark, registry) -> None:  # type: ignore[no-untyped-def]
    """Two schema versions interleaved in one batch (v2 adds fields), nested objects, arrays of
    $ref'd objects, maps, date-times and dates; one record of each wire fault, one breaking each
    kind of rule of its own schema (a dead letter naming the JSON path), all in one run."""
    topic, ns = unique("jsonschema"), unique("jsch")
    table = f"{ns}.orders"
    v1_id = register(registry.url, f"{topic}-value", V1, "JSON")
    set_compatibility(registry.url, f"{topic}-value", "NONE")  # the change is the test's, not the registry's
    v2_id = register(registry.url, f"{topic}-value", V2, "JSON")
    recursive = {"type": "object", "properties": {"id": {"type": "integer"}, "next": {"$ref": "#"}}}
    rec_id = register(registry.url, f"{ns}-other-value", recursive, "JSON")
    avro_id = register(registry.url, f"{ns}-avro-value", {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"}]})
    assert len({v1_id, v2_id, rec_id, avro_id}) == 4

    good = [wire(v2_id if i % 2 else v1_id, order(i, bool(i % 2))) for i in range(30)]
    base = order(100, False)
    broken = {  # record → the dead letter's message (each breaks one rule of its own schema)
        wire(v1_id, base | {"address": {"zip": "12ab"}}): "$.address.zip: does not match pattern ^[0-9]{5}$",
        wire(v1_id, base | {"lines": [{"sku": "a", "qty": 1}, {"sku": "b"}]}):
            "$.lines[1].qty: is required but missing",
        wire(v1_id, base | {"customer": 5}): "$.customer: is not of type string (a number)",
        wire(v1_id, base | {"id": 0}): "$.id: is less than the minimum 1",
        wire(v1_id, {k: v for k, v in base.items() if k != "placedAt"}): "$.placedAt: is required but missing",
        wire(v1_id, base | {"total": None}): "$.total: is null, which type number does not allow",
        wire(v1_id, base | {"extra": 1}):
            '$: has property "extra", which the schema does not declare (additionalProperties: false)',
        wire(v2_id, order(101, True) | {"status": "lost"}): '$.status: is not one of ["new", "paid"]',
        wire(v1_id, base | {"tags": ["ok", "much-too-long"]}): "$.tags[1]: is longer than 8 characters",
    }
    bad = {
        "bad_magic_byte": b"\x01" + good[0][1:],
        "truncated_record": b"\x00\x00\x01",
        "unknown_schema_id": wire(987_654, base),
        "malformed_json": wire(v1_id, b'{"id": 1, '),
        "type_mismatch": wire(v1_id, base | {"placedAt": "not a time"}),  # the parse's: no column holds it
    }
    unsupported = {rec_id: wire(rec_id, {"id": 1}), avro_id: wire(avro_id, {"id": 1})}
    send(kafka.bootstrap, topic, [*good[:15], *broken, *bad.values(), *unsupported.values(), *good[15:]],
         partitions=2)
    cfg_dict = pipeline_dict(kafka, lake, tmp_path, topic, table)
    cfg_dict["source"].update({"format": "json_schema", "schema_registry": {"url": registry.url, "max_wait_s": 300}})
    cfg_dict["target"] = {"table": table}  # no schema: the columns come from the registry
    cfg = tmp_path / "p.yaml"
    cfg.write_text(yaml.safe_dump(cfg_dict))
    runner = run_in_process(spark, cfg)
    assert runner.writer.counters.batches == 1  # both versions and the bad records in one batch

    rows = {r["id"]: r for r in scan(cfg, table)}
    assert sorted(rows) == list(range(1, 31))
    for i in range(30):
        r, want, v2 = rows[i + 1], order(i, bool(i % 2)), bool(i % 2)
        assert r["placedAt"] == dt.datetime(2026, 5, 1, 12, 0, 0, i, tzinfo=UTC)  # to the microsecond, with zone
        assert r["day"] == dt.date(2026, 5, 1 + i % 28)
        assert r["total"] == i * 1.5 and r["paid"] is bool(i % 2)
        assert r["customer"] == want.get("customer")  # null: missing or explicitly null
        assert r["address"] == want.get("address")
        assert r["tags"] == want["tags"] and dict(r["attrs"]) == want["attrs"] and r["lines"] == want["lines"]
        assert r["note"] == (f"n{i}" if v2 else None) and r["status"] == want.get("status")  # each as its version wrote

    iceberg = pyiceberg_catalog(load_config(cfg)).load_table(table).schema()
    assert [f.name for f in iceberg.fields][:3] == ["id", "customer", "placedAt"]  # the schema's order
    columns = [f.name for f in iceberg.fields if not f.name.startswith("_kafka_")]
    assert columns[-2:] == ["note", "status"]  # v2's fields added after v1's
    assert str(iceberg.find_type("id")) == "long" and str(iceberg.find_type("total")) == "double"
    assert str(iceberg.find_type("placedAt")) == "timestamptz" and str(iceberg.find_type("day")) == "date"
    assert str(iceberg.find_type("attrs")) == "map<string, double>"
    assert iceberg.find_field("id").doc == "the order's id"

    letters = scan(cfg, f"{table}_dlq")
    by_class: dict[str, list[dict[str, Any]]] = {}
    for r in letters:
        by_class.setdefault(r["error_class"], []).append(r)
    assert sorted((c, len(v)) for c, v in by_class.items()) == sorted(
        [*((c, 1) for c in bad), ("unsupported_schema", 2), ("schema_violation", len(broken))])
    for cls, value in bad.items():
        assert by_class[cls][0]["value"] == value  # the original bytes, for a replay
    assert {r["value"]: r["error_message"] for r in by_class["schema_violation"]} == broken
    refused = {r["value"]: r["error_message"] for r in by_class["unsupported_schema"]}
    assert "refers to itself through $ref '#'" in refused[unsupported[rec_id]]
    assert f"schema id {avro_id} is AVRO, not JSON Schema" in refused[unsupported[avro_id]]
    assert "987654" in by_class["unknown_schema_id"][0]["error_message"]
