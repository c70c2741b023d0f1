"""JSON Schema → column types and validation rules (no JVM): every mapping, the nullable forms,
``$ref``, Confluent's optional-field pattern, each refusal's reason, and hostile schemas."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DoubleType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from icetide.ingest.formats import json_schema_types as jst
from icetide.ingest.formats.json_schema_rules import Each, Rule, json_path, message, where
from icetide.ingest.formats.json_schema_types import MAX_DEPTH, MAX_ENUM, UnsupportedSchema

pytestmark = pytest.mark.unit


def obj(required: list[str] | None = None, **props: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required is not None:
        out["required"] = required
    return out


def parse(schema: Any, sid: int = 7) -> jst.JsonSchema:
    return jst.parse(sid, json.dumps(schema))


def column(schema: Any) -> Any:
    return parse(obj(x=schema)).struct["x"].dataType


def rules_at(parsed: jst.JsonSchema, path: tuple[Any, ...]) -> dict[str, Any]:
    return {r.keyword: r.arg for r in parsed.rules if r.path == path and r.keyword != "required"}


@pytest.mark.parametrize(("schema", "spark"), [
    ({"type": "string"}, StringType()),
    ({"type": "string", "format": "date-time"}, TimestampType()),
    ({"type": "string", "format": "date"}, DateType()),
    ({"type": "string", "format": "email"}, StringType()),  # other formats are annotations
    ({"type": "string", "format": "time"}, StringType()),
    ({"type": "integer"}, LongType()),
    ({"type": "number"}, DoubleType()),
    ({"type": "boolean"}, BooleanType()),
    ({"type": "null"}, NullType()),
    ({"type": ["integer", "number"]}, DoubleType()),
    ({"type": ["string", "null"]}, StringType()),
    ({"type": ["null", "string"], "format": "date-time"}, TimestampType()),
    ({"type": "array", "items": {"type": "integer"}}, ArrayType(LongType(), True)),
    ({"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}},
     ArrayType(ArrayType(BooleanType(), True), True)),
    ({"type": "object", "additionalProperties": {"type": "number"}}, MapType(StringType(), DoubleType(), True)),
    ({"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
     MapType(StringType(), ArrayType(StringType(), True), True)),
    (obj(a={"type": "string"}, b=obj(c={"type": "integer"})),
     StructType([StructField("a", StringType()), StructField("b", StructType([StructField("c", LongType())]))])),
    ({"type": "array", "items": obj(sku={"type": "string"})},
     ArrayType(StructType([StructField("sku", StringType())]))),
    ({"enum": ["a", "b"]}, StringType()),  # no type: the values' type
    ({"enum": [1, 2, None]}, LongType()),
    ({"enum": [1, 2.5]}, DoubleType()),
    ({"const": True}, BooleanType()),
    ({"properties": {"a": {"type": "string"}}}, StructType([StructField("a", StringType())])),  # object by keywords
    ({"items": {"type": "string"}}, ArrayType(StringType(), True)),
    ({"allOf": [{"type": "integer"}]}, LongType()),
    ({"type": "object", "additionalProperties": False}, NullType()),  # always empty: nothing to keep
])
def test_each_json_schema_type_maps_to_its_column_type(schema: Any, spark: Any) -> None:
    assert column(schema) == spark


def test_every_column_is_optional_and_a_description_is_its_comment() -> None:
    got = parse(obj(["id"], id={"type": "integer", "description": "the key"}, n={"type": "number"})).struct
    assert [f.nullable for f in got.fields] == [True, True]  # other versions may lack a field
    assert got["id"].metadata == {"comment": "the key"} and got["n"].metadata == {}


@pytest.mark.parametrize("optional", [
    {"type": ["string", "null"]},
    {"type": ["null", "string"]},
    {"oneOf": [{"type": "null", "title": "Not included"}, {"type": "string"}]},  # Confluent's serializer
    {"oneOf": [{"type": "string"}, {"type": "null"}]},
    {"anyOf": [{"type": "string"}, {"type": "null"}]},  # pydantic's Optional[str]
    {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/S"}]},
])
def test_the_nullable_forms_give_an_optional_column_whose_null_passes(optional: Any) -> None:
    got = parse({**obj(x=optional), "definitions": {"S": {"type": "string"}}})
    assert got.struct["x"].dataType == StringType()
    assert rules_at(got, ("x",))["type"] == ("string", "null")


def test_a_field_that_is_not_nullable_has_a_type_rule_without_null() -> None:
    got = parse(obj(x={"type": "string"}, y={"enum": ["a", None]}, z=obj(w={"type": "integer"})))
    assert rules_at(got, ("x",))["type"] == ("string",)
    assert rules_at(got, ("y",))["type"] == ("string", "null")  # the enum allows null
    assert rules_at(got, ("z",))["type"] == ("object",) and rules_at(got, ("z", "w"))["type"] == ("integer",)
    assert all(r.path for r in got.rules if r.keyword == "type")  # the record itself is an object: no rule


def test_the_confluent_generated_schema_maps_and_yields_its_rules() -> None:
    """What Confluent's Jackson-based generator writes for a Java class (draft 4, optional fields as
    oneOf with "Not included", no unknown properties)."""
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#", "title": "Order", "type": "object",
        "additionalProperties": False,
        "properties": {
            "id": {"type": "integer"},
            "customer": {"oneOf": [{"type": "null", "title": "Not included"}, {"type": "string"}]},
            "placedAt": {"oneOf": [{"type": "null", "title": "Not included"},
                                   {"type": "string", "format": "date-time"}]},
            "lines": {"oneOf": [{"type": "null", "title": "Not included"},
                                {"type": "array", "items": {"$ref": "#/definitions/Line"}}]},
        },
        "required": ["id"],
        "definitions": {"Line": {"type": "object", "additionalProperties": False,
                                 "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                                 "required": ["sku", "qty"]}},
    }
    got = parse(schema)
    assert got.struct.simpleString() == ("struct<id:bigint,customer:string,placedAt:timestamp,"
                                         "lines:array<struct<sku:string,qty:bigint>>>")
    assert Rule((), "required", "id") in got.rules
    assert Rule((), "additionalProperties", ("id", "customer", "placedAt", "lines")) in got.rules
    assert Rule(("lines", Each.ITEM), "required", "qty") in got.rules
    assert Rule(("lines", Each.ITEM), "additionalProperties", ("sku", "qty")) in got.rules
    assert rules_at(got, ("lines",))["type"] == ("array", "null")


@pytest.mark.parametrize("ref", ["#/definitions/Addr", "#/$defs/Addr"])
def test_refs_into_the_schema_are_inlined(ref: str) -> None:
    addr = obj(["zip"], zip={"type": "string", "pattern": "^[0-9]{5}$"})
    got = parse({**obj(home={"$ref": ref}, work={"$ref": ref}), "definitions": {"Addr": addr}, "$defs": {"Addr": addr}})
    want = StructType([StructField("zip", StringType())])
    assert got.struct["home"].dataType == want == got.struct["work"].dataType  # one definition, used twice
    assert Rule(("work", "zip"), "pattern", "^[0-9]{5}$") in got.rules
    assert Rule(("home",), "required", "zip") in got.rules


def test_a_top_level_ref_chains_of_refs_and_escaped_pointers_resolve() -> None:
    schema = {"$ref": "#/definitions/Event", "definitions": {
        "Event": obj(at={"$ref": "#/definitions/When"}, odd={"$ref": "#/definitions/a~1b%20c"}),
        "When": {"$ref": "#/definitions/Stamp"}, "Stamp": {"type": "string", "format": "date-time"},
        "a/b c": {"type": "boolean"}}}
    got = parse(schema).struct
    assert got["at"].dataType == TimestampType() and got["odd"].dataType == BooleanType()


@pytest.mark.parametrize(("schema", "why"), [
    (obj(x={"not": {"type": "string"}}), "$.x uses 'not'"),
    (obj(x={"type": "string", "if": {"minLength": 1}, "then": {}}), "$.x uses 'if'/'then'/'else'"),
    (obj(x={"type": "object", "patternProperties": {"^a": {"type": "string"}}}), "'patternProperties'"),
    (obj(x={"type": "array", "prefixItems": [{"type": "string"}]}), "'prefixItems' (a tuple)"),
    (obj(x={"oneOf": [{"type": "string"}, {"type": "integer"}]}),
     '$.x has oneOf of 2 schemas: a column has one type; icetide reads oneOf only as [{"type": "null"}, <schema>]'),
    (obj(x={"anyOf": [{"type": "null"}, {"type": "string"}, {"type": "integer"}]}), "has anyOf of 2 schemas"),
    (obj(x={"allOf": [{"type": "string"}, {"maxLength": 3}]}), "has allOf of 2 schemas: icetide does not merge"),
    (obj(x={"oneOf": [{"type": "null"}, {"type": "string"}], "maxLength": 3}), "has oneOf beside maxLength"),
    (obj(x={"type": ["string", "integer"]}), "$.x has several types (string, integer): a column has one"),
    (obj(x={"enum": ["a", 1]}), "has several types (string, integer)"),
    (obj(x={"type": "int"}), '$.x has type "int", not one or more of string, integer'),
    (obj(x={"description": "anything"}), "$.x has no type: a column needs one"),
    (obj(x={}), "$.x accepts any value (no type)"),
    (obj(x=True), "$.x accepts any value (no type)"),
    (obj(x=False), "$.x accepts no value"),
    (obj(x={"type": "object"}), "$.x is an object without properties, so any keys with any values"),
    (obj(x={"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}),
     "has properties and additionalProperties with a schema"),
    (obj(x={"type": "array", "items": [{"type": "string"}]}), "has items as a list (a tuple)"),
    (obj(x={"type": "array"}), "$.x is an array without an items schema"),
    (obj(x={"$ref": "other.json#/definitions/A"}), "has $ref 'other.json#/definitions/A' to another document"),
    (obj(x={"$ref": "https://example.com/a.json"}), "to another document"),
    (obj(x={"$ref": "#addr"}), "an anchor: use a JSON pointer"),
    (obj(x={"$ref": "#/definitions/Missing"}), "which points to nothing in the schema"),
    (obj(x={"$ref": 3}), "has a $ref that is not a string"),
    (obj(Name={"type": "string"}, name={"type": "string"}), "has properties 'Name' and 'name', equal ignoring case"),
    (obj(_kafka_offset={"type": "integer"}), "has property '_kafka_offset', which starts with a prefix icetide"),
    (obj(x={"type": "string", "minLength": -1}), "has minLength -1, not a non-negative integer"),
    (obj(x={"type": "array", "items": {"type": "string"}, "maxItems": 1.5}), "has maxItems 1.5"),
    (obj(x={"type": "string", "pattern": 5}), "has a pattern that is not a string"),
    (obj(x={"type": "number", "minimum": "0"}), 'has minimum "0", not a finite number'),
    (obj(x={"type": "number", "multipleOf": 0}), "has multipleOf 0, not a finite number above 0"),
    (obj(x={"enum": [{"a": 1}]}), 'has enum holding {"a": 1}: icetide compares strings, numbers'),
    (obj(x={"enum": []}), "has an enum that is not a non-empty list"),
    ({"type": "object", "properties": {"x": {"type": "string"}}, "required": True}, "has required that is not a list"),
    ({"type": "string"}, "the top level is string, not an object with properties"),
    ({"type": "array", "items": {"type": "string"}}, "the top level is array<string>, not an object"),
    ({"type": "object", "additionalProperties": {"type": "string"}}, "the top level is map<string,string>"),
    ({"type": "object", "properties": {}}, "$ is an object without properties"),
])
def test_schemas_no_column_holds_faithfully_are_refused_with_what_to_change(schema: Any, why: str) -> None:
    with pytest.raises(UnsupportedSchema) as e:
        parse(schema, sid=42)
    assert str(e.value).startswith("schema id 42"), str(e.value)
    assert why in str(e.value), str(e.value)


@pytest.mark.parametrize("text", ["[]", '"a string"', "42", "null", "true"])
def test_json_that_is_not_an_object_is_refused(text: str) -> None:
    with pytest.raises(UnsupportedSchema, match="schema id 3 is not a JSON Schema object"):
        jst.parse(3, text)


@pytest.mark.parametrize("text", ["{", "", "{'single': 'quotes'}", "[" * 100_000 + "]" * 100_000])
def test_text_that_is_not_json_is_refused_never_raised_otherwise(text: str) -> None:
    with pytest.raises(UnsupportedSchema, match="schema id 3 is not valid JSON"):
        jst.parse(3, text)


@pytest.mark.parametrize(("schema", "ref"), [
    ({**obj(child={"$ref": "#"}), "$id": "node"}, "'#'"),  # the root itself
    ({**obj(n={"$ref": "#/definitions/Node"}), "definitions": {"Node": obj(next={"$ref": "#/definitions/Node"})}},
     "'#/definitions/Node'"),
    ({**obj(a={"$ref": "#/$defs/A"}), "$defs": {"A": obj(b={"$ref": "#/$defs/B"}),  # through another definition
                                               "B": {"type": "array", "items": {"$ref": "#/$defs/A"}}}}, "'#/$defs/A'"),
    ({**obj(a={"$ref": "#/$defs/A"}), "$defs": {"A": {"$ref": "#/$defs/A"}}}, "'#/$defs/A'"),  # a ref to itself
    ({**obj(a={"oneOf": [{"type": "null"}, {"$ref": "#/$defs/A"}]}), "$defs": {"A": {"$ref": "#/$defs/A"}}},
     "'#/$defs/A'"),  # found while looking for the null member
])
def test_a_recursive_schema_is_refused_with_the_reason(schema: Any, ref: str) -> None:
    with pytest.raises(UnsupportedSchema, match=re.escape(f"refers to itself through $ref {ref} (a recursive schema): "
                                                          "a table cannot hold unbounded nesting")):
        parse(schema)


def test_a_schema_nested_too_deep_is_refused_and_one_within_the_limit_maps() -> None:
    def nested(n: int) -> dict[str, Any]:
        s: dict[str, Any] = {"type": "string"}
        for _ in range(n):
            s = obj(a=s)
        return s

    assert parse(nested(MAX_DEPTH - 1)).struct.simpleString().count("struct<") == MAX_DEPTH - 1
    with pytest.raises(UnsupportedSchema, match=f"is nested deeper than {MAX_DEPTH} levels"):
        parse(nested(MAX_DEPTH + 1))


def test_refs_that_expand_exponentially_are_refused_not_expanded() -> None:
    """A billion-laughs schema: each definition uses the next one twice (2**30 subschemas inlined)."""
    defs = {f"L{i}": obj(a={"$ref": f"#/$defs/L{i + 1}"}, b={"$ref": f"#/$defs/L{i + 1}"}) for i in range(30)}
    defs["L30"] = {"type": "string"}
    with pytest.raises(UnsupportedSchema, match="passes 10000 subschemas"):
        parse({**obj(x={"$ref": "#/$defs/L0"}), "$defs": defs})


def test_enums_up_to_the_limit_are_checked_larger_ones_refused() -> None:
    values = [f"v{i}" for i in range(MAX_ENUM)]
    assert rules_at(parse(obj(x={"enum": values})), ("x",))["enum"] == tuple(values)
    with pytest.raises(UnsupportedSchema, match=f"has an enum of {MAX_ENUM + 1} values: icetide checks enums of up to"):
        parse(obj(x={"enum": [*values, "one more"]}))
    with pytest.raises(UnsupportedSchema, match="has enum holding NaN"):
        jst.parse(1, '{"type": "object", "properties": {"x": {"enum": [NaN]}}}')


def test_names_no_table_can_hold_are_kept_for_evolution_to_refuse_and_prefixes_only_count_at_the_top() -> None:
    got = parse(obj(**{"": {"type": "string"}, "a\u0001b": {"type": "string"}, "user-agent": {"type": "string"},
                       "meta": obj(_kafka_inner={"type": "string"})}))
    # evolution dead-letters the records carrying "" and the control character (invalid_field), as for JSON
    assert got.struct.fieldNames() == ["", "a\u0001b", "user-agent", "meta"]
    assert got.struct["meta"].dataType.fieldNames() == ["_kafka_inner"]


def test_each_keyword_becomes_a_rule_at_its_path() -> None:
    got = parse(obj(
        ["s"],
        s={"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$", "enum": ["ab", "cd"]},
        n={"type": "number", "minimum": 0, "maximum": 10, "exclusiveMaximum": 11, "multipleOf": 0.5, "const": 2},
        old={"type": "integer", "minimum": 1, "exclusiveMinimum": True, "maximum": 9, "exclusiveMaximum": False},
        tags={"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 4,
              "uniqueItems": True},
        m={"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}, "minProperties": 1,
           "maxProperties": 9, "required": ["k"]},
    ))
    assert rules_at(got, ("s",)) == {"type": ("string",), "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$",
                                     "enum": ("ab", "cd")}
    assert rules_at(got, ("n",)) == {"type": ("number",), "minimum": 0, "maximum": 10, "exclusiveMaximum": 11,
                                     "multipleOf": 0.5, "const": 2}
    # draft 4: a boolean exclusiveMinimum makes minimum exclusive; false leaves maximum inclusive
    assert rules_at(got, ("old",)) == {"type": ("integer",), "exclusiveMinimum": 1, "maximum": 9}
    assert rules_at(got, ("tags",)) == {"type": ("array",), "minItems": 1, "maxItems": 4, "uniqueItems": True}
    assert rules_at(got, ("tags", Each.ITEM)) == {"type": ("string",), "maxLength": 3}
    assert rules_at(got, ("m",)) == {"type": ("object",), "minProperties": 1, "maxProperties": 9}
    assert rules_at(got, ("m", Each.VALUE)) == {"type": ("integer",), "minimum": 0}
    assert Rule(("m",), "required", "k") in got.rules and Rule((), "required", "s") in got.rules
    assert got.patterns == ["^[a-z]+$"]
    # keywords of another type than the field's are not its rules (JSON Schema applies them by type)
    assert "minLength" not in rules_at(parse(obj(x={"type": "integer", "minLength": 2})), ("x",))


def test_a_dead_letter_names_the_failing_path_and_what_is_wrong() -> None:
    got = parse(obj(address=obj(["zip"], zip={"type": "string", "pattern": "^[0-9]{5}$"})))
    shown = {f"{json_path(where(r))}: {message(r)}" for r in got.rules if r.keyword != "type"}
    assert shown == {"$.address.zip: does not match pattern ^[0-9]{5}$", "$.address.zip: is required but missing"}
    odd = Rule(("user-agent", "it's", Each.ITEM, "a.b", "ok_1"), "maxLength", 3)
    assert json_path(odd.path) == "$['user-agent']['it\\'s'][*]['a.b'].ok_1"
    assert json_path(("m", Each.VALUE)) == "$.m.*"
    assert message(Rule(("x",), "type", ("integer", "null"))) == "is not of type integer"
    assert message(Rule(("x",), "type", ("integer",)), null=True) == "is null, which type integer does not allow"
    assert message(Rule(("x",), "type", ("null",))) == "is not of type null"
    assert message(Rule(("x",), "enum", tuple(range(7)))) == "is not one of [0, 1, 2, 3, 4, … 7 values]"
    assert message(Rule(("x",), "exclusiveMinimum", 0)) == "is not greater than 0 (exclusiveMinimum)"
    assert message(Rule(("x",), "const", "a")) == 'is not "a"'


def test_versions_of_a_subject_merge_into_one_table_type() -> None:
    """A schema change adding a field: the table holds both versions' fields (first order wins)."""
    from icetide.ingest.formats.avro_types import merged

    v1 = parse(obj(id={"type": "integer"}, name={"type": "string"}), 1).struct
    v2 = parse(obj(id={"type": "integer"}, email={"type": ["string", "null"]}, name={"type": "string"}), 2).struct
    assert merged([v1, v2]).fieldNames() == ["id", "name", "email"] == merged([v1, v2]).fieldNames()


def test_the_demo_frames_two_versions_and_each_bad_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    import icetide.demo.json_schema_events as demo

    registered: list[dict[str, Any]] = []
    monkeypatch.setattr(demo, "register", lambda url, subject, s: registered.append(s) or 10 + len(registered))
    values = list(demo.json_schema_values(48, "http://registry", "t", bad_every=8))
    assert registered == [demo.V1, demo.V2]
    bad = {err: v for v, err in values if err}
    assert [err for _, err in values if err] == ["bad_magic_byte", "truncated_record", "unknown_schema_id",
                                                 "malformed_json", "schema_violation", "null_value"]
    good = [v for v, err in values if err is None and v is not None]
    assert len(good) == 42 and {v[:5] for v in good} == {b"\x00\x00\x00\x00\x0b", b"\x00\x00\x00\x00\x0c"}
    events = [json.loads(v[5:]) for v in good]
    assert [e["id"] for e in events[:2]] == ["evt-000000000", "evt-000000001"]
    for v, e in zip(good, events, strict=True):  # v2 (id 12, with device) from halfway
        assert (v[4] == 12) == ("device" in e) == (int(e["id"][4:]) >= 24)
    v1, v2 = (parse(s, sid) for sid, s in ((11, demo.V1), (12, demo.V2)))
    assert [f.name for f in v2.struct.fields] == [*(f.name for f in v1.struct.fields), "device"]
    assert isinstance(v1.struct["event_time"].dataType, TimestampType)
    assert all(e["amount"] >= 0 and e["event_type"] in demo.V1["properties"]["event_type"]["enum"] for e in events)

    assert bad["bad_magic_byte"] is not None and bad["bad_magic_byte"][0] == 1
    assert bad["unknown_schema_id"] is not None and bad["unknown_schema_id"][1:5] == (2**31 - 7).to_bytes(4, "big")
    for cls in ("malformed_json", "schema_violation"):
        assert bad[cls] is not None and bad[cls][:5] == b"\x00\x00\x00\x00\x0b"  # a known id: the text is at fault
    with pytest.raises(ValueError):
        json.loads(bad["malformed_json"][5:])  # type: ignore[index]
    broken = json.loads(bad["schema_violation"][5:])  # type: ignore[index]
    assert broken["amount"] < 0 and Rule(("amount",), "minimum", 0) in v1.rules  # breaks exactly its minimum
    assert bad["null_value"] is None
