"""A JSON Schema's validation rules (:mod:`.json_schema_rules`) as one Spark expression per schema
id: the first rule a record breaks, as ``"<JSON path>: <what is wrong>"``; null when it keeps them all.

The rules are read from the record's JSON text, never from the parsed row (whose types are the
table's, wider than one version's, and whose nulls cannot tell a missing key from an explicit
null): each object level is read once with ``from_json`` into a struct of VARIANT fields named
exactly as the properties (a missing key is SQL null, an explicit ``null`` is a variant null), and
its keys with ``json_object_keys``; a value's JSON type is ``schema_of_variant``'s (``STRING``,
``BIGINT``, ``DECIMAL(p,s)``, ``DOUBLE``, ``BOOLEAN``, ``OBJECT<…>``, ``ARRAY<…>``, ``VOID``).
Array items and map values are checked with ``transform``, the message naming the index or key.
Names never reach SQL text or a JSON-path string (:mod:`icetide.ingest.names`).

An object or array where another JSON type belongs is not checked here: the table's parse (its
struct, list and map columns) already refuses it (``type_mismatch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType, VariantType

from icetide.ingest.formats.json_schema_rules import Each, Rule, message, step_text

#: JSON types a value's own check tells apart (objects and arrays: the table's parse does)
SCALARS = frozenset({"string", "integer", "number", "boolean"})
#: Rules read from an object's keys
OBJECT_RULES = frozenset({"required", "additionalProperties", "minProperties", "maxProperties"})


@dataclass
class Node:
    """The rules at one path, and the paths below it (properties, array items, map values)."""

    rules: list[Rule] = field(default_factory=list)
    props: dict[str, Node] = field(default_factory=dict)
    each: dict[Each, Node] = field(default_factory=dict)


def tree(rules: tuple[Rule, ...] | list[Rule]) -> Node:
    """The rules by path, from the record's top level (properties in schema order)."""
    root = Node()
    for r in rules:
        node = root
        for step in r.path:
            node = node.each.setdefault(step, Node()) if isinstance(step, Each) else node.props.setdefault(step, Node())
        node.rules.append(r)
    return root


def active(rule: Rule) -> bool:
    """Whether ``rule`` checks anything here (a ``type`` that allows null and names an object or
    array is the table parse's to enforce)."""
    if rule.keyword != "type":
        return True
    kinds = [t for t in rule.arg if t != "null"]
    return "null" not in rule.arg or not kinds or set(kinds) <= SCALARS


def checked(node: Node) -> bool:
    """Whether ``node`` or a path below it has a rule to check."""
    return (any(active(r) for r in node.rules) or any(checked(c) for c in node.props.values())
            or any(checked(c) for c in node.each.values()))


def violation(text: Column, rules: tuple[Rule, ...]) -> Column | None:
    """The first rule the JSON object ``text`` breaks, as ``"<path>: <what>"``; None: no rule to check."""
    root = tree(rules)
    return first(None, root, F.lit("$"), text) if checked(root) else None


def first(v: Column | None, node: Node, where: Column, text: Column | None = None) -> Column | None:
    """The first broken rule of the value ``v`` (a variant) at ``node``, or of the object ``text``."""
    found = checks(v, node, where, text)
    return F.coalesce(*[F.when(broken, said) for broken, said in found]) if found else None


def checks(v: Column | None, node: Node, where: Column, text: Column | None = None) -> list[tuple[Column, Column]]:
    """(broken, message) per rule of ``node`` and below, in schema order."""
    out = [] if v is None else value_checks(v, node.rules, where)
    obj_rules = [r for r in node.rules if r.keyword in OBJECT_RULES]
    if node.props or obj_rules or text is not None:
        if text is not None:
            obj = text
        else:
            assert v is not None, "the top level has its text, every other node its value"
            obj = F.to_json(v)
        keys = F.json_object_keys(obj)  # null when not an object
        out += [object_check(keys, r, where) for r in obj_rules]
        live = {k: c for k, c in node.props.items() if checked(c)}
        if live:
            kids = F.from_json(obj, StructType([StructField(k, VariantType(), True) for k in live]))
            for k, child in live.items():
                out += checks(kids.getField(k), child, F.concat(where, F.lit(step_text(k))))
    item, value = node.each.get(Each.ITEM), node.each.get(Each.VALUE)
    if v is not None and item is not None and checked(item):
        arr = F.try_variant_get(v, "$", "array<variant>")
        found = F.filter(F.transform(arr, lambda e, i: _or_null(first(e, item, F.concat(
            where, F.lit("["), i.cast("string"), F.lit("]"))))), lambda m: m.isNotNull())
        out.append((F.array_size(found) > 0, F.get(found, 0)))
    if v is not None and value is not None and checked(value):
        entries = F.map_entries(F.try_variant_get(v, "$", "map<string,variant>"))
        found = F.filter(F.transform(entries, lambda e: _or_null(first(e["value"], value, F.concat(
            where, F.lit("['"), e["key"], F.lit("']"))))), lambda m: m.isNotNull())
        out.append((F.array_size(found) > 0, F.get(found, 0)))
    return out


def _or_null(c: Column | None) -> Column:
    return F.lit(None).cast("string") if c is None else c


def object_check(keys: Column, r: Rule, where: Column) -> tuple[Column, Column]:
    """One rule read from an object's keys (null ``keys``, no object: nothing broken)."""
    if r.keyword == "required":
        return ~F.array_contains(keys, F.lit(r.arg)), F.concat(where, F.lit(step_text(r.arg) + ": " + message(r)))
    if r.keyword == "additionalProperties":
        extra = F.array_except(keys, F.array(*[F.lit(n) for n in r.arg])) if r.arg else keys
        return (F.array_size(extra) > 0,
                F.concat(where, F.lit(': has property "'), F.get(extra, 0),
                         F.lit('", which the schema does not declare (additionalProperties: false)')))
    n = F.array_size(keys)
    return (n < r.arg) if r.keyword == "minProperties" else (n > r.arg), F.concat(where, F.lit(": " + message(r)))


def is_kind(kind: Column, t: str) -> Column:
    """Whether ``schema_of_variant``'s ``kind`` is the JSON type ``t`` (a scalar)."""
    if t == "string":
        return kind == F.lit("STRING")
    if t == "boolean":
        return kind == F.lit("BOOLEAN")
    whole = (kind == F.lit("BIGINT")) | (kind.startswith("DECIMAL(") & kind.endswith(",0)"))
    return whole if t == "integer" else whole | kind.isin("DOUBLE", "FLOAT") | kind.startswith("DECIMAL(")


def kind_name(kind: Column) -> Column:
    return (F.when(kind == F.lit("STRING"), F.lit("a string")).when(kind == F.lit("BOOLEAN"), F.lit("a boolean"))
            .when(kind.startswith("OBJECT"), F.lit("an object")).when(kind.startswith("ARRAY"), F.lit("an array"))
            .otherwise(F.lit("a number")))


def value_checks(v: Column, rules: list[Rule], where: Column) -> list[tuple[Column, Column]]:
    """(broken, message) for the value rules of one path; ``v`` is SQL null when the key is missing
    (nothing broken: ``required`` says whether it may be), a variant null for an explicit null."""
    kind = F.schema_of_variant(v)
    present = ~F.is_variant_null(v)
    text = F.try_variant_get(v, "$", "string")
    number = F.try_variant_get(v, "$", "double")
    out: list[tuple[Column, Column]] = []

    def said(r: Rule) -> Column:
        return F.concat(where, F.lit(": " + message(r)))

    for r in rules:
        k, a = r.keyword, r.arg
        if k == "type" and active(r):
            if "null" not in a:
                out.append((F.is_variant_null(v), F.concat(where, F.lit(": " + message(r, null=True)))))
            kinds = [t for t in a if t != "null"]
            if kinds and set(kinds) <= SCALARS:
                fits = reduce(lambda x, y: x | y, [is_kind(kind, t) for t in kinds])
                out.append((present & ~fits, F.concat(where, F.lit(": " + message(r) + " ("), kind_name(kind),
                                                      F.lit(")"))))
            elif not kinds:  # type null: no column holds the field, so any other value would be lost
                out.append((present, F.concat(where, F.lit(": " + message(r) + " ("), kind_name(kind), F.lit(")"))))
        elif k in ("enum", "const"):
            out.append((present & ~_one_of(v, kind, text, number, a if k == "enum" else (a,)), said(r)))
        elif k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            n = F.lit(float(a))
            broken = {"minimum": number < n, "maximum": number > n, "exclusiveMinimum": number <= n,
                      "exclusiveMaximum": number >= n}.get(k)
            if broken is None:  # multipleOf: off a whole multiple by more than rounding
                q = number / n
                broken = F.abs(q - F.round(q)) > F.lit(1e-9)
            out.append((present & is_kind(kind, "number") & broken, said(r)))
        elif k in ("minLength", "maxLength", "pattern"):
            broken = (F.length(text) < F.lit(a) if k == "minLength" else F.length(text) > F.lit(a)
                      if k == "maxLength" else ~text.rlike(str(a)))
            out.append((present & is_kind(kind, "string") & broken, said(r)))
        elif k in ("minItems", "maxItems", "uniqueItems"):
            arr = F.try_variant_get(v, "$", "array<variant>")
            n_items = F.array_size(arr)
            broken = (n_items < F.lit(a) if k == "minItems" else n_items > F.lit(a) if k == "maxItems"
                      else F.array_size(F.array_distinct(F.transform(arr, lambda e: F.to_json(e)))) < n_items)
            out.append((present & arr.isNotNull() & broken, said(r)))
    return out


def _one_of(v: Column, kind: Column, text: Column, number: Column, values: tuple[object, ...]) -> Column:
    """Whether the non-null value ``v`` equals one of ``values`` (numbers as doubles: 1 equals 1.0)."""
    strings = [x for x in values if isinstance(x, str)]
    numbers = [float(x) for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)]
    bools = [x for x in values if isinstance(x, bool)]
    hits = [F.lit(False)]
    if strings:
        hits.append(is_kind(kind, "string") & text.isin(strings))
    if numbers:
        hits.append(is_kind(kind, "number") & number.isin(numbers))
    if bools:
        hits.append((kind == F.lit("BOOLEAN")) & F.try_variant_get(v, "$", "boolean").isin(bools))
    return reduce(lambda x, y: x | y, hits)
