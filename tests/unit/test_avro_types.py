"""Avro → column types and which writer schemas a table takes (no JVM)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from icetide.config.registry import SchemaRegistry
from icetide.errors import ConfigError
from icetide.ingest.formats import avro_types
from icetide.ingest.formats.registry import (
    RegistryClient,
    RegistryUnavailable,
    SchemaRefused,
    UnknownSchemaId,
    subject,
)

pytestmark = pytest.mark.unit


def rec(*fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "ns", "fields": list(fields)}


def col(name: str, t: Any, **kw: Any) -> dict[str, Any]:
    return {"name": name, "type": t, **kw}


@pytest.mark.parametrize(("avro", "spark"), [
    ("string", StringType()), ("int", IntegerType()), ("long", LongType()), ("float", FloatType()),
    ("double", DoubleType()), ("bytes", BinaryType()),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, StringType()),
    ({"type": "fixed", "name": "F", "size": 3}, BinaryType()),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, DecimalType(10, 2)),
    ({"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4},
     DecimalType(18, 4)),
    ({"type": "int", "logicalType": "date"}, DateType()),
    ({"type": "int", "logicalType": "time-millis"}, IntegerType()),
    ({"type": "long", "logicalType": "time-micros"}, LongType()),
    ({"type": "long", "logicalType": "timestamp-millis"}, TimestampType()),
    ({"type": "long", "logicalType": "timestamp-micros"}, TimestampType()),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, TimestampNTZType()),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, TimestampNTZType()),
    ({"type": "string", "logicalType": "uuid"}, StringType()),
    (["null", "long"], LongType()),
    (["int", "long"], LongType()),
    (["float", "double", "null"], DoubleType()),
    (["int", "string", "null"],
     StructType([StructField("member_int", IntegerType()), StructField("member_string", StringType())])),
    ({"type": "array", "items": "string"}, ArrayType(StringType())),
    ({"type": "map", "values": "long"}, MapType(StringType(), LongType())),
])
def test_each_avro_type_maps_to_its_column_type(avro: Any, spark: Any) -> None:
    got = avro_types.parse(1, json.dumps(rec(col("x", avro)))).struct
    assert got.fieldNames() == ["x"] and got["x"].dataType == spark and got["x"].nullable


def test_union_columns_are_named_by_type_so_versions_that_reorder_or_add_members_keep_them() -> None:
    """#40 item 7: Spark's stable union names (``member_`` + the type's name, a named type without
    its namespace), not positions: ``[int, string]`` and ``[string, int]`` give the same columns, a
    member added before the others adds a column and moves none (positional names moved the string
    values into ``member0`` when ``int`` went second)."""
    addr = {"type": "record", "name": "Addr", "namespace": "geo", "fields": [col("city", "string")]}
    v1 = avro_types.parse(1, json.dumps(rec(col("u", ["null", "int", "string"])))).struct["u"].dataType
    v2 = avro_types.parse(2, json.dumps(rec(col("u", ["string", "null", "int"])))).struct["u"].dataType
    v3 = avro_types.parse(3, json.dumps(rec(col("u", [addr, {"type": "long", "logicalType": "timestamp-millis"},
                                                      "string", "int", {"type": "array", "items": "int"},
                                                      {"type": "enum", "name": "E", "symbols": ["A"]}]))))
    assert isinstance(v1, StructType) and isinstance(v2, StructType)
    assert sorted(v1.fieldNames()) == sorted(v2.fieldNames()) == ["member_int", "member_string"]
    assert v1["member_int"] == v2["member_int"] and v1["member_string"] == v2["member_string"]
    got = v3.struct["u"].dataType
    assert isinstance(got, StructType)
    assert got.fieldNames() == ["member_Addr", "member_long", "member_string", "member_int", "member_array",
                                "member_E"]
    assert avro_types.fit(v1, got).ok and not avro_types.fit(v1, got).widen  # the table takes v3 by adding columns
    assert avro_types.merged([v1, got]).fieldNames() == [
        "member_int", "member_string", "member_Addr", "member_long", "member_array", "member_E"]
    other = {**addr, "namespace": "shop"}
    with pytest.raises(avro_types.UnsupportedSchema, match="two members named 'member_Addr'"):
        avro_types.parse(4, json.dumps(rec(col("u", [addr, other]))))


def test_nested_records_named_types_docs_and_time_notes() -> None:
    addr = {"type": "record", "name": "Addr", "fields": [col("city", "string", doc="where")]}
    w = avro_types.parse(7, json.dumps(rec(col("home", addr), col("work", ["null", "Addr"]),
                                           col("t", {"type": "int", "logicalType": "time-millis"}, doc="clock"),
                                           col("items", {"type": "array", "items": addr}), name="Person")))
    assert w.full_name == "ns.Person" and w.name == "Person"
    inner = StructType([StructField("city", StringType(), True, {"comment": "where"})])
    assert w.struct["home"].dataType == inner and w.struct["work"].dataType == inner
    assert w.struct["items"].dataType == ArrayType(inner)
    assert w.struct["t"].metadata["comment"] == "clock · time-millis: milliseconds after midnight"


@pytest.mark.parametrize(("schema", "why"), [
    (rec(col("id", "long"), col("next", ["null", "R"])), "contains itself"),
    (rec(col("a", "long"), col("A", "long")), "ignoring case"),
    (rec(col("_kafka_offset", "long")), "reserves"),
    (rec(col("d", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 12})), "precision 1-38"),
    (rec(col("x", "ns.Missing")), "not defined"),
    ({"type": "array", "items": "long"}, "not an Avro record"),
])
def test_schemas_no_table_can_hold_are_refused_with_the_reason(schema: Any, why: str) -> None:
    with pytest.raises(avro_types.UnsupportedSchema, match=why) as e:
        avro_types.parse(42, json.dumps(schema))
    assert "42" in str(e.value)


def test_fit_widens_only_what_iceberg_allows_and_names_conflicts() -> None:
    table = StructType([StructField("n", IntegerType()), StructField("r", FloatType()),
                        StructField("d", DecimalType(10, 2)), StructField("s", StringType()),
                        StructField("l", LongType()),
                        StructField("nest", StructType([StructField("k", IntegerType())]))])
    seen = StructType([StructField("n", LongType()), StructField("r", DoubleType()),
                       StructField("d", DecimalType(12, 2)), StructField("s", StringType()),
                       StructField("l", IntegerType()),  # narrower than the table: read as is
                       StructField("nest", StructType([StructField("k", LongType())])),
                       StructField("new", StringType())])
    f = avro_types.fit(table, seen)
    assert f.ok
    assert {(p, str(new)) for p, _, new in f.widen} == {
        (("n",), "LongType()"), (("r",), "DoubleType()"), (("d",), "DecimalType(12,2)"), (("nest", "k"), "LongType()")}
    bad = avro_types.fit(table, StructType([StructField("s", LongType()), StructField("d", DecimalType(10, 3))]))
    assert not bad.ok and len(bad.conflicts) == 2
    assert bad.conflicts[0].startswith("s is string in the table but bigint")


def test_merged_keeps_every_field_in_first_seen_order_and_the_widest_type() -> None:
    a = StructType([StructField("id", StringType()), StructField("n", IntegerType())])
    b = StructType([StructField("id", StringType()), StructField("n", LongType()), StructField("note", StringType())])
    assert avro_types.merged([a, b]) == StructType([StructField("id", StringType()), StructField("n", LongType()),
                                                    StructField("note", StringType())])


def test_subject_names_follow_the_strategy() -> None:
    assert subject("topic_name", "orders", "com.acme.Order") == "orders-value"
    assert subject("record_name", "orders", "com.acme.Order") == "com.acme.Order"
    assert subject("topic_record_name", "orders", "com.acme.Order") == "orders-com.acme.Order"


class _Registry(BaseHTTPRequestHandler):
    """A scripted registry: answers from ``plan`` (status, body) in turn, records the requests."""

    plan: ClassVar[list[tuple[int, Any]]] = []
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        status, body = type(self).plan.pop(0) if type(self).plan else (500, {})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def scripted() -> Any:
    server = HTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Registry.plan, _Registry.seen = [], []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_registry_client_waits_out_an_outage_then_caches_the_schema(scripted: str) -> None:
    _Registry.plan = [(503, {}), (500, {}), (200, {"schema": '{"type":"string"}'})]
    slept: list[float] = []
    client = RegistryClient(SchemaRegistry(url=scripted, basic_auth_user_info="u:secret-pw"), sleep=slept.append)
    outages: list[str] = []
    client.on_outage = outages.append
    assert client.schema(5)["schema"] == '{"type":"string"}'
    assert outages == ["HTTP 503"] and client.outage_since is None  # one alert per outage, over once it answers
    assert client.schema(5)["schema"] == '{"type":"string"}'  # cached: no request
    assert slept == [0.5, 1.0]
    assert [p for p, _ in _Registry.seen] == ["/schemas/ids/5"] * 3
    assert _Registry.seen[0][1] == "Basic dTpzZWNyZXQtcHc="


def test_registry_client_unknown_id_refused_credentials_and_giving_up(scripted: str) -> None:
    _Registry.plan = [(404, {"error_code": 40403})]
    client = RegistryClient(SchemaRegistry(url=scripted, max_wait_s=2), sleep=lambda s: None)
    with pytest.raises(UnknownSchemaId):
        client.schema(9)
    _Registry.plan = [(401, {})]
    with pytest.raises(ConfigError, match="refused the credentials"):
        client.schema(10)
    _Registry.plan = [(503, {})] * 10
    with pytest.raises(RegistryUnavailable, match="did not answer") as e:
        client.schema(11)
    assert not e.value.terminal  # the batch is retried, nothing is dead-lettered


def test_a_schema_the_registry_refuses_to_serve_is_refused_at_once_not_waited_out(scripted: str) -> None:
    """Apicurio answers 400 for a schema its own parser cannot read (a default Avro's strict parser
    refuses): a definite answer about that id, not an outage (#40: one schema never stops the run)."""
    _Registry.plan = [(400, {"message": "Failed to discover artifact type from content.", "error_code": 0})]
    slept: list[float] = []
    client = RegistryClient(SchemaRegistry(url=scripted, max_wait_s=600), sleep=slept.append)
    with pytest.raises(SchemaRefused, match=r"HTTP 400 \(Failed to discover artifact type"):
        client.schema(7)
    assert slept == [] and client.outage_since is None


def test_versions_avro_promotes_share_a_table_whichever_came_first() -> None:
    """Each record decodes with its own writer schema (#40), so an older version's int meets a
    newer version's double: a double column holds both; an int column cannot take a double
    (Iceberg cannot widen int to double): that version's records are incompatible_schema."""
    old = StructType([StructField("n", IntegerType()), StructField("b", BinaryType())])
    new = StructType([StructField("n", DoubleType()), StructField("b", StringType())])
    assert avro_types.merged([old, new])["n"].dataType == DoubleType() == avro_types.merged([new, old])["n"].dataType
    assert avro_types.merged([old, new])["b"].dataType == BinaryType()  # string and bytes: the first seen
    assert avro_types.fit(new, old).ok and not avro_types.fit(new, old).widen
    refused = avro_types.fit(StructType([StructField("n", IntegerType())]), new)
    assert refused.conflicts == ["n is int in the table but double in the writer schema, which is not a widening "
                                 "Iceberg allows"]


def test_a_404_is_believed_for_a_while_then_asked_again(scripted: str) -> None:
    """A follower registry can lag a fresh registration: an id it answered 404 for is asked again
    after UNKNOWN_RETRY_S, and its records decode from then on (#40)."""
    from icetide.ingest.formats.avro import UNKNOWN_RETRY_S, AvroFormat

    schema = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    _Registry.plan = [(404, {"error_code": 40403}), (200, {"schema": json.dumps(schema)})]
    now = [1000.0]
    fmt = AvroFormat(SchemaRegistry(url=scripted), clock=lambda: now[0])
    checked: list[int] = []
    fmt.learn([8], lambda w: checked.append(w.id))
    assert 8 in fmt.unknown and 8 not in fmt.decodings
    now[0] += UNKNOWN_RETRY_S - 1
    fmt.learn([8], lambda w: checked.append(w.id))
    assert len(_Registry.seen) == 1  # believed: no request
    now[0] += 2
    fmt.learn([8], lambda w: checked.append(w.id))
    assert 8 in fmt.decodings and 8 not in fmt.unknown and checked == [8]
    assert [p for p, _ in _Registry.seen] == ["/schemas/ids/8"] * 2
