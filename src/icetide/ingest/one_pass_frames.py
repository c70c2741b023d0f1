"""The frames the one pass hands to ``MultiTableWrite`` (:mod:`icetide.ingest.one_pass`): each
record's table index, whether it is good, its timestamp, its shape and its row per target.

Three builders, one per way a record is read: :func:`frame` parses JSON with Spark's expressions,
:func:`decoded_frame` leaves the JSON value to the write task's decoder (the checks and the shape
come from the same token stream), and :func:`declared_frame` decodes registry formats (Avro) with
the format's own parse, each record once, its shape being its schema id.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from icetide.ingest import decode, multi_write, names, routing, shapes
from icetide.ingest.formats.json import json_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from icetide.ingest.formats import Formats
    from icetide.ingest.formats.avro import AvroFormat

IDX = "_icetide_idx"


@dataclass(frozen=True)
class Target:
    table: str  # namespace.table
    schema: StructType  # the record schema the rows are parsed against
    full_schema: StructType  # every column of the table, in order


def frame(rows: DataFrame, targets: list[Target], kafka_columns: bool, max_value_bytes: int, sample: bool = False
          ) -> tuple[DataFrame, list[int], int]:
    """``rows`` (routed, with ``_kafka_*`` and ``value``) as the frame ``runRouted`` takes:
    (idx, good, ts, shape, then the targets' columns side by side), the column each target's row
    starts at, and (``sample``) the column of the record values the job keeps one of per shape (else
    -1). Targets with the same columns share a parse and their columns (a fan-out by tenant or topic
    often writes many tables of one schema)."""
    app = rows.sparkSession.sparkContext.applicationId
    key = tuple((t.table, t.schema.json(), t.full_schema.json()) for t in targets)
    idx, parses, out, starts = _columns(app, key, kafka_columns, max_value_bytes)
    shape = F.col(shapes.SHAPE) if shapes.SHAPE in rows.columns else F.lit(None).cast("long")
    base = [F.col(c) for c in decode.KAFKA_COLUMNS] + [F.col("value"), F.col(shapes.SHAPE)]
    # Projections in steps: each record's parse (only its own table's) is computed once, then read
    # by its error checks and its row's columns (Spark does not merge projections that would repeat it).
    values = [F.col("value")] if sample else []
    framed = (rows.select(*base[:-1], shape.alias(shapes.SHAPE), idx)
              .select(*base, F.col(IDX), *parses).select(*out, *values))
    return framed, starts, len(out) if sample else -1


def decoded_frame(rows: DataFrame, targets: list[Target], kafka_columns: bool, by_field: bool = False
                  ) -> tuple[DataFrame, list[int], list[str], list[int]] | None:
    """``rows`` (routed without the record checks, with ``_kafka_*`` and ``value``) as the frame
    ``runDecoded`` takes: (idx, ts, value, Kafka columns), then each target's record type (targets
    with the same one share a decoder), the types, and each target's layout (which record field or
    Kafka column each table column holds). None when a table column's type is not its record
    field's (the expression path casts; the decoder does not). ``by_field``: the decoder routes
    each record by the routing field it reads (no table column; ``_kafka_topic`` for templates)."""
    kafka = list(decode.KAFKA_COLUMNS) if kafka_columns else []
    groups: dict[str, int] = {}
    group_of: list[int] = []
    layout: list[int] = []
    for t in targets:
        parsed = names.record_type(t.schema) if names.renamed(t.schema) else t.schema
        assert isinstance(parsed, StructType)
        group_of.append(groups.setdefault(parsed.json(), len(groups)))
        fields = {f.name: (i, f.dataType) for i, f in enumerate(t.schema.fields)}
        for f in t.full_schema.fields:
            if f.name in fields:
                i, dtype = fields[f.name]
                if dtype != f.dataType:
                    return None
                layout.append(i)
            elif f.name in kafka:
                layout.append(-1 - (3 + kafka.index(f.name)))
            else:
                layout.append(multi_write.NULL)
    app = rows.sparkSession.sparkContext.applicationId
    extra = [F.col(c).cast("string").alias(c) if c == "_kafka_key" else F.col(c) for c in kafka]
    if by_field:  # routed by the decoder (one record type): the frame has no table column, Spark reads no field
        idx = F.lit(None).cast("int").alias(IDX)
        if "_kafka_topic" not in kafka:
            extra.append(F.col("_kafka_topic"))
    else:
        idx = _index(app, tuple(t.table for t in targets))
    framed = rows.select(idx, F.unix_millis("_kafka_timestamp").alias("ts"), F.col("value"), *extra)
    return framed, group_of, list(groups), layout


@functools.lru_cache(maxsize=64)
def _index(app: str, tables: tuple[str, ...]) -> Column:
    """Each record's table as its position in ``tables`` (null: none of them), built once."""
    table = F.col(routing.TABLE)
    expr: Column | None = None
    for i, name in enumerate(tables):
        expr = F.when(table == F.lit(name), F.lit(i)) if expr is None else expr.when(table == F.lit(name), F.lit(i))
    assert expr is not None
    return expr.cast("int").alias(IDX)


#: A target group's parse: (its record schema JSON, that schema, a column name it may use) → (columns
#: computed first, by name, read by the next two; the table's record columns; the error class)
Parse = Callable[[str, StructType, str], tuple[dict[str, Column], dict[str, Column], Column]]


def _grouped(tables: list[tuple[str, str]], kafka_columns: bool, parse: Parse
             ) -> tuple[list[Column], list[Column], list[int]]:
    """For targets given as (record schema JSON, full schema JSON): each group of targets with the
    same columns parsed once (only its own records), then (parses, output columns, the output column
    each target's row starts at); the output columns are (idx, good, ts, shape, then each group's
    table columns side by side: ``runRouted`` hands a slice of the frame's row to the writer, so no
    struct is built per record)."""
    idx = F.col(IDX)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(tables):
        groups.setdefault(key, []).append(i)
    starts = [0] * len(tables)
    parses: list[Column] = []
    good: Column | None = None
    columns: list[Column] = []
    metadata = decode.metadata_columns(kafka_columns)
    for g, ((schema_json, full_json), members) in enumerate(groups.items()):
        for i in members:
            starts[i] = 4 + len(columns)
        mine = idx.isNotNull() if len(groups) == 1 else idx.isin(members)
        schema = StructType.fromJson(json.loads(schema_json))
        full = StructType.fromJson(json.loads(full_json))
        first, fields, error_class = parse(schema_json, schema, f"_icetide_p{g}")
        parses += [F.when(mine, c).alias(name) for name, c in first.items()]
        ok = error_class.isNull()
        good = F.when(mine, ok) if good is None else good.when(mine, ok)
        cols = {**fields, **metadata}
        for k, f in enumerate(full.fields):
            c = cols[f.name] if f.name in cols else F.lit(None).cast(f.dataType)
            columns.append((c if len(groups) == 1 else F.when(mine, c)).alias(f"_icetide_r{g}_{k}"))
    assert good is not None
    out = [idx, good.alias("good"), F.unix_millis("_kafka_timestamp").alias("ts"),
           F.col(shapes.SHAPE).cast("long").alias("shape"), *columns]
    return parses, out, starts


@functools.lru_cache(maxsize=64)
def _columns(app: str, key: tuple[tuple[str, str, str], ...], kafka_columns: bool, max_value_bytes: int
             ) -> tuple[Column, list[Column], list[Column], list[int]]:
    """(table index, parses, output columns, each target's first output column) for one list of targets, built
    once (hundreds of JVM calls). ``app`` is part of the key: columns are JVM objects of one
    application."""
    def parse(schema_json: str, schema: StructType, name: str) -> tuple[dict[str, Column], dict[str, Column], Column]:
        parsed, error_class, _ = json_columns(app, schema_json, max_value_bytes, name)
        return {name: parsed}, decode.record_columns(schema, name), error_class

    parses, out, starts = _grouped([(s, f) for _, s, f in key], kafka_columns, parse)
    return _index(app, tuple(name for name, _, _ in key)), parses, out, starts


def shape_of_id(sid: Column) -> Column:
    """A record's schema id as its shape in the one pass: ``2·id + 1``, never
    :data:`~icetide.ingest.shapes.UNKNOWN` (0, which the write task does not count); union members'
    negative ids map to negative odd shapes."""
    return sid.cast("long") * F.lit(2) + F.lit(1)


def id_of_shape(shape: int) -> int:
    """The schema id :func:`shape_of_id` made ``shape`` from."""
    return (shape - 1) // 2


#: declared_frame's columns (output columns, each target's first, the decoding columns) by targets,
#: settings and the format's ids (:meth:`Formats.columns_key`): built once per set of learned ids
_DECLARED: dict[tuple[Any, ...], tuple[list[Column], list[int], dict[str, Column]]] = {}


def declared_frame(rows: DataFrame, targets: list[Target], formats: Formats | AvroFormat, kafka_columns: bool,
                   max_value_bytes: int, readable: list[int] | None = None) -> tuple[DataFrame, list[int]]:
    """``rows`` (routed, with ``_kafka_*``, ``value``, the schema id and :data:`shapes.SHAPE`) as the
    frame ``runRouted`` takes, for a format that declares its types (Avro): each record decoded once
    (:meth:`Formats.with_decoded`, one column per schema id) and projected onto its table's columns
    by the format's own parse, by fields (:meth:`AvroFormat.parse_fields`: the usual path's parse
    with no struct per record), so a record is good or bad, and its row, the same in both passes.
    Returns the frame and the column each target's row starts at (targets with the same columns
    share theirs). ``readable``: when the route comes from the decoded
    record (record name, field), the ids the pass can read; a record without a table whose id is not
    among them goes to the first target as a bad record of its id's shape, so the caller sees that
    the batch holds an id it could not route (else such records are merely not routed)."""
    from icetide.ingest.formats.wire import ID

    app = rows.sparkSession.sparkContext.applicationId
    idx = _index(app, tuple(t.table for t in targets))
    schemas = [(t.schema.json(), t.full_schema.json()) for t in targets]
    key = (app, tuple(t.table for t in targets), tuple(schemas), kafka_columns, max_value_bytes,
           formats.columns_key())
    hit = _DECLARED.get(key)
    if hit is None:
        def parse(schema_json: str, schema: StructType, name: str
                  ) -> tuple[dict[str, Column], dict[str, Column], Column]:
            fields, error_class = formats.parse_fields(schema, max_value_bytes)
            return {}, fields, error_class

        parses, out, starts = _grouped(schemas, kafka_columns, parse)
        assert not parses, "a parse by fields computes nothing first"
        while len(_DECLARED) >= 16:  # a stream meets few sets of ids; the oldest goes first
            _DECLARED.pop(next(iter(_DECLARED)))
        hit = _DECLARED[key] = (out, starts, formats.decoding_columns())
    out, starts, decoding = hit
    base = [F.col(c) for c in (*decode.KAFKA_COLUMNS, "value", ID, shapes.SHAPE)]
    # In steps: each record's decode (its schema id's column) is computed once, then read by its
    # checks and its table's columns (Spark does not merge projections that would repeat it).
    picked = rows.select(*base, idx)
    if readable is not None:
        sid = F.col(ID)
        stray = F.col(routing.TABLE).isNull() & sid.isNotNull() & ~sid.isin(readable)
        picked = rows.select(*base, idx, F.col(routing.TABLE)).withColumn(
            IDX, F.coalesce(F.col(IDX), F.when(stray, F.lit(0)))).drop(routing.TABLE)
    decoded = picked.withColumns(decoding) if decoding else picked
    return decoded.select(*out), starts
