"""Schema references and top-level unions of records (#40 item 8), resolved without a JVM: the
registry answers come from a dict, the schemas are written out and typed in pure Python."""

from __future__ import annotations

import json
from typing import Any

import pytest

from icetide.config.registry import SchemaRegistry
from icetide.ingest.formats import avro_refs, avro_types
from icetide.ingest.formats.avro import AvroFormat, member_id

pytestmark = pytest.mark.unit

GEO = {"type": "record", "name": "Geo", "fields": [{"name": "lat", "type": "double"}]}
ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme.common", "fields": [
    {"name": "city", "type": "string"}, {"name": "geo", "type": ["null", GEO], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["HOME", "WORK"]}}]}
ORDER = {"type": "record", "name": "Order", "namespace": "com.acme", "fields": [
    {"name": "id", "type": "long"}, {"name": "ship_to", "type": "com.acme.common.Address"},
    {"name": "bill_to", "type": ["null", "com.acme.common.Address"], "default": None},
    {"name": "where", "type": ["null", "com.acme.common.Geo"], "default": None}]}
REFUND = {"type": "record", "name": "Refund", "namespace": "com.acme", "fields": [
    {"name": "id", "type": "long"}, {"name": "reason", "type": "string"}]}


class Registry:
    """The registry's answers by path (a missing path answers 404, as the client raises it)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers, self.asked = answers, []  # type: list[str]

    def get(self, path: str, scoped: bool = False) -> Any:
        self.asked.append(path)
        if path not in self.answers:
            raise KeyError(path)
        return self.answers[path]

    def schema(self, sid: int) -> Any:
        return self.get(f"/schemas/ids/{sid}")


def ref(name: str, subject: str, version: int = 1) -> dict[str, Any]:
    return {"name": name, "subject": subject, "version": version}


def subject_answer(schema: Any, refs: list[Any] | None = None) -> dict[str, Any]:
    return {"schema": json.dumps(schema), "references": refs or [], "version": 1, "id": 99}


def test_a_referenced_type_is_written_out_at_its_first_use_and_typed_as_if_inlined() -> None:
    registry = Registry({"/subjects/address/versions/1?deleted=true": subject_answer(ADDRESS)})
    schemas, union = avro_refs.resolved(registry, 7, json.dumps(ORDER),  # type: ignore[arg-type]
                                        [ref("com.acme.common.Address", "address")])
    assert not union and len(schemas) == 1
    text = json.dumps(schemas[0])
    assert text.count('"name": "Address"') == 1 and text.count('"name": "Geo"') == 1  # once each, then by name
    got = avro_types.parse(7, text).struct
    inline = {**ORDER, "fields": [ORDER["fields"][0], {"name": "ship_to", "type": ADDRESS},
                                  {"name": "bill_to", "type": ["null", "com.acme.common.Address"]},
                                  {"name": "where", "type": ["null", "com.acme.common.Geo"]}]}
    assert got == avro_types.parse(7, json.dumps(inline)).struct
    assert got["where"].dataType == got["ship_to"].dataType["geo"].dataType  # a type nested in the reference
    # on main: refused ("uses schema references, which icetide does not resolve yet")


def test_references_of_references_are_followed_once_and_a_missing_one_is_refused_with_the_reason() -> None:
    geo = {**GEO, "namespace": "com.acme.common"}
    address = {**ADDRESS, "fields": [ADDRESS["fields"][0], {"name": "geo", "type": "com.acme.common.Geo"}]}
    registry = Registry({"/subjects/address/versions/3?deleted=true":
                         subject_answer(address, [ref("com.acme.common.Geo", "geo")]),
                         "/subjects/geo/versions/1?deleted=true": subject_answer(geo)})
    order = {**ORDER, "fields": ORDER["fields"][:3]}
    schemas, _ = avro_refs.resolved(registry, 8, json.dumps(order),  # type: ignore[arg-type]
                                    [ref("com.acme.common.Address", "address", 3),
                                     ref("com.acme.common.Address", "address", 3)])
    ship_to = avro_types.parse(8, json.dumps(schemas[0])).struct["ship_to"].dataType
    assert ship_to["geo"].dataType.fieldNames() == ["lat"]
    assert registry.asked == ["/subjects/address/versions/3?deleted=true", "/subjects/geo/versions/1?deleted=true"]
    with pytest.raises(avro_types.UnsupportedSchema, match="references subject 'gone' version 2, which the regis"):
        avro_refs.resolved(Registry({}), 9, json.dumps(order), [ref("x.Y", "gone", 2)])  # type: ignore[arg-type]
    with pytest.raises(avro_types.UnsupportedSchema, match="without a subject"):
        avro_refs.resolved(Registry({}), 9, json.dumps(order), [{"name": "x"}])  # type: ignore[arg-type]


def test_a_reference_cycle_is_refused_not_followed_forever() -> None:
    a = {"type": "record", "name": "A", "namespace": "n", "fields": [{"name": "b", "type": ["null", "n.B"]}]}
    b = {"type": "record", "name": "B", "namespace": "n", "fields": [{"name": "a", "type": ["null", "n.A"]}]}
    registry = Registry({"/subjects/a/versions/1?deleted=true": subject_answer(a, [ref("n.B", "b")]),
                         "/subjects/b/versions/1?deleted=true": subject_answer(b, [ref("n.A", "a")])})
    schemas, _ = avro_refs.resolved(registry, 3, json.dumps(  # type: ignore[arg-type]
        {"type": "record", "name": "Top", "fields": [{"name": "a", "type": "n.A"}]}), [ref("n.A", "a")])
    with pytest.raises(avro_types.UnsupportedSchema, match="contains itself"):
        avro_types.parse(3, json.dumps(schemas[0]))
    assert len(registry.asked) == 2


def test_a_top_level_union_of_records_is_one_record_schema_per_member() -> None:
    address = [ref("com.acme.common.Address", "address")]
    registry = Registry({"/subjects/address/versions/1?deleted=true": subject_answer(ADDRESS),
                         "/subjects/order/versions/1?deleted=true": subject_answer(ORDER, address),
                         "/subjects/refund/versions/1?deleted=true": subject_answer(REFUND)})
    union = ["com.acme.Order", "com.acme.Refund"]
    schemas, is_union = avro_refs.resolved(registry, 5, json.dumps(union),  # type: ignore[arg-type]
                                           [ref("com.acme.Order", "order"), ref("com.acme.Refund", "refund")])
    assert is_union
    writers = [avro_types.parse(5, json.dumps(s)) for s in schemas]
    assert [w.full_name for w in writers] == ["com.acme.Order", "com.acme.Refund"]
    assert writers[0].struct["ship_to"].dataType.fieldNames() == ["city", "geo", "kind"]
    assert writers[1].struct.fieldNames() == ["id", "reason"]
    # inline members: a type the second borrows from the first is written out in the second too
    inline = [ORDER | {"fields": [ORDER["fields"][0], {"name": "ship_to", "type": ADDRESS}]},
              {**REFUND, "fields": [*REFUND["fields"], {"name": "to", "type": "com.acme.common.Address"}]}]
    members, _ = avro_refs.resolved(Registry({}), 6, json.dumps(inline), [])  # type: ignore[arg-type]
    assert avro_types.parse(6, json.dumps(members[1])).struct["to"].dataType.fieldNames() == ["city", "geo", "kind"]
    for bad, why in ((["null", REFUND], "member 0"), ([REFUND] * 65, "1 to 64")):
        with pytest.raises(avro_types.UnsupportedSchema, match=why):
            avro_refs.resolved(Registry({}), 6, json.dumps(bad), [])  # type: ignore[arg-type]


def test_the_format_learns_a_union_as_one_id_per_member_and_names_them_in_messages() -> None:
    fmt = AvroFormat(SchemaRegistry(url="http://127.0.0.1:9"))
    registry = Registry({"/schemas/ids/11": {"schema": json.dumps([ORDER | {"fields": ORDER["fields"][:1]}, REFUND])},
                         "/schemas/ids/12": {"schema": json.dumps(REFUND)}})
    fmt.client = registry  # type: ignore[assignment]
    checked: list[str] = []
    fmt.learn([11, 12], lambda w: checked.append(w.full_name))
    assert checked == ["com.acme.Order", "com.acme.Refund", "com.acme.Refund"]
    assert fmt.unions == {11: 2} and 11 not in fmt.decodings
    assert fmt.batch_ids == [11, 12, member_id(11, 0), member_id(11, 1)]
    assert fmt.decodings[member_id(11, 1)].writer.full_name == "com.acme.Refund"
    assert fmt.decodings[member_id(11, 1)].member == 1 and fmt.decodings[12].member is None
    assert fmt.label(member_id(11, 1)) == "schema id 11 (union member 1: com.acme.Refund)"
    assert len({member_id(s, k) for s in (0, 1, 2**32 - 1) for k in range(64)} | {0, 1, 2**32 - 1}) == 3 * 64 + 3
    fmt.learn([11], lambda w: checked.append(w.full_name))  # known: not fetched again
    assert registry.asked == ["/schemas/ids/11", "/schemas/ids/12"]
