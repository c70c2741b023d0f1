"""Protobuf (#42) without a JVM: registry schemas compiled by protoc (a subprocess, about 0.1 s each)
with their references, messages mapped to column types, the wire format's message indexes, and
the format learning a batch's schema ids and messages."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from icetide.config.registry import SchemaRegistry
from icetide.ingest.formats.avro_types import UnsupportedSchema
from icetide.ingest.formats.protobuf import ProtobufFormat
from icetide.ingest.formats.protobuf_schema import compile_files, compile_schema, main_name
from icetide.ingest.formats.protobuf_types import (
    Compiled,
    NoSuchMessage,
    indexes_text,
    message_indexes,
    parse_indexes_text,
)
from icetide.ingest.formats.registry import SchemaRefused, UnknownSchemaId
from icetide.ingest.formats.wire import UNKNOWN_RETRY_S

ORDER = """
syntax = "proto3";
package acme.shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/empty.proto";

message Order {
  // the order's id
  int64 id = 1;
  optional string note = 2;
  google.protobuf.Timestamp placed_at = 3;
  Address address = 4;
  repeated Line lines = 5;
  repeated string tags = 6;
  map<string, int64> counts = 7;
  map<int32, Address> by_zone = 8;
  oneof payment {
    string card = 9;
    int32 cash_cents = 10;
  }
  Status status = 11;
  bytes raw = 12;
  uint32 u32 = 13;
  uint64 u64 = 14;
  fixed32 f32 = 15;
  fixed64 f64 = 16;
  sint32 s32 = 17;
  sfixed64 sf64 = 18;
  float ratio = 19;
  double total = 20;
  bool paid = 21;
  google.protobuf.DoubleValue w_double = 22;
  google.protobuf.FloatValue w_float = 23;
  google.protobuf.Int64Value w_int64 = 24;
  google.protobuf.UInt64Value w_uint64 = 25;
  google.protobuf.Int32Value w_int32 = 26;
  google.protobuf.UInt32Value w_uint32 = 27;
  google.protobuf.BoolValue w_bool = 28;
  google.protobuf.StringValue w_string = 29;
  google.protobuf.BytesValue w_bytes = 30;
  google.protobuf.Empty nothing = 31;
  repeated google.protobuf.Timestamp history = 32;

  message Line { string sku = 1; uint32 qty = 2; }
  enum Status { NEW = 0; PAID = 1; }
}

message Address { string city = 1; optional string zip = 2; }
"""


def compiled(text: str, sid: int = 1, extra: dict[str, str] | None = None) -> Compiled:
    return compile_files(sid, {main_name(sid): text, **(extra or {})}, main_name(sid))


def proto3(body: str) -> str:
    return 'syntax = "proto3";\npackage t;\n' + body


ADDRESS = StructType([StructField("city", StringType()), StructField("zip", StringType())])


def test_every_kind_of_field_maps_to_its_column_type() -> None:
    m = compiled(ORDER).message((0,))
    assert m.full_name == "acme.shop.Order" and m.indexes == (0,)
    want = {
        "id": LongType(), "note": StringType(), "placed_at": TimestampType(), "address": ADDRESS,
        "lines": ArrayType(StructType([StructField("sku", StringType()), StructField("qty", LongType())])),
        "tags": ArrayType(StringType()), "counts": MapType(StringType(), LongType()),
        "by_zone": MapType(IntegerType(), ADDRESS),
        "card": StringType(), "cash_cents": IntegerType(),  # oneof members: a column each
        "status": StringType(), "raw": BinaryType(), "u32": LongType(), "u64": DecimalType(20, 0),
        "f32": LongType(), "f64": DecimalType(20, 0), "s32": IntegerType(), "sf64": LongType(),
        "ratio": FloatType(), "total": DoubleType(), "paid": BooleanType(),
        "w_double": DoubleType(), "w_float": FloatType(), "w_int64": LongType(), "w_uint64": DecimalType(20, 0),
        "w_int32": IntegerType(), "w_uint32": LongType(), "w_bool": BooleanType(), "w_string": StringType(),
        "w_bytes": BinaryType(),
        # nothing (google.protobuf.Empty): no column
        "history": ArrayType(TimestampType()),
    }
    got = {f.name: f.dataType for f in m.struct.fields}
    assert list(got) == list(want)  # the .proto's order
    for name, t in want.items():
        assert got[name].simpleString() == t.simpleString(), name
    assert all(f.nullable for f in m.struct.fields)
    assert m.struct["id"].metadata == {"comment": "the order's id"}  # a leading comment is the column's
    assert m.struct["note"].metadata == {}


def test_nested_messages_are_named_by_their_indexes() -> None:
    c = compiled(ORDER)
    assert c.message((1,)).full_name == "acme.shop.Address" and c.message((1,)).struct == ADDRESS
    # the first declared nested message: the map fields' entry types (before it in protoc's list) are none
    line = c.message((0, 0))
    assert line.full_name == "acme.shop.Order.Line" and line.struct.fieldNames() == ["sku", "qty"]
    for bad in [(2,), (0, 5), (1, 0), (), tuple(range(40))]:
        with pytest.raises(NoSuchMessage, match="schema id 1"):
            c.message(bad)


def test_the_jvm_gets_the_descriptors_without_comments() -> None:
    from google.protobuf import descriptor_pb2

    c = compiled(ORDER)
    shipped = descriptor_pb2.FileDescriptorSet.FromString(c.descriptor_set)
    assert [f.name for f in shipped.file][-1] == main_name(1)  # dependencies first
    assert {"google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"} <= {f.name for f in shipped.file}
    assert not any(f.HasField("source_code_info") for f in shipped.file)
    assert any(f.HasField("source_code_info") for f in c.files.file)


@pytest.mark.parametrize(("body", "why"), [
    ("message Node { int64 id = 1; Node next = 2; }", "message t.Node contains itself (t.Node → t.Node)"),
    ("message A { B b = 1; } message B { repeated A a = 1; }", "message t.A contains itself (t.A → t.B → t.A)"),
    ("message T { map<string, T> children = 1; }", "message t.T contains itself"),
    ('import "google/protobuf/struct.proto";\nmessage J { google.protobuf.Struct doc = 1; }',
     "message google.protobuf.Struct contains itself"),
    ("message R { int64 id = 1; int64 ID = 2; }", "two fields named 'ID' ignoring case"),
    ("message R { int64 _kafka_offset = 1; }", "field '_kafka_offset' starts with a prefix icetide reserves"),
    ("message R { }", "has no field a column can hold"),
])
def test_what_no_table_can_hold_is_refused_with_the_reason(body: str, why: str) -> None:
    with pytest.raises(UnsupportedSchema, match="schema id 1") as e:
        compiled(proto3(body)).message((0,))
    assert why in str(e.value)


def test_nesting_deeper_than_max_depth_is_refused() -> None:
    body = "".join(f"message M{i} {{ M{i + 1} m = 1; }}\n" for i in range(40)) + "message M40 { int64 x = 1; }"
    c = compiled(proto3(body))
    with pytest.raises(UnsupportedSchema, match="deeper than 32"):
        c.message((0,))
    assert c.message((30,)).full_name == "t.M30"  # 11 levels: fine
    with pytest.raises(UnsupportedSchema, match="deeper than 5"):
        compiled(proto3(body)).message((30,), max_depth=5)


def test_proto2_groups_and_defaults_and_editions_compile() -> None:
    p2 = 'syntax = "proto2";\npackage t;\nmessage R { required int64 id = 1; optional int32 n = 2 [default = 5]; }'
    assert compiled(p2).message((0,)).struct.fieldNames() == ["id", "n"]
    ed = 'edition = "2023";\npackage t;\nmessage R { int64 id = 1; string s = 2; }'
    assert compiled(ed).message((0,)).struct.fieldNames() == ["id", "s"]


def test_message_indexes_as_confluent_writes_them() -> None:
    assert message_indexes((0,)) == b"\x00"  # the first message: one byte
    assert message_indexes((1,)) == b"\x02\x02"  # count 1, index 1 (zig-zag)
    assert message_indexes((0, 2)) == b"\x04\x00\x04"
    assert message_indexes((70,)) == b"\x02\x8c\x01"  # a two-byte varint
    assert indexes_text((1, 0)) == "1.0" and parse_indexes_text("1.0") == (1, 0)


# -- references, through a registry ------------------------------------------------------------------
class _Registry:
    """A registry client answering ids and subject versions from dicts (or raising what they hold)."""

    def __init__(self, ids: dict[int, Any], versions: dict[tuple[str, int], Any] | None = None) -> None:
        self.ids, self.versions, self.asked = ids, versions or {}, []  # type: ignore[var-annotated]

    def _answer(self, got: Any) -> dict[str, Any]:
        if isinstance(got, Exception):
            raise got
        return dict(got)

    def schema(self, sid: int) -> dict[str, Any]:
        self.asked.append(sid)
        return self._answer(self.ids[sid])

    def version(self, subject: str, version: int) -> dict[str, Any]:
        self.asked.append((subject, version))
        if (subject, version) not in self.versions:
            raise UnknownSchemaId(subject)
        return self._answer(self.versions[(subject, version)])


def _pb(text: str, refs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"schemaType": "PROTOBUF", "schema": text, "references": refs or []}


MONEY = 'syntax = "proto3";\npackage common;\nimport "common/currency.proto";\n' \
        "message Money { int64 units = 1; common.Currency currency = 2; }"
CURRENCY = 'syntax = "proto3";\npackage common;\nenum Currency { EUR = 0; USD = 1; }'
PAYMENT = proto3('import "common/money.proto";\nimport "google/protobuf/timestamp.proto";\n'
                 "message Payment { common.Money amount = 1; google.protobuf.Timestamp at = 2; }")


def test_references_are_fetched_by_subject_and_version_and_well_known_types_are_local() -> None:
    fake = _Registry(
        {1: _pb(PAYMENT, [{"name": "common/money.proto", "subject": "money", "version": 2},
                          # a registry's own copy of a well-known type is never fetched
                          {"name": "google/protobuf/timestamp.proto", "subject": "ts", "version": 1}])},
        {("money", 2): _pb(MONEY, [{"name": "common/currency.proto", "subject": "currency", "version": 1}]),
         ("currency", 1): _pb(CURRENCY)})
    m = compile_schema(fake, 1).message((0,))  # type: ignore[arg-type]
    assert m.struct.simpleString() == "struct<amount:struct<units:bigint,currency:string>,at:timestamp>"
    assert fake.asked == [1, ("money", 2), ("currency", 1)]


@pytest.mark.parametrize(("answer", "versions", "why"), [
    ({"schemaType": "AVRO", "schema": "{}"}, {}, "schema id 1 is AVRO, not Protobuf (source.format: protobuf)"),
    ({"schema": "{}"}, {}, "schema id 1 is AVRO, not Protobuf"),  # no schemaType: Avro, as Confluent says
    (_pb(PAYMENT, [{"name": "common/money.proto", "subject": "money", "version": 2}]), {},
     "reference 'common/money.proto' (subject 'money' version 2) is not in the registry"),
    (_pb(PAYMENT, [{"name": "../../etc/money.proto", "subject": "money", "version": 2}]), {},
     "reference name '../../etc/money.proto' is not a relative .proto path"),
    (_pb(PAYMENT, [{"name": "/abs/money.proto", "subject": "money", "version": 2}]), {},
     "is not a relative .proto path"),
    (_pb(PAYMENT, [{"name": "common/money.proto", "subject": "money", "version": "latest"}]), {},
     "reference 'common/money.proto' names no subject and version"),
    (_pb(PAYMENT, [{"name": "common/money.proto", "subject": "money", "version": 2}]),
     {("money", 2): {"schemaType": "JSON", "schema": "{}"}}, "reference 'common/money.proto' is not a Protobuf"),
    (_pb(PAYMENT), {}, "protoc refuses it: common/money.proto: File not found"),
    (_pb(proto3("message R { int64 id = 1 }")), {}, "protoc refuses it: icetide_registry/schema_1.proto:3:"),
    (SchemaRefused("the registry answers HTTP 422 (bad)"), {}, "schema id 1: the registry answers HTTP 422 (bad)"),
    # hostile answers: never an exception that fails the batch
    (_pb(proto3("message R { string s = 1; } // \ud800")), {}, "cannot be written for protoc (UnicodeEncodeError)"),
    (_pb(PAYMENT, [{"name": "a" * 300 + ".proto", "subject": "x", "version": 1}]), {("x", 1): _pb(MONEY)},
     "cannot be written for protoc (OSError)"),
    ({"schemaType": "PROTOBUF", "schema": PAYMENT, "references": "common/money.proto"}, {},
     "reference name '' is not a relative .proto path"),
])
def test_a_schema_that_cannot_be_compiled_is_refused_with_the_reason(answer: Any, versions: dict[Any, Any],
                                                                      why: str) -> None:
    with pytest.raises(UnsupportedSchema) as e:
        compile_schema(_Registry({1: answer}, versions), 1)  # type: ignore[arg-type]
    assert why in str(e.value)


# -- the format learning a batch -----------------------------------------------------------------------
V1 = proto3("message Ev { int64 id = 1; string name = 2; message Inner { int32 x = 1; } }\n"
            "message Other { string y = 1; }")
V2 = proto3("message Ev { int64 id = 1; string name = 2; optional string email = 3; }")


def test_the_format_learns_ids_and_messages_refuses_what_it_cannot_read_and_believes_a_404_for_a_while() -> None:
    now = [100.0]
    fmt = ProtobufFormat(SchemaRegistry(url="http://127.0.0.1:9"), clock=lambda: now[0])
    fake = _Registry({1: _pb(V1), 2: _pb(V2), 3: {"schema": "{}"}, 4: UnknownSchemaId(4),
                      5: _pb(proto3("message N { N next = 1; int64 id = 2; }"))})
    fmt.client = fake  # type: ignore[assignment]
    fmt.learn(None, [1, 2, 3, 4, 5], [(1, "0"), (1, "1"), (1, "0.0"), (1, "7"), (2, "0"), (3, "0"), (5, "0")])
    assert sorted(fmt.schemas) == [1, 2, 5] and 3 in fmt.refused and 4 in fmt.unknown
    assert sorted(fmt.messages) == [(1, "0"), (1, "0.0"), (1, "1"), (2, "0")]
    # indexes naming no message of the schema: nothing kept (the verdict judges them per schema id)
    assert (1, "7") not in fmt.batch and (1, "7") not in fmt.unreadable
    assert "contains itself" in fmt.unreadable[(5, "0")]  # a message no table can hold: unsupported_schema
    assert (3, "0") not in fmt.batch  # a refused id's records are the verdict's, by id
    every = fmt.declared([1, 2])  # a table fed by every message of the batch holds all their fields
    assert every is not None and every.fieldNames() == ["id", "name", "y", "x", "email"]
    assert fmt.declared([3, 4]) is None
    fake.asked.clear()
    fmt.learn(None, [1, 2, 4], [(1, "0"), (2, "0")])
    assert fake.asked == []  # known ids are cached; the 404 is believed for UNKNOWN_RETRY_S
    # a schema change adding a field: the table holds both versions' fields
    declared = fmt.declared([2, 1])
    assert declared is not None and declared.fieldNames() == ["id", "name", "email"]
    now[0] += UNKNOWN_RETRY_S + 1
    fake.ids[4] = _pb(V2)
    fmt.learn(None, [4], [(4, "0")])
    assert fake.asked == [4] and (4, "0") in fmt.messages and 4 not in fmt.unknown
    assert fmt.batch == [(4, "0")]


def test_protobuf_needs_a_registry_and_reads_no_changes_yet(tmp_path: Any) -> None:
    from pydantic import ValidationError

    from icetide.config.source import KafkaSource
    from icetide.ingest.formats import Formats

    src = {"bootstrap_servers": "127.0.0.1:9", "topics": ["a"]}
    with pytest.raises(ValidationError, match="Protobuf needs schema_registry"):
        KafkaSource.model_validate({**src, "format": "protobuf"})
    source = KafkaSource.model_validate({**src, "format": "protobuf", "schema_registry": {"url": "http://x:1"}})
    f = Formats(source)
    assert isinstance(f.values["protobuf"], ProtobufFormat) and not f.infers and not f.envelopes
    assert f.clients() == [f.values["protobuf"].registry_client()]
    from icetide.config.models import PipelineConfig

    cfg = {"name": "p", "source": source.model_dump(), "catalog": {"type": "jdbc", "uri": "jdbc:sqlite:x.db",
                                                                    "warehouse": str(tmp_path)},
           "target": {"table": "a.b", "cdc": {"primary_key": ["id"], "ordering": "v"}},
           "stream": {"checkpoint_location": str(tmp_path / "c")}}
    with pytest.raises(ValidationError, match="changes in Protobuf values are not read yet"):
        PipelineConfig.model_validate(cfg)


def test_check_warns_of_each_subject_whose_latest_protobuf_schema_no_table_can_hold() -> None:
    from icetide.ingest.formats.protobuf_schema import check_subjects

    fake = _Registry({1: _pb(V1), 2: _pb(proto3("message N { N next = 1; }")), 3: {"schema": "{}"},
                      4: _pb(proto3("message R { int64 id = 1 }"))})
    subjects = [{"subject": f"s{i}-value", "id": i, "version": 1} for i in (1, 2, 3, 4)]
    warnings = check_subjects(fake, subjects)  # type: ignore[arg-type]
    assert [w.split(":")[0] for w in warnings] == ["subject s2-value", "subject s4-value"]
    assert "message t.N contains itself" in warnings[0] and "protoc refuses it" in warnings[1]


def test_the_demo_frames_two_versions_and_each_bad_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    import icetide.demo.protobuf_events as demo

    registered: list[str] = []
    monkeypatch.setattr(demo, "register", lambda url, subject, text: registered.append(text) or 10 + len(registered))
    values = list(demo.protobuf_values(40, "http://registry", "t", bad_every=8))
    assert registered == [demo.V1, demo.V2]
    good = [v for v, err in values if err is None]
    assert [err for _, err in values if err] == ["bad_magic_byte", "truncated_record", "unknown_schema_id",
                                                 "undecodable", "null_value"]
    assert {v[:6] for v in good} == {b"\x00\x00\x00\x00\x0b\x00", b"\x00\x00\x00\x00\x0c\x00"}  # ids 11, 12; [0]
    event = demo.message_classes({main_name(12): demo.V2}, main_name(12))["icetide.demo.Event"]
    last = event.FromString(good[-1][6:])
    assert last.id == "evt-000000038" and last.device in ("ios", "android", "web") and last.event_time.seconds > 0
