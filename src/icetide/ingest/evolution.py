"""Schema evolution, metadata-only: add fields, widen types, relax required — never narrow or drop.

Per micro-batch, one JVM JSON-inference pass (:mod:`icetide.ingest.inference`) finds the schema
of the records routed to every table at once: each record is wrapped as
``{"<nonce><table>": <record>}`` (the nonce is random per batch, so a payload cannot steer another
table's inference). The inferred schema is compared with the
table's:

- a field the table lacks (top-level or nested in a struct, a list of structs or, for declared
  types, a map's struct values) becomes a new optional column, in the writer's order (which fields
  ``target.max_columns`` admits follows it too);
- ``int`` → ``long`` when a value does not fit an int, ``float`` → ``double`` (JSON numbers are
  doubles), ``decimal(P,S)`` → ``decimal(P',S)`` when a value needs more integer digits;
- a required field that a record leaves out or sets to null becomes optional.

Anything else (a string where the table has a long, …) is not an evolution: the record fails to
parse and becomes a ``type_mismatch`` dead letter. Field names are kept as producers write them
(:mod:`icetide.ingest.names`): only names no engine can hold, names equal ignoring case to another
at the same level, and names whose dotted form is another column's path are refused, as are fields
beyond ``target.max_columns``: their records are dead letters (``invalid_field``,
``ambiguous_field``, ``schema_limit``), so no value is dropped silently. Changes are applied with
Iceberg's ``UpdateSchema`` API, never SQL text.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StructField,
    StructType,
)

from icetide.ingest import names
from icetide.ingest.names import RESERVED_PREFIXES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class Path:
    """A field's place: the table's names (Iceberg's, "element" for list elements) and the names the
    records give it (the producer's, which differ from the table's under ``field_names: sanitize``)."""

    parts: tuple[str, ...]  # Iceberg names, with "element" for list elements
    in_list: bool = False
    given: tuple[str, ...] = ()  # the records' names (no "element"); () for the root

    def child(self, name: str, given: str | None = None) -> Path:
        return Path((*self.parts, name), self.in_list, (*self.given, name if given is None else given))

    def element(self) -> Path:
        return Path((*self.parts, "element"), True, self.given)

    def value(self) -> Path:
        """A map's values (Iceberg's name ``value``; ``in_list``: inside a collection)."""
        return Path((*self.parts, "value"), True, self.given)

    @property
    def name(self) -> str:
        return ".".join(self.parts)


@dataclass
class Evolution:
    """What one batch changes in one table's schema, and which fields it refuses."""

    added: list[tuple[Path, DataType]] = field(default_factory=list)
    #: the comment of an added field whose name was sanitized (the producer's name)
    comments: dict[Path, str] = field(default_factory=dict)
    widened: list[tuple[Path, DataType, DataType]] = field(default_factory=list)
    optional: list[Path] = field(default_factory=list)
    rejected: list[tuple[Path, str]] = field(default_factory=list)  # (field, error class)
    # candidates that need a look at the values before they are applied
    int_candidates: list[Path] = field(default_factory=list)
    decimal_candidates: list[tuple[Path, DecimalType]] = field(default_factory=list)
    required: list[Path] = field(default_factory=list)

    @property
    def changes(self) -> list[str]:
        return ([f"add {p.name} {t.simpleString()}" for p, t in self.added]
                + [f"widen {p.name} {a.simpleString()}->{b.simpleString()}" for p, a, b in self.widened]
                + [f"optional {p.name}" for p in self.optional])

    def __bool__(self) -> bool:
        return bool(self.added or self.widened or self.optional)


# -- inference --------------------------------------------------------------------------------
# -- diff ---------------------------------------------------------------------------------------
def _count_fields(t: DataType) -> int:
    if isinstance(t, StructType):
        return sum(1 + _count_fields(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _count_fields(t.elementType)
    if isinstance(t, MapType):
        return _count_fields(t.keyType) + _count_fields(t.valueType)
    return 0


def _clean(t: DataType) -> DataType | None:
    """An inferred type as a column type: null-only parts dropped; None if nothing is left."""
    if isinstance(t, NullType):
        return None
    if isinstance(t, StructType):
        fields = [StructField(f.name, c, True, f.metadata) for f in t.fields if (c := _clean(f.dataType)) is not None]
        return StructType(fields) if fields else None
    if isinstance(t, ArrayType):
        e = _clean(t.elementType)
        return ArrayType(e, True) if e is not None else None
    return t


def _bad_name(t: DataType) -> bool:
    if isinstance(t, StructType):
        return any(names.problem(f.name) is not None or _bad_name(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _bad_name(t.elementType)
    return False


def _one_spelling(path: Path, t: DataType, evo: Evolution) -> DataType:
    """A new field's type with one spelling per name ignoring case at every depth (inference merges
    ``{"meta":{"A":1}}`` and ``{"meta":{"a":2}}`` into ``struct<A, a>``, which Spark and Iceberg
    cannot resolve): the lower-case spelling is kept, as at the top level; the others are refused
    (``ambiguous_field``), so their records are dead letters."""
    if isinstance(t, ArrayType):
        return ArrayType(_one_spelling(path.element(), t.elementType, evo), t.containsNull)
    if not isinstance(t, StructType):
        return t
    kept: dict[str, StructField] = {}
    for f in sorted(t.fields, key=lambda x: (x.name != x.name.lower(), x.name)):
        here = path.child(f.name, names.original(f))
        if f.name.lower() in kept:
            evo.rejected.append((here, "ambiguous_field"))
            continue
        kept[f.name.lower()] = StructField(f.name, _one_spelling(here, f.dataType, evo), f.nullable, f.metadata)
    order = {f.name: i for i, f in enumerate(t.fields)}
    return StructType(sorted(kept.values(), key=lambda f: order[f.name]))


def diff(table: StructType, inferred: StructType, max_columns: int) -> Evolution:
    """What ``inferred`` records need from ``table`` (see the module docstring)."""
    evo = Evolution()
    budget = [max_columns - _count_fields(table)]
    _walk_struct(Path(()), table, inferred, evo, budget, names.schema_dotted_names(table))
    return evo


def _walk_struct(path: Path, have: StructType, seen: StructType, evo: Evolution, budget: list[int],
                 dotted: set[str]) -> None:
    """``dotted``: every dotted name of the table and of the fields added so far (lower case)."""
    by_name = {f.name: f for f in have.fields}
    taken = {f.name.lower() for f in have.fields}  # names already used, ignoring case
    for f in have.fields:
        if not f.nullable:
            evo.required.append(path.child(f.name, names.original(f)))
    # Names first, lower-case spellings first: of two new names equal ignoring case, the lower-case one is added.
    named: dict[str, tuple[Path, DataType]] = {}
    for f in sorted(seen.fields, key=lambda x: (x.name != x.name.lower(), x.name)):
        here, t = path.child(f.name, names.original(f)), _clean(f.dataType)
        if f.name in by_name or t is None:
            continue
        if not path.parts and f.name.lower().startswith(RESERVED_PREFIXES):
            evo.rejected.append((here, "reserved_field"))
            continue
        if f.name.lower() in taken:
            evo.rejected.append((here, "ambiguous_field"))
            continue
        if names.problem(f.name) is not None or _bad_name(t):
            evo.rejected.append((here, "invalid_field"))
            continue
        t = _one_spelling(here, t, evo)
        mine = names.dotted_names(here.name, t)
        if mine & dotted:  # e.g. a top-level "service.name" beside a struct "service" with "name"
            evo.rejected.append((here, "ambiguous_field"))
            continue
        taken.add(f.name.lower())
        dotted |= mine
        named[f.name] = (here, t)
    # Then the writer's order (Avro's; JSON's inference sorts by name): which fields target.max_columns
    # admits, and where the new columns go.
    for f in seen.fields:
        if f.name in named:
            here, t = named[f.name]
            n = 1 + _count_fields(t)
            if n > budget[0]:
                evo.rejected.append((here, "schema_limit"))
                continue
            budget[0] -= n
            evo.added.append((here, t))
            if names.original(f) != f.name:
                evo.comments[here] = names.ORIGINAL + names.original(f)
            elif (f.metadata or {}).get("comment"):  # a declared field's doc (Avro)
                evo.comments[here] = str(f.metadata["comment"])
        elif f.name in by_name:
            here = path.child(f.name, names.original(f))
            if names.original(f) != names.original(by_name[f.name]):
                # under field_names: sanitize, two producer names for one column ("user-agent" made it
                # user_x2Dagent; now a literal "user_x2Dagent" arrives, or the other way round): the
                # newcomer's records are dead letters, never read into the other field's column
                evo.rejected.append((here, "name_collision"))
                continue
            _walk_type(here, by_name[f.name].dataType, f.dataType, evo, budget, dotted)


def _walk_type(path: Path, have: DataType, seen: DataType, evo: Evolution, budget: list[int],
               dotted: set[str]) -> None:
    if isinstance(have, StructType) and isinstance(seen, StructType):
        _walk_struct(path, have, seen, evo, budget, dotted)
    elif isinstance(have, ArrayType) and isinstance(seen, ArrayType):
        _walk_type(path.element(), have.elementType, seen.elementType, evo, budget, dotted)
    elif isinstance(have, MapType) and isinstance(seen, MapType):  # declared maps (Avro): fields of their values
        _walk_type(path.value(), have.valueType, seen.valueType, evo, budget, dotted)
    elif isinstance(have, FloatType) and isinstance(seen, DoubleType):
        evo.widened.append((path, have, DoubleType()))
    elif isinstance(have, IntegerType) and isinstance(seen, LongType) and not path.in_list:
        evo.int_candidates.append(path)
    elif isinstance(have, DecimalType) and isinstance(seen, (LongType, DoubleType, DecimalType)) \
            and not path.in_list:
        evo.decimal_candidates.append((path, have))


# -- apply --------------------------------------------------------------------------------------
def _partial(schema: StructType, added: list[tuple[Path, DataType]], comments: dict[Path, str]) -> StructType:
    """Only the parent chains of the added fields, with the table's own nullability on parents."""
    root: dict[str, Any] = {}
    docs: dict[tuple[str, ...], str] = {p.parts: c for p, c in comments.items()}
    for p, dt in added:
        node = root
        for part in p.parts[:-1]:
            node = node.setdefault(part, {})
        node[p.parts[-1]] = (dt, docs.get(p.parts))

    def build(have: DataType, node: dict[str, Any]) -> DataType:
        if isinstance(have, ArrayType):
            return ArrayType(build(have.elementType, node["element"]), have.containsNull)
        if isinstance(have, MapType):
            return MapType(have.keyType, build(have.valueType, node["value"]), have.valueContainsNull)
        assert isinstance(have, StructType)
        by_name = {f.name: f for f in have.fields}
        fields = []
        for name, sub in node.items():
            if isinstance(sub, dict):
                parent = by_name[name]
                fields.append(StructField(name, build(parent.dataType, sub), parent.nullable))
            else:
                dt, doc = sub
                fields.append(StructField(name, dt, True, {"comment": doc} if doc else None))
        return StructType(fields)

    out = build(schema, root)
    assert isinstance(out, StructType)
    return out


def apply(spark: SparkSession, table: str, schema: StructType, evo: Evolution, attempts: int = 5) -> None:
    """Commit ``evo`` to ``table`` (fully qualified) through Iceberg's UpdateSchema, with retries.

    ``schema`` is the table's current record schema. New fields go through ``unionByNameWith`` of a
    schema that holds only them (and their parents), so nothing else can change by accident.
    """
    jvm: Any = spark._jvm
    assert jvm is not None
    types = jvm.org.apache.iceberg.types.Types
    util = jvm.org.apache.iceberg.spark.SparkSchemaUtil
    additions = None
    if evo.added:
        partial = _partial(schema, evo.added, evo.comments)
        additions = util.convert(jvm.org.apache.spark.sql.types.DataType.fromJson(partial.json()))
    renamed = {p.name: c[len(names.ORIGINAL):] for p, c in evo.comments.items() if c.startswith(names.ORIGINAL)}
    last: Exception | None = None
    for _ in range(attempts):
        t = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
        t.refresh()
        txn = t.newTransaction()
        upd = txn.updateSchema()
        if additions is not None:
            upd = upd.unionByNameWith(additions)
        for p, _, new in evo.widened:
            if isinstance(new, LongType):
                it = types.LongType.get()
            elif isinstance(new, DoubleType):
                it = types.DoubleType.get()
            else:
                assert isinstance(new, DecimalType)
                it = types.DecimalType.of(new.precision, new.scale)
            upd = upd.updateColumn(p.name, it)
        for p in evo.optional:
            upd = upd.makeColumnOptional(p.name)
        try:
            upd.commit()
            if renamed:  # the producers' names of the new columns, in the same commit as the columns
                have = names.originals(schema)
                txn.updateProperties().set(names.PROPERTY, json.dumps({**have, **renamed}, ensure_ascii=False,
                                                                        sort_keys=True)).commit()
            txn.commitTransaction()
            break
        except Exception as e:  # a concurrent commit (maintenance, another writer): rebuild, retry
            if "CommitFailedException" not in str(e):
                raise
            last = e
    else:
        raise RuntimeError(f"schema change of {table} kept conflicting: {last}")
    spark.catalog.refreshTable(table)
    log.info("evolved %s: %s", table, "; ".join(evo.changes))
