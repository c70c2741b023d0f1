"""Avro tables evolve everywhere JSON's do (#40 item 5): fields of a map's struct values, the
writer's order (where new columns go and which fields ``max_columns`` admits), and a field a table
policy refuses names the records that carry it by their writer schema. No JVM."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql.types import IntegerType, LongType, MapType, StringType, StructField, StructType

from icetide.ingest import evolution
from icetide.ingest.formats import avro_rows, avro_types

pytestmark = pytest.mark.unit


def struct(schema: dict[str, Any]) -> StructType:
    return avro_types.parse(1, json.dumps(schema)).struct


PRICE = {"type": "record", "name": "Price", "fields": [{"name": "amount", "type": "long"}]}
V1 = {"type": "record", "name": "Ev", "namespace": "t", "fields": [
    {"name": "id", "type": "long"}, {"name": "prices", "type": {"type": "map", "values": PRICE}}]}
PRICE2 = {**PRICE, "fields": [*PRICE["fields"], {"name": "currency", "type": "string"},
                              {"name": "cents", "type": "int"}]}
V2 = {**V1, "fields": [V1["fields"][0], {"name": "prices", "type": {"type": "map", "values": PRICE2}}]}


def test_a_field_added_to_a_maps_struct_values_becomes_a_column_in_the_writers_order() -> None:
    table = struct(V1)
    evo = evolution.diff(table, struct(V2), 1000)
    assert [(p.name, t) for p, t in evo.added] == [("prices.value.currency", StringType()),
                                                   ("prices.value.cents", IntegerType())]
    assert not evo.rejected
    # the partial schema Iceberg's unionByNameWith takes holds the map with only the new value fields
    partial = evolution._partial(table, evo.added, evo.comments)
    assert partial == StructType([StructField("prices", MapType(StringType(), StructType([
        StructField("currency", StringType()), StructField("cents", IntegerType())])))])
    narrow = {**PRICE2, "fields": [{"name": "amount", "type": "int"}]}  # an older version's int in a long column
    assert not evolution.diff(struct(V2), struct({**V1, "fields": [
        V1["fields"][0], {"name": "prices", "type": {"type": "map", "values": narrow}}]}), 1000).added


def test_max_columns_admits_fields_in_the_writers_order_and_new_nested_columns_keep_it() -> None:
    """A new table from ``zeta, Beta, alpha{z, a}, m``: with room for two columns, the first two
    the writer wrote get them (the name order gave ``alpha`` and ``zeta``)."""
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "zeta", "type": "int"}, {"name": "Beta", "type": "string"},
        {"name": "alpha", "type": {"type": "record", "name": "N", "fields": [
            {"name": "z", "type": "int"}, {"name": "a", "type": "int"}]}},
        {"name": "m", "type": "long"}]}
    evo = evolution.diff(StructType([]), struct(schema), 2)
    assert [p.name for p, _ in evo.added] == ["zeta", "Beta"]
    assert [(p.name, c) for p, c in evo.rejected] == [("alpha", "schema_limit"), ("m", "schema_limit")]
    full = evolution.diff(StructType([]), struct(schema), 1000)
    assert [p.name for p, _ in full.added] == ["zeta", "Beta", "alpha", "m"]
    # a later version adds fields inside a struct: the columns go in as the writer wrote them
    later = {**schema, "fields": [schema["fields"][0], {"name": "alpha", "type": {
        "type": "record", "name": "N", "fields": [{"name": "z", "type": "int"}, {"name": "y", "type": "int"},
                                                  {"name": "a", "type": "int"}, {"name": "b", "type": "long"}]}}]}
    nested = evolution.diff(struct(schema), struct(later), 1000)
    assert [p.name for p, _ in nested.added] == ["alpha.y", "alpha.b"]


def test_a_refused_field_names_the_records_of_the_versions_that_declare_it() -> None:
    t = struct(V2)
    assert avro_rows.declares(t, ("prices", "value", "currency"))
    assert not avro_rows.declares(struct(V1), ("prices", "value", "currency"))
    # a case twin is the same column (the projection matches names ignoring case): its records are refused too
    assert avro_rows.declares(t, ("id",)) and avro_rows.declares(t, ("ID",))
    assert not avro_rows.declares(t, ("id", "x")) and not avro_rows.declares(t, ("prices", "element"))
    table = StructType([StructField("id", LongType())])
    evo = evolution.diff(table, t, 1)  # no room for prices: refused, not dropped
    assert [(p.name, c) for p, c in evo.rejected] == [("prices", "schema_limit")]


def test_a_refused_field_spelled_two_ways_refuses_both_versions_records() -> None:
    """The review's case twin: v1 writes ``Email``, v2 ``email``, the table has no room. Both versions'
    records are dead letters (was: only v1's; v2's values vanished in the projection, no dead letter)."""
    import json

    from icetide.ingest.formats import avro_types

    def version(sid: int, name: str) -> StructType:
        return avro_types.parse(sid, json.dumps({"type": "record", "name": "Ev", "namespace": "t", "fields": [
            {"name": "id", "type": "long"}, {"name": name, "type": ["null", "string"]}]})).struct

    v1, v2 = version(1, "Email"), version(2, "email")
    evo = evolution.diff(StructType([StructField("id", LongType())]), avro_types.merged([v1, v2]), 1)
    refused = [p for p, _ in evo.rejected]
    assert len(refused) == 1
    assert {sid for sid, row in ((1, v1), (2, v2)) if any(avro_rows.declares(row, p.parts) for p in refused)} == {1, 2}
