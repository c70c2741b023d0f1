"""Kafka Connect and Debezium types, lenient schema parsing, record-name routing values (no JVM)."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from icetide.config.registry import SchemaRegistry
from icetide.ingest.formats import avro_semantic, avro_types
from icetide.ingest.formats.avro import AvroFormat, Decoding, record_route_value

pytestmark = pytest.mark.unit

DBZ = "io.debezium.time."


def rec(*fields: dict[str, Any], name: str = "Value", ns: str = "shop.customers") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": ns, "fields": list(fields)}


def dbz(name: str, t: str) -> dict[str, Any]:
    return {"type": t, "connect.version": 1, "connect.name": name}


#: Debezium's Avro types as its converter registers them (time.precision.mode adaptive,
#: adaptive_time_microseconds, connect), and the table type each must give
VSD = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data", "fields": [
    {"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
    "connect.doc": "Variable scaled decimal", "connect.version": 1,
    "connect.name": "io.debezium.data.VariableScaleDecimal"}
CONNECT_DECIMAL = {"type": "bytes", "scale": 2, "precision": 64, "connect.version": 1,
                   "connect.parameters": {"scale": "2"}, "connect.name": "org.apache.kafka.connect.data.Decimal",
                   "logicalType": "decimal"}
SEMANTIC: list[tuple[Any, Any, Any]] = [  # (Avro type, converted column, raw column)
    (dbz(DBZ + "Date", "int"), DateType(), IntegerType()),
    (dbz(DBZ + "Time", "int"), IntegerType(), IntegerType()),
    (dbz(DBZ + "MicroTime", "long"), LongType(), LongType()),
    (dbz(DBZ + "NanoTime", "long"), LongType(), LongType()),
    (dbz(DBZ + "Timestamp", "long"), TimestampNTZType(), LongType()),
    (dbz(DBZ + "MicroTimestamp", "long"), TimestampNTZType(), LongType()),
    (dbz(DBZ + "NanoTimestamp", "long"), TimestampNTZType(), LongType()),
    (dbz(DBZ + "ZonedTimestamp", "string"), TimestampType(), StringType()),
    (dbz(DBZ + "ZonedTime", "string"), StringType(), StringType()),
    (dbz("io.debezium.data.Json", "string"), StringType(), StringType()),
    (dbz("io.debezium.data.Uuid", "string"), StringType(), StringType()),
    (dbz("io.debezium.data.Enum", "string"), StringType(), StringType()),
    (VSD, StringType(), StructType.fromJson({"type": "struct", "fields": [
        {"name": "scale", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "value", "type": "binary", "nullable": True, "metadata": {}}]})),
    # connect mode: Confluent's converter writes the logical type too; without it the name decides
    ({**dbz("org.apache.kafka.connect.data.Date", "int"), "logicalType": "date"}, DateType(), DateType()),
    (dbz("org.apache.kafka.connect.data.Date", "int"), DateType(), IntegerType()),
    (dbz("org.apache.kafka.connect.data.Time", "int"), IntegerType(), IntegerType()),
    (dbz("org.apache.kafka.connect.data.Timestamp", "long"), TimestampType(), LongType()),
    ({**dbz("org.apache.kafka.connect.data.Timestamp", "long"), "logicalType": "timestamp-millis"},
     TimestampType(), TimestampType()),
    # a Connect Decimal without connect.decimal.precision: precision 64 → decimal(38, scale) either way
    (CONNECT_DECIMAL, DecimalType(38, 2), DecimalType(38, 2)),
]


@pytest.mark.parametrize(("avro", "converted", "raw"), SEMANTIC)
def test_connect_and_debezium_types_become_the_columns_they_mean(avro: Any, converted: Any, raw: Any) -> None:
    schema = json.dumps(rec({"name": "x", "type": ["null", avro], "default": None}))
    got = avro_types.parse(3, schema)
    assert got.struct["x"].dataType == converted
    assert avro_types.parse(3, schema, semantic=False).struct["x"].dataType == raw  # semantic_types: raw


def test_adaptive_precision_mode_gives_timestamp_columns_and_notes_say_what_raw_values_are() -> None:
    """Debezium's default time.precision.mode (adaptive): DATETIME(0-3) Timestamp, DATETIME(4-6)
    MicroTimestamp, TIMESTAMP WITH TIME ZONE ZonedTimestamp: timestamps, never bigints."""
    w = avro_types.parse(5, json.dumps(rec(
        {"name": "created", "type": dbz(DBZ + "Timestamp", "long")},
        {"name": "updated", "type": ["null", dbz(DBZ + "MicroTimestamp", "long")], "default": None},
        {"name": "seen", "type": ["null", dbz(DBZ + "ZonedTimestamp", "string")], "default": None},
        {"name": "born", "type": dbz(DBZ + "Date", "int")},
        {"name": "at", "type": dbz(DBZ + "MicroTime", "long")},
        {"name": "precise", "type": dbz(DBZ + "NanoTime", "long")})))
    types = {f.name: f.dataType for f in w.struct.fields}
    assert types == {"created": TimestampNTZType(), "updated": TimestampNTZType(), "seen": TimestampType(),
                     "born": DateType(), "at": LongType(), "precise": LongType()}
    assert w.conversions == {("seen",): "zoned"}
    assert w.struct["at"].metadata["comment"] == "time-micros: microseconds after midnight"
    assert "nanoseconds after midnight" in w.struct["precise"].metadata["comment"]
    # what from_avro decodes: the logical types added, the bytes read as written
    assert w.decoded_struct["seen"].dataType == StringType()
    assert w.decoded_struct["created"].dataType == TimestampNTZType()
    assert w.schema["fields"][0]["type"]["logicalType"] == "local-timestamp-millis"


def test_conversions_follow_named_types_and_stop_at_arrays_and_maps() -> None:
    """A Debezium envelope defines its row record in ``before`` and names it in ``after``: both
    paths convert. Inside an array the raw type stays (no per-element conversion)."""
    value = rec({"name": "id", "type": "long"}, {"name": "amount", "type": ["null", VSD], "default": None},
                {"name": "ts", "type": dbz(DBZ + "NanoTimestamp", "long")},
                {"name": "zs", "type": {"type": "array", "items": dbz(DBZ + "ZonedTimestamp", "string")}})
    env = rec({"name": "before", "type": ["null", value], "default": None},
              {"name": "after", "type": ["null", "Value"], "default": None},
              {"name": "op", "type": "string"}, name="Envelope")
    w = avro_types.parse(9, json.dumps(env))
    assert w.conversions == {("before", "amount"): "variable_decimal", ("before", "ts"): "nanos_ntz",
                             ("after", "amount"): "variable_decimal", ("after", "ts"): "nanos_ntz"}
    after = w.struct["after"].dataType
    assert isinstance(after, StructType)
    assert after["amount"].dataType == StringType() and after["ts"].dataType == TimestampNTZType()
    assert after["zs"].dataType == ArrayType(StringType())
    decoded_after = w.decoded_struct["after"].dataType
    assert isinstance(decoded_after, StructType)
    assert decoded_after["amount"].dataType["value"].dataType == DecimalType(38, 0)  # type: ignore[index]


def test_decimals_wider_than_38_digits_decode_as_38_and_other_precisions_stay() -> None:
    s = avro_semantic.decode_schema(rec({"name": "a", "type": CONNECT_DECIMAL},
                                        {"name": "b", "type": {"type": "bytes", "logicalType": "decimal",
                                                               "precision": 12, "scale": 3}}), semantic=True)
    assert [f["type"]["precision"] for f in s["fields"]] == [38, 12]
    assert CONNECT_DECIMAL["precision"] == 64  # the writer's schema itself is not changed


def test_defaults_registries_accept_are_not_validated() -> None:
    """Registries accept defaults Avro's strict parser refuses; Spark's from_avro does not validate
    them either: such a schema is a table like any other."""
    w = avro_types.parse(4, json.dumps(rec({"name": "id", "type": "long"},
                                           {"name": "email", "type": "string", "default": None},
                                           {"name": "n", "type": "int", "default": "zero"})))
    assert w.struct.fieldNames() == ["id", "email", "n"]
    # never read (each record decodes with its own writer schema), so not handed to from_avro, whose
    # schema Avro parses strictly again in every task
    assert all("default" not in f for f in w.schema["fields"])


def test_hostile_schemas_are_refused_with_a_reason_never_another_exception() -> None:
    seed = int(time.time())
    print(f"seed {seed}")
    rng = random.Random(seed)
    atoms: list[Any] = [None, 1, "x", [], {}, "long", {"type": None}, {"type": "bytes", "logicalType": "decimal",
                        "precision": "many"}, {"type": "map"}, {"type": "array", "items": 7}, ["null", {}],
                        {"type": "record", "name": 3, "fields": {}}, {"type": "fixed", "logicalType": "decimal"},
                        {"type": "long", "connect.name": DBZ + "NanoTimestamp", "logicalType": {}},
                        {**VSD, "fields": "none"}, {"type": "record", "name": "R", "fields": [None, 5, {"name": ""}]}]
    for _ in range(300):
        fields = [{"name": f"f{i}", "type": rng.choice(atoms)} for i in range(rng.randint(0, 4))]
        for schema in (rec(*fields), rng.choice(atoms)):
            try:
                avro_types.parse(11, json.dumps(schema), semantic=rng.random() < 0.5)
            except avro_types.UnsupportedSchema as e:
                assert "schema id 11" in str(e)


def test_record_name_routing_keeps_the_namespace() -> None:
    """Every Debezium envelope is named Envelope: two tables' envelopes must route apart."""
    assert record_route_value("inventory.customers.Envelope") == "inventory_customers_Envelope"
    assert record_route_value("inventory.orders.Envelope") == "inventory_orders_Envelope"
    assert record_route_value("ConnectDefault") == "ConnectDefault"


def test_a_table_holds_every_field_of_every_version_each_read_with_its_own_schema() -> None:
    """BACKWARD lets v2 delete ``email`` and an enum symbol: v1's records keep both (each id decodes
    with its own writer schema, never through the subject's latest), and the table's type is the
    union of the versions."""
    color = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
    v1 = rec({"name": "id", "type": "long"}, {"name": "email", "type": "string"}, {"name": "color", "type": color})
    v2 = rec({"name": "id", "type": "long"}, {"name": "color", "type": {**color, "symbols": ["RED", "GREEN"]}},
             {"name": "note", "type": "string", "default": ""})
    fmt = AvroFormat(SchemaRegistry(url="http://127.0.0.1:9"))
    fmt.decodings = {1: Decoding(avro_types.parse(1, json.dumps(v1))), 2: Decoding(avro_types.parse(2, json.dumps(v2)))}
    declared = fmt.declared([2, 1])
    assert declared is not None and declared.fieldNames() == ["id", "email", "color", "note"]
    assert fmt.decodings[1].writer.schema == v1 and fmt.decodings[1].struct.fieldNames() == ["id", "email", "color"]
