"""Steady fan-out batches in one pass over the batch.

A routed batch normally takes two passes: the batch is routed, fingerprinted and cached, its
tables are counted, created and evolved; then every table's rows are parsed from the cache and
written. Most batches of a running stream need none of the first pass: their tables exist, and
their records come in shapes each table is known to fit (:mod:`icetide.ingest.shapes`).

So such a batch is written first in one pass, with no cache: one Spark job reads the batch from
Kafka, routes, fingerprints and parses each record against its table's schema, and hands each row
to its table's Iceberg writer (``MultiTableWrite.runRouted``). Each task reports the shapes it saw
per table. A table whose rows all have known shapes is committed (tagged as any commit); a table
that showed a new shape is aborted, its files unreferenced. Everything the pass did not settle
(records for new tables, a new shape, records that failed routing or parsing, tables left out
because a replay or a policy needs the usual path) goes through the usual two passes, reading only
what is left.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from icetide.ingest import decode, routing, shapes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

IDX = "_icetide_idx"
#: A table must have been written within this many batches to be a target of the one pass: a
#: target costs a table load and a write builder per batch even when no record goes to it.
RECENT_BATCHES = 20
#: At most this many targets (the most recently written): each task keeps a writer open per table
#: it meets, so a wider fan-out leaves its least recent tables to the usual path.
MAX_TARGETS = 64


@dataclass
class Result:
    """What the one pass settled: committed tables, their counts and whether anything is left."""

    committed: dict[str, int] = field(default_factory=dict)  # namespace.table → rows written
    with_bad: list[str] = field(default_factory=list)  # committed tables some of whose records failed
    ts_max: list[int] = field(default_factory=list)
    rest: bool = False  # records the one pass did not settle: the usual path runs on them


@dataclass(frozen=True)
class Target:
    table: str  # namespace.table
    schema: StructType  # the record schema the rows are parsed against
    full_schema: StructType  # every column of the table, in order


def frame(rows: DataFrame, targets: list[Target], kafka_columns: bool, max_value_bytes: int
          ) -> tuple[DataFrame, list[int]]:
    """``rows`` (routed, with ``_kafka_*`` and ``value``) as the frame ``runRouted`` takes:
    (idx, good, ts, shape, row structs), and which row struct holds each target's rows. Targets
    with the same columns share a parse and a row struct (a fan-out by tenant or topic often
    writes many tables of one schema)."""
    app = rows.sparkSession.sparkContext.applicationId
    key = tuple((t.table, t.schema.json(), t.full_schema.json()) for t in targets)
    idx, parses, out, struct_of = _columns(app, key, kafka_columns, max_value_bytes)
    shape = F.col(shapes.SHAPE) if shapes.SHAPE in rows.columns else F.lit(None).cast("long")
    base = [F.col(c) for c in decode.KAFKA_COLUMNS] + [F.col("value"), F.col(shapes.SHAPE)]
    # Projections in steps: each record's parse (only its own table's) is computed once, then read
    # by its error checks and its row struct (Spark does not merge projections that would repeat it).
    framed = (rows.select(*base[:-1], shape.alias(shapes.SHAPE), idx)
              .select(*base, F.col(IDX), *parses).select(*out))
    return framed, struct_of


@functools.lru_cache(maxsize=64)
def _columns(app: str, key: tuple[tuple[str, str, str], ...], kafka_columns: bool, max_value_bytes: int
             ) -> tuple[Column, list[Column], list[Column], list[int]]:
    """(table index, parses, output columns, row struct per target) for one list of targets, built
    once (hundreds of JVM calls). ``app`` is part of the key: columns are JVM objects of one
    application."""
    table = F.col(routing.TABLE)
    idx_expr: Column | None = None
    for i, (name, _, _) in enumerate(key):
        idx_expr = (F.when(table == F.lit(name), F.lit(i)) if idx_expr is None
                    else idx_expr.when(table == F.lit(name), F.lit(i)))
    assert idx_expr is not None
    idx = F.col(IDX)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (_, schema_json, full_json) in enumerate(key):
        groups.setdefault((schema_json, full_json), []).append(i)
    struct_of = [0] * len(key)
    parses: list[Column] = []
    good: Column | None = None
    structs: list[Column] = []
    for g, ((schema_json, full_json), members) in enumerate(groups.items()):
        for i in members:
            struct_of[i] = g
        mine = idx.isNotNull() if len(groups) == 1 else idx.isin(members)
        name = f"_icetide_p{g}"
        schema = StructType.fromJson(json.loads(schema_json))
        full = StructType.fromJson(json.loads(full_json))
        parsed, error_class, _ = decode.parse_columns(app, schema_json, max_value_bytes, name)
        parses.append(F.when(mine, parsed).alias(name))
        ok = error_class.isNull()
        good = F.when(mine, ok) if good is None else good.when(mine, ok)
        cols = decode.good_columns(schema, kafka_columns, name)
        row = F.struct(*[(cols[f.name] if f.name in cols else F.lit(None).cast(f.dataType)).alias(f.name)
                         for f in full.fields])
        structs.append(F.when(mine, row).alias(f"_icetide_r{g}"))
    assert good is not None
    out = [idx, good.alias("good"), F.unix_millis("_kafka_timestamp").alias("ts"),
           F.col(shapes.SHAPE).cast("long").alias("shape"), *structs]
    return idx_expr.cast("int").alias(IDX), parses, out, struct_of
