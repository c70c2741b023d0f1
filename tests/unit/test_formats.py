"""The format seam without a JVM: the registry of formats against the config's values, their
dead-letter classes against the ones the dead-letter table documents, and which formats a pipeline
reads and how they combine."""

from __future__ import annotations

import json
from typing import Any, cast, get_args

import pytest
from pydantic import ValidationError

from icetide.config.registry import SchemaRegistry
from icetide.config.source import KafkaSource, ValueFormatName
from icetide.ingest import decode
from icetide.ingest.formats import FORMATS, Formats
from icetide.ingest.formats.avro import AvroFormat
from icetide.ingest.formats.base import ValueFormat
from icetide.ingest.formats.json import JsonFormat
from icetide.ingest.formats.json_schema import JsonSchemaFormat
from icetide.ingest.formats.json_schema_types import UnsupportedSchema
from icetide.ingest.formats.registry import SchemaRefused, UnknownSchemaId
from icetide.ingest.formats.wire import UNKNOWN_RETRY_S

REGISTRY = {"url": "http://127.0.0.1:9"}


def _source(**kw: Any) -> KafkaSource:
    return KafkaSource.model_validate({"bootstrap_servers": "127.0.0.1:9", "topics": ["a", "b"], **kw})


def test_every_config_format_has_one_module_and_every_module_a_config_value() -> None:
    assert sorted(FORMATS) == sorted(get_args(ValueFormatName))
    for name, cls in FORMATS.items():
        assert issubclass(cls, ValueFormat) and cls.name == name


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_formats_dead_letter_classes_are_documented_ones(name: str) -> None:
    classes = FORMATS[name].error_classes
    assert classes, f"{name} names no dead-letter class"
    assert set(classes) <= set(decode.ERROR_CLASSES), set(classes) - set(decode.ERROR_CLASSES)


def test_one_json_source_reads_one_format_typed_by_inference() -> None:
    f = Formats(_source())
    assert list(f.values) == ["json"] and isinstance(f.values["json"], JsonFormat)
    assert not f.mixed and f.infers and not f.envelopes and f.avro is None


def test_avro_values_declare_types_and_decode_envelopes() -> None:
    f = Formats(_source(format="avro", schema_registry=REGISTRY))
    assert list(f.values) == ["avro"] and f.avro is f.values["avro"]
    assert not f.mixed and not f.infers and f.envelopes


def test_formats_by_topic_are_mixed_and_each_built_once() -> None:
    f = Formats(_source(format="json", topic_formats={"b": "avro"}, schema_registry=REGISTRY))
    assert sorted(f.values) == ["avro", "json"] and f.mixed
    assert f.infers  # the JSON topic's tables are inferred
    assert not f.envelopes  # a JSON change is unwrapped from its text, so not every format decodes envelopes
    assert f.avro is f.values["avro"]  # the keys and the registry hook share the values' format and client


def test_avro_keys_under_json_values_get_a_registry_format_of_their_own() -> None:
    f = Formats(_source(key_format="avro", schema_registry=REGISTRY))
    assert list(f.values) == ["json"] and not f.mixed
    assert isinstance(f.avro, AvroFormat) and f.avro_keys
    assert not f.envelopes  # a CDC table's JSON changes are unwrapped from the text, not decoded as Avro


# -- JSON Schema (#42) -------------------------------------------------------------------------------
def test_json_schema_values_declare_types_through_the_registry_and_skip_the_json_one_pass() -> None:
    f = Formats(_source(format="json_schema", schema_registry=REGISTRY))
    fmt = f.values["json_schema"]
    assert isinstance(fmt, JsonSchemaFormat) and list(f.values) == ["json_schema"]
    assert not f.mixed and not f.infers and not f.envelopes and f.avro is None
    assert not f.json_only  # the one pass decodes plain JSON values only: the wire header is not JSON
    assert f.clients() == [fmt.client]  # a batch lists its schema ids first (sink.py reads clients())


def test_json_beside_json_schema_by_topic_and_avro_keys_each_bring_their_client() -> None:
    f = Formats(_source(topic_formats={"b": "json_schema"}, key_format="avro", schema_registry=REGISTRY))
    assert sorted(f.values) == ["json", "json_schema"] and f.mixed and f.infers and not f.json_only
    assert f.avro is not None and f.clients() == [f.values["json_schema"].registry_client(), f.avro.client]
    assert Formats(_source()).json_only and Formats(_source()).clients() == []


def test_json_schema_needs_a_registry() -> None:
    with pytest.raises(ValidationError, match="JSON Schema needs schema_registry"):
        _source(format="json_schema")
    with pytest.raises(ValidationError, match="Avro needs schema_registry"):  # the Avro wording stays
        _source(format="json_schema", key_format="avro")
    assert _source(format="json_schema", schema_registry=REGISTRY).needs_registry()
    assert _source(topic_formats={"b": "json_schema"}, schema_registry=REGISTRY).needs_registry()
    assert not _source().needs_registry()


class _Registry:
    """A registry client answering from ``schemas`` (id → answer, or an exception to raise)."""

    def __init__(self, schemas: dict[int, Any]) -> None:
        self.schemas, self.asked = schemas, []  # type: list[int]

    def schema(self, sid: int) -> dict[str, Any]:
        self.asked.append(sid)
        got = self.schemas[sid]
        if isinstance(got, Exception):
            raise got
        return dict(got)


def _js(props: dict[str, Any]) -> dict[str, Any]:
    return {"schemaType": "JSON", "schema": json.dumps({"type": "object", "properties": props})}


def test_json_schema_learns_ids_refuses_what_it_cannot_read_and_believes_a_404_for_a_while() -> None:
    now = [100.0]
    fmt = JsonSchemaFormat(SchemaRegistry(url="http://127.0.0.1:9"), clock=lambda: now[0])
    v1 = _js({"id": {"type": "integer"}, "name": {"type": "string"}})
    v2 = _js({"id": {"type": "integer"}, "email": {"type": ["string", "null"]}, "name": {"type": "string"}})
    fake = _Registry({
        1: v1, 2: v2, 3: {"schema": '{"type": "record", "name": "R", "fields": []}'},  # Avro: no schemaType
        4: {**v1, "references": [{"name": "a.json", "subject": "a", "version": 1}]},
        5: UnknownSchemaId(5), 6: SchemaRefused("the registry answers HTTP 422 (bad)"),
        7: _js({"x": {"type": "string", "pattern": "(unclosed"}}), 8: _js({"x": {"not": {}}}),
    })
    fmt.client = fake  # type: ignore[assignment]

    def java(s: Any) -> None:  # the JVM's word on a pattern, as java_accepts gives it
        if "(unclosed" in s.patterns:
            raise UnsupportedSchema(f"schema id {s.id}: pattern '(unclosed' is not a Java regular expression")

    fmt.learn([1, 2, 3, 4, 5, 6, 7, 8], java)
    assert sorted(fmt.schemas) == [1, 2] and fmt.batch_ids == [1, 2, 3, 4, 5, 6, 7, 8]
    assert fmt.refused[3] == "schema id 3 is AVRO, not JSON Schema (source.format: json_schema)"
    assert "uses schema references, which icetide does not resolve yet" in fmt.refused[4]
    assert fmt.refused[6] == "schema id 6: the registry answers HTTP 422 (bad)"
    assert "is not a Java regular expression" in fmt.refused[7] and "$.x uses 'not'" in fmt.refused[8]
    assert 5 in fmt.unknown
    # a schema change adding a field: the table holds both versions' fields
    declared = fmt.declared([2, 1])
    assert declared is not None and declared.fieldNames() == ["id", "name", "email"]
    assert fmt.declared([5, 3]) is None
    fake.asked.clear()
    fmt.learn([1, 5], java)
    assert fake.asked == []  # known ids are cached; the 404 is believed for UNKNOWN_RETRY_S
    now[0] += UNKNOWN_RETRY_S + 1
    fake.schemas[5] = v1
    fmt.learn([5], java)
    assert fake.asked == [5] and 5 in fmt.schemas and 5 not in fmt.unknown


def test_a_table_fed_by_two_declaring_formats_holds_both_their_fields() -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    class Declares:
        def __init__(self, t: StructType) -> None:
            self.t = t

        def declared(self, ids: list[int], cdc: Any = None) -> StructType:
            return self.t

    f = Formats(_source(format="json_schema", topic_formats={"b": "avro"}, schema_registry=REGISTRY))
    f.values = {"avro": cast(Any, Declares(StructType([StructField("id", LongType())]))),
                "json_schema": cast(Any, Declares(StructType([StructField("id", LongType()),
                                                              StructField("name", StringType())])))}
    declared = f.declared([1, 2])
    assert declared is not None and declared.fieldNames() == ["id", "name"]


def test_json_schema_rules_group_by_path_and_a_schema_without_checks_adds_no_expression() -> None:
    from icetide.ingest.formats import json_schema_checks as checks
    from icetide.ingest.formats.json_schema_rules import Each, Rule
    from icetide.ingest.formats.json_schema_types import parse

    s = parse(1, json.dumps({"type": "object", "required": ["a"], "properties": {
        "a": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "integer"}}}},
        "m": {"type": ["object", "null"], "additionalProperties": {"type": ["string", "null"]}}}}))
    root = checks.tree(s.rules)
    assert [r.keyword for r in root.rules] == ["required"] and list(root.props) == ["a", "m"]
    assert list(root.props["a"].each[Each.ITEM].props) == ["b"]
    assert [r.arg for r in root.props["m"].each[Each.VALUE].rules] == [("string", "null")]
    # a nullable object or array is the table parse's to type; a scalar's type and a null type are checked
    assert not checks.active(Rule(("m",), "type", ("object", "null")))
    assert not checks.active(Rule(("m",), "type", ("array", "null")))
    assert checks.active(Rule(("m",), "type", ("object",)))  # an explicit null where none is allowed
    assert checks.active(Rule(("m",), "type", ("string", "null")))
    assert checks.active(Rule(("m",), "type", ("null",)))  # no column holds it: any other value would be lost
    assert checks.checked(root.props["m"]) and checks.checked(root.props["a"])
    loose = [Rule(("o",), "type", ("object", "null")), Rule(("o", "p"), "type", ("array", "null"))]
    assert not checks.checked(checks.tree(loose))
    assert checks.violation(cast(Any, None), tuple(loose)) is None  # nothing to check: no expression at all
