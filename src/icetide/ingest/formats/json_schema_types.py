"""JSON Schemas (a registry's ``schemaType: JSON``) → Spark/Iceberg types and validation rules. Pure: no JVM.

======================================  ========================================================
JSON Schema                             column
======================================  ========================================================
object with ``properties``              struct (nested); ``description`` → the column comment
object with only ``additionalProperties:
<schema>``                              map<string, T>
array with ``items: <schema>``          list<T>
string / + ``format: date-time`` /      string / timestamp (with zone) / date (other formats:
+ ``format: date``                      string)
integer / number / boolean              long / double / boolean
``["T", "null"]``, ``oneOf``/``anyOf``
``[{"type": "null"}, T]``               optional T (Confluent's serializer writes optional fields so)
``["integer", "number"]``               double
null                                    (no column)
no ``type``                             the type of its ``enum``/``const`` values, else of its
                                        keywords (``properties`` → object, ``items`` → array)
======================================  ========================================================

``$ref`` to ``#/definitions/X``, ``#/$defs/X`` (any JSON pointer into the schema) is inlined; a
schema that refers to itself is refused, as is anything no column holds faithfully: other
``oneOf``/``anyOf``/``allOf``, ``not``, ``if``/``then``/``else``, ``patternProperties``, tuples,
a ``$ref`` to another document, an object that accepts any keys with any values, several types
in one field, a top level that is not an object with properties. Names: two properties equal
ignoring case at one level and top-level names icetide reserves are refused (as Avro's); a name
no table can hold (:func:`icetide.ingest.names.problem`) is left to schema evolution, which
dead-letters the records carrying it (``invalid_field``).

Besides the type, a schema yields its validation rules as plain data (:class:`.json_schema_rules.Rule`:
where, which keyword, its argument), checked per record by :mod:`.json_schema_checks`: ``type`` (a null where
the type allows none, a string where a number belongs), ``required``, ``enum``, ``const``,
``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum`` (draft 4's boolean form too),
``multipleOf``, ``minLength``/``maxLength``, ``pattern``, ``minItems``/``maxItems``,
``uniqueItems``, ``minProperties``/``maxProperties``, ``additionalProperties: false``. Other
keywords are annotations (``title``, ``default``, other ``format`` values, vendor keys) and are
not read.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
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

from icetide.ingest.formats.avro_types import UnsupportedSchema
from icetide.ingest.formats.json_schema_rules import Each, Path, Rule, json_path, value_text
from icetide.ingest.names import RESERVED_PREFIXES

__all__ = ["JsonSchema", "UnsupportedSchema", "parse"]


@dataclass(frozen=True)
class JsonSchema:
    """One registry schema: its id, the record's column types, and the rules its records keep."""

    id: int
    struct: StructType
    rules: tuple[Rule, ...] = ()

    @property
    def patterns(self) -> list[str]:
        """The ``pattern`` regexes (Java must compile them: Spark's ``rlike`` runs them)."""
        return [str(r.arg) for r in self.rules if r.keyword == "pattern"]


#: Limits on a schema from outside: nesting, subschemas once ``$ref`` is expanded, values of one ``enum``
MAX_DEPTH, MAX_NODES, MAX_ENUM = 64, 10_000, 1000
TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")
#: Keywords no column holds faithfully or icetide cannot check yet → what to tell the user
_REFUSED = {
    **{k: f"'{k}'" for k in ("not", "dependencies", "dependentSchemas", "dependentRequired", "propertyNames",
                             "contains", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef")},
    **dict.fromkeys(("if", "then", "else"), "'if'/'then'/'else'"),
    "patternProperties": "'patternProperties' (properties named by a pattern)",
    "prefixItems": "'prefixItems' (a tuple)", "additionalItems": "'additionalItems' (a tuple)",
}
#: Keywords that type or check a value (beside ``oneOf``/``anyOf``/``allOf`` they are refused: not merged)
_CHECKS = {"type", "properties", "additionalProperties", "required", "items", "enum", "const", "minimum", "maximum",
           "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "minItems",
           "maxItems", "uniqueItems", "minProperties", "maxProperties", "format"}


def parse(schema_id: int, text: str) -> JsonSchema:
    """A registry schema's text as a :class:`JsonSchema`; :class:`UnsupportedSchema` (with what to
    change) if no table can hold it faithfully, never another exception: a schema is data from outside."""
    try:
        schema = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise UnsupportedSchema(f"schema id {schema_id} is not valid JSON ({str(e)[:200]})") from None
    if not isinstance(schema, dict):
        raise UnsupportedSchema(f"schema id {schema_id} is not a JSON Schema object (a table needs an object "
                                "with properties at the top level)")
    conv = _Converter(schema)
    try:
        struct = conv.convert(schema, (), (), 0)
    except UnsupportedSchema as e:
        raise UnsupportedSchema(f"schema id {schema_id}: {e}") from None
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as e:
        raise UnsupportedSchema(f"schema id {schema_id} is not a valid JSON Schema ({type(e).__name__}: "
                                f"{str(e)[:200]})") from None
    if not isinstance(struct, StructType) or not struct.fields:
        raise UnsupportedSchema(f"schema id {schema_id}: the top level is {_shown(struct)}, not an object with "
                                "properties (a table needs named fields): wrap the value in an object")
    return JsonSchema(schema_id, struct, tuple(conv.rules))


def _shown(t: DataType) -> str:
    return "null" if isinstance(t, NullType) else t.simpleString()[:60]


def _kind_of(v: Any) -> str:
    """The JSON type of a literal ``enum``/``const`` value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _description(s: Any) -> str | None:
    if not isinstance(s, dict):
        return None
    if isinstance(s.get("description"), str):
        return str(s["description"])
    for combo in ("oneOf", "anyOf", "allOf"):
        for m in s.get(combo) or []:
            if isinstance(m, dict) and isinstance(m.get("description"), str) and m.get("type") != "null":
                return str(m["description"])
    return None


@dataclass
class _Converter:
    root: dict[str, Any]
    rules: list[Rule] = field(default_factory=list)
    nodes: int = 0

    def refuse(self, path: Path, why: str) -> UnsupportedSchema:
        return UnsupportedSchema(f"{json_path(path)} {why}")

    def target(self, ref: Any, path: Path) -> Any:
        """The subschema a local ``$ref`` points to."""
        if not isinstance(ref, str):
            raise self.refuse(path, "has a $ref that is not a string")
        if not ref.startswith("#"):
            raise self.refuse(path, f"has $ref {ref[:120]!r} to another document: icetide resolves only references "
                                    "inside the schema (#/definitions/…, #/$defs/…), and no registry schema "
                                    "references yet: register the schema with the definition inlined")
        pointer = urllib.parse.unquote(ref[1:])
        if pointer and not pointer.startswith("/"):
            raise self.refuse(path, f"has $ref {ref[:120]!r}, an anchor: use a JSON pointer (#/$defs/…)")
        node: Any = self.root
        for part in pointer.split("/")[1:] if pointer else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise self.refuse(path, f"has $ref {ref[:120]!r}, which points to nothing in the schema")
        return node

    def deref(self, s: Any, path: Path, refs: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        while isinstance(s, dict) and "$ref" in s:
            ref = s["$ref"]
            target = self.target(ref, path)
            if ref in refs:
                raise self.refuse(path, f"refers to itself through $ref {ref[:120]!r} (a recursive schema): a table "
                                        "cannot hold unbounded nesting; flatten the recursive part or send it as a "
                                        "string")
            s, refs = target, (*refs, ref)
        return s, refs

    def convert(self, s: Any, path: Path, refs: tuple[str, ...], depth: int, nullable: bool = False) -> DataType:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.refuse(path, f"is where the schema passes {MAX_NODES} subschemas ($refs expanded): too large "
                                    "to check per record")
        if depth > MAX_DEPTH:
            raise self.refuse(path, f"is nested deeper than {MAX_DEPTH} levels")
        s, refs = self.deref(s, path, refs)
        if s is True or s == {}:
            raise self.refuse(path, "accepts any value (no type): a column needs one; give it a type")
        if not isinstance(s, dict):
            raise self.refuse(path, "accepts no value" if s is False else "is not a schema (a JSON object)")
        for kw in s:
            if kw in _REFUSED:
                raise self.refuse(path, f"uses {_REFUSED[kw]}, which icetide cannot hold in a column or check per "
                                        "record: remove it, or send that part as a string")
        for combo in ("oneOf", "anyOf", "allOf"):
            if combo in s:
                return self.combined(s, combo, path, refs, depth, nullable)
        types = self.types(s, path)
        kinds = [t for t in types if t != "null"]
        if "integer" in kinds and "number" in kinds:
            kinds.remove("integer")
        if len(kinds) > 1:
            raise self.refuse(path, f"has several types ({', '.join(kinds)}): a column has one; give it one type "
                                    "(or send it as a string)")
        nullable = nullable or "null" in types
        if path:
            self.rules.append(Rule(path, "type", (*kinds, *(["null"] if nullable else []))))
        self.values(s, path)
        if not kinds:
            return NullType()
        kind = kinds[0]
        if kind == "string":
            self.counts(s, path, ("minLength", "maxLength"))
            if "pattern" in s:
                if not isinstance(s["pattern"], str) or len(s["pattern"]) > 1000:
                    raise self.refuse(path, "has a pattern that is not a string of at most 1000 characters")
                self.rules.append(Rule(path, "pattern", s["pattern"]))
            fmt = s.get("format")
            return TimestampType() if fmt == "date-time" else DateType() if fmt == "date" else StringType()
        if kind in ("integer", "number"):
            self.bounds(s, path)
            return LongType() if kind == "integer" else DoubleType()
        if kind == "boolean":
            return BooleanType()
        if kind == "array":
            return self.array(s, path, refs, depth)
        return self.object(s, path, refs, depth)

    def combined(self, s: dict[str, Any], combo: str, path: Path, refs: tuple[str, ...], depth: int,
                 nullable: bool) -> DataType:
        """``allOf`` of one schema, or ``oneOf``/``anyOf`` of null and one schema (an optional field)."""
        members = s[combo]
        if not isinstance(members, list) or not members:
            raise self.refuse(path, f"has {combo} that is not a non-empty list")
        beside = sorted(k for k in s if k in _CHECKS or (k in ("oneOf", "anyOf", "allOf") and k != combo))
        if beside:
            raise self.refuse(path, f"has {combo} beside {', '.join(beside)}: icetide does not merge schemas; move "
                                    f"them into the {combo} member")
        if combo == "allOf":
            if len(members) == 1:
                return self.convert(members[0], path, refs, depth + 1, nullable)
            raise self.refuse(path, f"has allOf of {len(members)} schemas: icetide does not merge schemas; write "
                                    "the merged schema")
        real = [m for m in members if not _is_null(self.deref(m, path, refs)[0])]
        if len(real) == 1 and len(members) > 1:
            return self.convert(real[0], path, refs, depth + 1, nullable=True)
        if len(real) == 1:
            return self.convert(real[0], path, refs, depth + 1, nullable)
        if not real:
            return self.convert({"type": "null"}, path, refs, depth + 1)
        raise self.refuse(path, f"has {combo} of {len(real)} schemas: a column has one type; icetide reads {combo} "
                                f'only as [{{"type": "null"}}, <schema>] (an optional field, as Confluent\'s '
                                "serializer writes it)")

    def types(self, s: dict[str, Any], path: Path) -> list[str]:
        t = s.get("type")
        if t is None:
            if "enum" in s or "const" in s:
                vals = s["enum"] if "enum" in s else [s["const"]]
                return list(dict.fromkeys(_kind_of(v) for v in vals)) if isinstance(vals, list) and vals else ["null"]
            if any(k in s for k in ("properties", "additionalProperties", "required")):
                return ["object"]
            if "items" in s:
                return ["array"]
            raise self.refuse(path, "has no type: a column needs one; give it a type")
        ts = [t] if isinstance(t, str) else t if isinstance(t, list) else None
        if not ts or any(x not in TYPES for x in ts):
            raise self.refuse(path, f"has type {json.dumps(t)[:80]}, not one or more of {', '.join(TYPES)}")
        return list(dict.fromkeys(ts))

    def values(self, s: dict[str, Any], path: Path) -> None:
        """``enum`` and ``const``: literals icetide compares (strings, numbers, booleans, null)."""
        for kw in ("enum", "const"):
            if kw not in s:
                continue
            vals = s[kw] if kw == "enum" else [s[kw]]
            if not isinstance(vals, list) or not vals:
                raise self.refuse(path, "has an enum that is not a non-empty list")
            if len(vals) > MAX_ENUM:
                raise self.refuse(path, f"has an enum of {len(vals)} values: icetide checks enums of up to {MAX_ENUM}; "
                                        "drop the enum from the schema or make the field a plain string")
            for v in vals:
                if isinstance(v, (dict, list)) or (isinstance(v, float) and not math.isfinite(v)):
                    raise self.refuse(path, f"has {kw} holding {value_text(v)}: icetide compares strings, numbers, "
                                            "booleans and null only")
            self.rules.append(Rule(path, kw, tuple(vals) if kw == "enum" else vals[0]))

    def counts(self, s: dict[str, Any], path: Path, keywords: tuple[str, ...]) -> None:
        for kw in keywords:
            if kw in s:
                n = s[kw]
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise self.refuse(path, f"has {kw} {json.dumps(n)[:40]}, not a non-negative integer")
                self.rules.append(Rule(path, kw, n))

    def bounds(self, s: dict[str, Any], path: Path) -> None:
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            if kw not in s or isinstance(s[kw], bool):
                continue
            n = s[kw]
            if not isinstance(n, (int, float)) or not math.isfinite(n) or (kw == "multipleOf" and n <= 0):
                raise self.refuse(path, f"has {kw} {json.dumps(n)[:40]}, not a finite number"
                                        + (" above 0" if kw == "multipleOf" else ""))
            limit: str = kw
            if kw in ("minimum", "maximum") and s.get("exclusive" + kw[:1].upper() + kw[1:]) is True:
                limit = "exclusive" + kw[:1].upper() + kw[1:]  # draft 4: a boolean makes the bound exclusive
            self.rules.append(Rule(path, limit, n))

    def array(self, s: dict[str, Any], path: Path, refs: tuple[str, ...], depth: int) -> DataType:
        items = s.get("items")
        if isinstance(items, list):
            raise self.refuse(path, "has items as a list (a tuple): a column's elements have one type")
        if items is None or items is True or items == {}:
            raise self.refuse(path, "is an array without an items schema: declare the items' type")
        element = self.convert(items, (*path, Each.ITEM), refs, depth + 1)
        self.counts(s, path, ("minItems", "maxItems"))
        if s.get("uniqueItems") is True:
            self.rules.append(Rule(path, "uniqueItems", True))
        return ArrayType(element, True)

    def object(self, s: dict[str, Any], path: Path, refs: tuple[str, ...], depth: int) -> DataType:
        props = s.get("properties") or {}
        more = s.get("additionalProperties", True)
        required = s.get("required", [])
        if not isinstance(props, dict):
            raise self.refuse(path, "has properties that are not an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise self.refuse(path, "has required that is not a list of names (draft 4 or later)")
        self.rules.extend(Rule(path, "required", r) for r in dict.fromkeys(required))
        self.counts(s, path, ("minProperties", "maxProperties"))
        if more is False:
            self.rules.append(Rule(path, "additionalProperties", tuple(props)))
        if props:
            if isinstance(more, dict) and more:
                raise self.refuse(path, "has properties and additionalProperties with a schema: a column is a "
                                        "struct of named properties or a map of one value type, not both; drop one")
            fields: list[StructField] = []
            seen: dict[str, str] = {}
            for name, sub in props.items():
                if name.lower() in seen:
                    raise self.refuse(path, f"has properties {seen[name.lower()]!r} and {name!r}, equal ignoring "
                                            "case: Spark and Iceberg resolve names ignoring case")
                seen[name.lower()] = name
                if not path and name.lower().startswith(RESERVED_PREFIXES):
                    raise self.refuse(path, f"has property {name!r}, which starts with a prefix icetide reserves "
                                            f"for its own columns ({', '.join(RESERVED_PREFIXES)})")
                t = self.convert(sub, (*path, name), refs, depth + 1)
                doc = _description(sub)
                fields.append(StructField(name, t, True, {"comment": doc[:1000]} if doc else {}))
            return StructType(fields)
        if isinstance(more, dict) and more:
            return MapType(StringType(), self.convert(more, (*path, Each.VALUE), refs, depth + 1), True)
        if more is False:
            return NullType()  # always an empty object: nothing to keep
        raise self.refuse(path, "is an object without properties, so any keys with any values: declare its "
                                "properties (a struct) or additionalProperties with a schema (a map)")


def _is_null(s: Any) -> bool:
    return isinstance(s, dict) and s.get("type") in ("null", ["null"])
