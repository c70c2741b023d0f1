"""The value-dependent half of schema evolution: what only the records' values can decide.

:func:`icetide.ingest.evolution.diff` compares types; some of its answers need the values: an
``int`` column whose values outgrow it, a ``decimal`` that needs more integer digits, a required
field a record leaves null, and the type of a new top-level field that inference made a string
because its values were of mixed kinds (the kind most of them have wins, so one outlier record
cannot turn a numeric column into a string one). Each is decided over every record of the batch.

Invariant: a new string field's kinds are counted over every record, except when the records'
shapes prove them all strings: a record's shape (:mod:`icetide.ingest.shapes`) fixes whether each
of its fields is a string, and the shaped sample holds a record of every shape, so a field that is
a string in each sampled record is a string in every record, and its majority is decided without
parsing every record again (one edge differs: the strings Spark's parser reads as numbers, ``"NaN"``,
``"Infinity"``, ``"+INF"`` and the like, count as strings then). Only where a record's shape is its
row's: append tables and plain CDC changes (:meth:`Preparer.shaped_rows`)."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from icetide.ingest import names
from icetide.ingest.evolution import INT_MAX, INT_MIN, Evolution

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


def _kinds(text: Column, name: str, value: Column, j: int) -> list[Column]:
    """How many records give the top-level field ``name`` a value, a number, an integer, a boolean."""
    def kind(t: DataType) -> Column:
        return F.from_json(text, StructType([StructField(name, t, True)]))[name].isNotNull()
    return [F.count_if(value.isNotNull()).alias(f"s_all{j}"), F.count_if(kind(DoubleType())).alias(f"s_num{j}"),
            F.count_if(kind(LongType())).alias(f"s_int{j}"), F.count_if(kind(BooleanType())).alias(f"s_bool{j}")]


def _not_all_strings(shaped: DataFrame, evo: Evolution, strings: list[int], text: Column) -> list[int]:
    """Of the new string fields ``strings`` (indexes into ``evo.added``), those some record of
    ``shaped`` (a record of every shape) gives a number or a boolean: the others are strings in
    every record of the batch."""
    given = [evo.added[i][0].given for i in strings]
    values = names.field_texts(text, given)
    aggs = [a for j, p in enumerate(given) for a in _kinds(text, p[0], values[p], j)]
    r = shaped.agg(*aggs).first()
    assert r is not None
    return [i for j, i in enumerate(strings) if r[f"s_num{j}"] or r[f"s_int{j}"] or r[f"s_bool{j}"]]


def check_values(rows: DataFrame, evo: Evolution, text: Column | None = None, shaped: DataFrame | None = None
                 ) -> None:
    """Decide value-dependent changes (int overflow, decimal digits, nulls in required fields), and
    the type of each new top-level field that inference made a string (see :func:`_majority`).

    ``text`` is each record's row as JSON text: the record value by default; for CDC tables the row
    inside the change (a Debezium envelope's ``after``/``before``), whose values are the columns'.
    ``shaped``: a record of each shape of ``rows`` and every record of no known shape
    (:func:`icetide.ingest.shapes.inference_sample`); None when the records are not fingerprinted."""
    required = [p for p in evo.required if not p.in_list]
    strings = [i for i, (p, t) in enumerate(evo.added) if isinstance(t, StringType) and len(p.parts) == 1]
    text = F.col("value").cast("string") if text is None else text
    if strings and shaped is not None:
        mixed = _not_all_strings(shaped, evo, strings, text)
        if len(mixed) < len(strings):
            log.debug("new string field(s) %s: strings in every shape, no count over the batch",
                      [evo.added[i][0].name for i in strings if i not in mixed])
        strings = mixed
    if not (evo.int_candidates or evo.decimal_candidates or required or strings):
        return
    values = names.field_texts(text, [*(evo.added[i][0].given for i in strings),
                                      *(p.given for p in evo.int_candidates),
                                      *(p.given for p, _ in evo.decimal_candidates), *(p.given for p in required)])
    aggs: list[Column] = []
    for j, i in enumerate(strings):
        name = evo.added[i][0].given[0]
        aggs += _kinds(text, name, values[(name,)], j)
    for i, p in enumerate(evo.int_candidates):
        v = values[p.given].try_cast("long")
        aggs += [F.min(v).alias(f"imin{i}"), F.max(v).alias(f"imax{i}")]
    for i, (p, _) in enumerate(evo.decimal_candidates):
        v = values[p.given].try_cast("double")
        aggs.append(F.max(F.abs(v)).alias(f"dmax{i}"))
    for i, p in enumerate(required):
        aggs.append(F.count_if(values[p.given].isNull()).alias(f"null{i}"))
    r = rows.agg(*aggs).first()
    assert r is not None
    for i, p in enumerate(evo.int_candidates):
        lo, hi = r[f"imin{i}"], r[f"imax{i}"]
        if (lo is not None and lo < INT_MIN) or (hi is not None and hi > INT_MAX):
            evo.widened.append((p, IntegerType(), LongType()))
    for i, (p, dec) in enumerate(evo.decimal_candidates):
        m = r[f"dmax{i}"]
        if m is None or not math.isfinite(m):
            continue
        digits = len(str(int(m))) if m >= 1 else 1
        if digits > dec.precision - dec.scale and dec.scale + digits <= 38:
            evo.widened.append((p, dec, DecimalType(dec.scale + digits, dec.scale)))
    for i, p in enumerate(required):
        if r[f"null{i}"]:
            evo.optional.append(p)
    for j, i in enumerate(strings):
        chosen = _majority(r[f"s_all{j}"], r[f"s_num{j}"], r[f"s_int{j}"], r[f"s_bool{j}"])
        if chosen is not None:
            path = evo.added[i][0]
            evo.added[i] = (path, chosen)
            log.warning("new column %s: %s, as most of its values are (the others are type_mismatch dead letters)",
                        path.name, chosen.simpleString())


def _majority(present: int, numbers: int, integers: int, booleans: int) -> DataType | None:
    """The type of a new field inference made a string because its values were of mixed kinds:
    when more than half of them are numbers, ``bigint`` (all of those integers) or ``double``; when
    more than half are booleans, ``boolean``. So one outlier record cannot turn a numeric column into
    a string one. None keeps the string (no kind is a majority, or the field was in one record)."""
    if present < 2:
        return None
    if 2 * numbers > present:
        return LongType() if integers == numbers else DoubleType()
    if 2 * booleans > present:
        return BooleanType()
    return None
