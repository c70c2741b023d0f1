"""Avro schemas → Spark/Iceberg types, and which writer schemas a table can take. Pure: no JVM.

The mapping is the one Spark's ``from_avro`` decodes to (``SchemaConverters.toSqlType``), so a
decoded record and the table built from its schema always agree
(``tests/integration/test_avro.py`` compares the two):

======================================  =========================================================
Avro                                    column
======================================  =========================================================
record                                  struct (nested)
array / map                             list / map<string, …>
enum, string, string+uuid               string
bytes, fixed                            binary
bytes/fixed + decimal(P,S)              decimal(P,S); decimal(38,S) when P > 38 (see .avro_semantic)
int / long / float / double / boolean   int / long / float / double / boolean
int + date                              date
int + time-millis / long + time-micros  int (ms after midnight) / long (µs after midnight); the
                                        column comment says which (Spark has no time type Iceberg
                                        can write)
long + timestamp-millis/-micros         timestamp (with zone, UTC)
long + local-timestamp-millis/-micros   timestamp without zone
[null, T]                               optional T
[int, long] / [float, double]           long / double
other unions                            struct<member_int, member_Addr, …>: a field per non-null member
                                        named by its type (Spark's stable union names, :data:`SPARK_OPTIONS`)
null                                    (no column)
======================================  =========================================================

Every column is optional (other schema versions may lack it); a field's ``doc`` becomes the column
comment. Refused with a reason (the records of such a schema are dead letters): recursive records,
names equal ignoring case at one level (Spark and Iceberg resolve names ignoring case), top-level
names icetide reserves, a decimal scale over 38, a top level that is not a record. Kafka Connect and
Debezium types (``connect.name``) are mapped by :mod:`.avro_semantic` (``parse(..., semantic=True)``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

import icetide.ingest.formats.avro_semantic as avro_semantic

#: Top-level names a record never sets (icetide's own columns), any case.
RESERVED_PREFIXES = ("_kafka_", "_icetide_", "_cdc_")
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
#: from_avro's options for Spark's stable union names (``member_`` + the member's type name, as
#: :func:`member_name` gives), every decode and the driver's check alike
UNION_PREFIX = "member_"
SPARK_OPTIONS = {"enableStableIdentifiersForUnionType": "true", "stableIdentifierPrefixForUnionType": UNION_PREFIX}
_TIME_NOTE = {"time-millis": "time-millis: milliseconds after midnight",
              "time-micros": "time-micros: microseconds after midnight"}


class UnsupportedSchema(ValueError):
    """A writer schema icetide cannot make a table of (the message says why)."""


@dataclass
class WriterSchema:
    """One registry schema: its id, the schema ``from_avro`` decodes with (:func:`.avro_semantic.decode_schema`),
    the record's full name, the decoded type and the column types.

    Invariant: ``decoded`` is what ``from_avro`` gives for ``schema``; ``struct`` is ``decoded`` with
    each path of ``conversions`` converted (see :mod:`.avro_rows`), the type a table holds."""

    id: int
    schema: Any  # parsed JSON: the decode schema
    full_name: str
    struct: StructType  # the record's column types
    decoded: StructType | None = None  # what from_avro produces (None: the same as struct)
    conversions: dict[tuple[str, ...], str] = field(default_factory=dict)  # path → conversion after decoding

    @property
    def name(self) -> str:
        """The record's name without its namespace."""
        return self.full_name.rsplit(".", 1)[-1]

    @property
    def text(self) -> str:
        return json.dumps(self.schema, separators=(",", ":"))

    @property
    def decoded_struct(self) -> StructType:
        return self.decoded if self.decoded is not None else self.struct


def parse(schema_id: int, text: str, semantic: bool = True) -> WriterSchema:
    """A registry schema's text as a :class:`WriterSchema`; :class:`UnsupportedSchema` if no table can
    hold it (never another exception: a schema is data from outside). Defaults are not validated
    (as Spark's ``from_avro`` parses); ``semantic``: Connect/Debezium types as what they mean."""
    try:
        return _parse(schema_id, text, semantic)
    except UnsupportedSchema:
        raise
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as e:
        raise UnsupportedSchema(f"schema id {schema_id} is not a valid Avro schema ({type(e).__name__}: "
                                f"{str(e)[:200]})") from None


def _parse(schema_id: int, text: str, semantic: bool) -> WriterSchema:
    try:
        schema = json.loads(text)
    except ValueError as e:
        raise UnsupportedSchema(f"schema id {schema_id} is not valid JSON: {e}") from None
    if isinstance(schema, str) and schema not in PRIMITIVES:
        raise UnsupportedSchema(f"schema id {schema_id} names a type it does not define")
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise UnsupportedSchema(f"schema id {schema_id} is not an Avro record (a table needs named fields)")
    schema = avro_semantic.decode_schema(schema, semantic)
    converter = _Converter(semantic=semantic)
    try:
        decoded = to_spark(schema)
        struct = converter.convert(schema, "", (), ())
    except UnsupportedSchema as e:
        raise UnsupportedSchema(f"schema id {schema_id}: {e}") from None
    assert isinstance(struct, StructType) and isinstance(decoded, StructType)
    seen: set[str] = set()
    for f in struct.fields:
        if f.name.lower().startswith(RESERVED_PREFIXES):
            raise UnsupportedSchema(f"schema id {schema_id}: field {f.name!r} starts with a prefix icetide reserves "
                                    f"for its own columns ({', '.join(RESERVED_PREFIXES)})")
        seen.add(f.name.lower())
    return WriterSchema(schema_id, schema, full_name(schema, ""), struct, decoded if converter.conversions else None,
                        dict(converter.conversions))


def full_name(schema: dict[str, Any], namespace: str) -> str:
    name = str(schema.get("name", ""))
    if "." in name:
        return name
    ns = schema.get("namespace", namespace) or ""
    return f"{ns}.{name}" if ns else name


def to_spark(schema: Any) -> DataType:
    """The Spark type ``from_avro`` decodes ``schema`` to (see the module docstring)."""
    return _Converter().convert(schema, "", (), None)


#: A path of record fields from the top-level record; None inside arrays, maps and unions of
#: several types (no conversion there: the raw type stays)
Path = tuple[str, ...] | None


@dataclass
class _Converter:
    named: dict[str, Any] = field(default_factory=dict)  # full name → schema (for references)
    semantic: bool = False  # Connect/Debezium types converted (see .avro_semantic.CONVERTED)
    conversions: dict[tuple[str, ...], str] = field(default_factory=dict)

    def convert(self, s: Any, ns: str, stack: tuple[str, ...], path: Path = None) -> DataType:
        if isinstance(s, str):
            if s in PRIMITIVES:
                return self._primitive(s, {})
            ref = s if "." in s or not ns else f"{ns}.{s}"
            target = self.named.get(ref, self.named.get(s))
            if target is None:
                raise UnsupportedSchema(f"type {s!r} is referenced but not defined (schema references are not "
                                        "supported: inline the type)")
            name = full_name(target, ns)
            if name in stack:
                raise UnsupportedSchema(f"record {name!r} contains itself (a recursive schema): a table cannot "
                                        "hold unbounded nesting; flatten the recursive part or send it as a string")
            return self.convert(target, ns, stack, path)
        if isinstance(s, list):
            return self._union(s, ns, stack, path)
        if not isinstance(s, dict):
            raise UnsupportedSchema(f"not an Avro schema: {str(s)[:80]}")
        t = s.get("type")
        logical = s.get("logicalType")
        if isinstance(t, (dict, list)):
            return self.convert(t, ns, stack, path)
        kind = avro_semantic.conversion(s) if self.semantic and path is not None else None
        if kind is not None and path:
            self.conversions[path] = kind
            if t == "record":
                self.named[full_name(s, ns)] = s
            return TimestampNTZType() if kind == "nanos_ntz" else TimestampType() if kind == "zoned" else StringType()
        if t in PRIMITIVES:
            return self._primitive(t, s)
        if t == "record" or t == "error":
            name = full_name(s, ns)
            if name in stack:
                raise UnsupportedSchema(f"record {name!r} contains itself (a recursive schema)")
            self.named[name] = s
            inner_ns = name.rsplit(".", 1)[0] if "." in name else ""
            fields: list[StructField] = []
            names: set[str] = set()
            for f in s.get("fields", []):
                fname = f.get("name")
                if not isinstance(fname, str) or not fname:
                    raise UnsupportedSchema(f"record {name!r} has a field without a name")
                if fname.lower() in names:
                    raise UnsupportedSchema(f"record {name!r} has two fields named {fname!r} ignoring case; "
                                            "Spark and Iceberg resolve names ignoring case")
                names.add(fname.lower())
                ft = self.convert(f.get("type"), inner_ns, (*stack, name), None if path is None else (*path, fname))
                semantic = avro_semantic.NOTES.get(avro_semantic.connect_name(f.get("type")) or "")
                notes = [n for n in (f.get("doc"), _TIME_NOTE.get(_logical_of(f.get("type")) or ""),
                                     semantic if self.semantic else None) if n]
                meta = {"comment": " · ".join(str(n) for n in notes)[:1000]} if notes else {}
                fields.append(StructField(fname, ft, True, meta))
            return StructType(fields)
        if t == "enum":
            self.named[full_name(s, ns)] = s
            return StringType()
        if t == "fixed":
            self.named[full_name(s, ns)] = s
            if logical == "decimal":
                return _decimal(s)
            return BinaryType()
        if t == "array":
            e = self.convert(s.get("items"), ns, stack, None)
            return ArrayType(e, True)
        if t == "map":
            v = self.convert(s.get("values"), ns, stack, None)
            return MapType(StringType(), v, True)
        if isinstance(t, str):
            return self.convert(t, ns, stack, path)
        raise UnsupportedSchema(f"unknown Avro type {str(t)[:80]!r}")

    def _primitive(self, t: str, s: dict[str, Any]) -> DataType:
        logical = s.get("logicalType")
        if t == "int":
            return DateType() if logical == "date" else IntegerType()
        if t == "long":
            if logical in ("timestamp-millis", "timestamp-micros"):
                return TimestampType()
            if logical in ("local-timestamp-millis", "local-timestamp-micros"):
                return TimestampNTZType()
            return LongType()
        if t == "bytes":
            return _decimal(s) if logical == "decimal" else BinaryType()
        return {"null": NullType(), "boolean": BooleanType(), "float": FloatType(), "double": DoubleType(),
                "string": StringType()}[t]

    def _union(self, members: list[Any], ns: str, stack: tuple[str, ...], path: Path) -> DataType:
        rest = [m for m in members if m != "null" and not (isinstance(m, dict) and m.get("type") == "null")]
        if not rest:
            return NullType()
        if len(rest) == 1:
            return self.convert(rest[0], ns, stack, path)
        types = [self.convert(m, ns, stack, None) for m in rest]
        if all(isinstance(x, (IntegerType, LongType)) for x in types) and len(types) == 2 \
                and {m if isinstance(m, str) else m.get("type") for m in rest} == {"int", "long"}:
            return LongType()
        if all(isinstance(x, (FloatType, DoubleType)) for x in types) and len(types) == 2 \
                and {m if isinstance(m, str) else m.get("type") for m in rest} == {"float", "double"}:
            return DoubleType()
        names = [member_name(m) for m in rest]
        for i, n in enumerate(names):
            if n.lower() in (x.lower() for x in names[:i]):
                raise UnsupportedSchema(f"a union has two members named {n!r} ignoring case (Spark names a union's "
                                        "columns after their types' names); rename one of the named types")
        return StructType([StructField(n, x, True) for n, x in zip(names, types, strict=True)])


def member_name(m: Any) -> str:
    """The column of a union member, as Spark's stable union names give it: ``member_`` and the
    member's type name (a named type's name without its namespace, else ``int``, ``array``, …)."""
    if isinstance(m, dict):
        t = m.get("type")
        if t in ("record", "error", "enum", "fixed"):
            return UNION_PREFIX + str(m.get("name", "")).rsplit(".", 1)[-1]
        return member_name(t)
    if isinstance(m, list):  # a union inside a union is no Avro schema (the parser refuses it)
        raise UnsupportedSchema("a union directly inside a union is not valid Avro")
    return UNION_PREFIX + str(m).rsplit(".", 1)[-1]


def _logical_of(t: Any) -> str | None:
    if isinstance(t, dict):
        return t.get("logicalType")
    if isinstance(t, list):
        for m in t:
            found = _logical_of(m)
            if found:
                return found
    return None


def _decimal(s: dict[str, Any]) -> DecimalType:
    p, sc = int(s.get("precision", 0)), int(s.get("scale", 0))
    if not 0 < p <= 38 or not 0 <= sc <= p:
        raise UnsupportedSchema(f"decimal({p},{sc}) cannot be a column: precision 1-38 and scale 0-precision")
    return DecimalType(p, sc)


# -- a writer schema against a table ----------------------------------------------------------------
#: (table type, writer type) pairs a table takes as they are: Avro's promotions (int → long, float,
#: double; long → float, double; float → double; string ↔ bytes), cast per record
Holds = tuple[tuple[type[DataType], type[DataType]], ...]
HOLDS: Holds = ((LongType, IntegerType), (FloatType, IntegerType), (FloatType, LongType), (DoubleType, IntegerType),
                (DoubleType, LongType), (DoubleType, FloatType), (StringType, BinaryType), (BinaryType, StringType))

@dataclass
class Fit:
    """How a decoded record type meets a table's: columns to widen first, and what cannot be taken."""

    widen: list[tuple[tuple[str, ...], DataType, DataType]] = field(default_factory=list)  # (path, old, new)
    conflicts: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.conflicts


def fit(table: DataType, seen: DataType, path: tuple[str, ...] = (), holds: Holds = HOLDS) -> Fit:
    """Compare a table's type with a decoded type: widenings Iceberg allows (int → long, float →
    double, decimal(P,S) → decimal(P',S) with P' > P), what the table ``holds`` as it is (a format's
    promotions) and conflicts (anything else that differs). Fields only one side has are neither
    (evolution adds new ones; missing ones read as null)."""
    out = Fit()
    _fit(table, seen, path, out, holds)
    return out


def _fit(have: DataType, seen: DataType, path: tuple[str, ...], out: Fit, holds: Holds) -> None:
    name = ".".join(path) or "(record)"
    if isinstance(seen, NullType) or have == seen:
        return
    if isinstance(have, StructType) and isinstance(seen, StructType):
        by_name = {f.name.lower(): f for f in have.fields}
        for f in seen.fields:
            mine = by_name.get(f.name.lower())
            if mine is not None:
                _fit(mine.dataType, f.dataType, (*path, mine.name), out, holds)
        return
    if isinstance(have, ArrayType) and isinstance(seen, ArrayType):
        _fit(have.elementType, seen.elementType, (*path, "element"), out, holds)
        return
    if isinstance(have, MapType) and isinstance(seen, MapType):
        _fit(have.keyType, seen.keyType, (*path, "key"), out, holds)
        _fit(have.valueType, seen.valueType, (*path, "value"), out, holds)
        return
    if any(isinstance(have, h) and isinstance(seen, s) for h, s in holds):
        return  # the table already holds it: the format's promotions, read as an older version's records
    if isinstance(have, IntegerType) and isinstance(seen, LongType):
        out.widen.append((path, have, LongType()))
        return
    if isinstance(have, FloatType) and isinstance(seen, DoubleType):
        out.widen.append((path, have, DoubleType()))
        return
    if isinstance(have, DecimalType) and isinstance(seen, DecimalType) and have.scale == seen.scale:
        if seen.precision > have.precision:
            out.widen.append((path, have, seen))
        return
    out.conflicts.append(f"{name} is {have.simpleString()} in the table but {seen.simpleString()} in the writer "
                         "schema, which is not a widening Iceberg allows")



def merged(types: list[StructType], holds: Holds = HOLDS) -> StructType:
    """One record type holding every field of ``types`` (first spelling and order win; a field's
    widest type across them when they only differ by a widening or what ``holds`` takes)."""
    out = types[0]
    for t in types[1:]:
        out = _merge(out, t, holds)  # type: ignore[assignment]
    return out


def _merge(a: DataType, b: DataType, holds: Holds) -> DataType:
    if isinstance(a, StructType) and isinstance(b, StructType):
        by_name = {f.name.lower(): f for f in b.fields}
        fields = [StructField(f.name, _merge(f.dataType, by_name[f.name.lower()].dataType, holds) if f.name.lower()
                              in by_name else f.dataType, True, f.metadata or by_name.get(f.name.lower(), f).metadata)
                  for f in a.fields]
        have = {f.name.lower() for f in a.fields}
        return StructType(fields + [f for f in b.fields if f.name.lower() not in have])
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return ArrayType(_merge(a.elementType, b.elementType, holds), True)
    if isinstance(a, MapType) and isinstance(b, MapType):
        return MapType(a.keyType, _merge(a.valueType, b.valueType, holds), True)
    f = fit(a, b, holds=holds)
    if f.ok and f.widen and not f.widen[0][0]:
        return f.widen[0][2]
    if not f.ok and fit(b, a, holds=holds).ok:
        return b  # b holds a's values (int and double: double), whichever version came first
    return a
