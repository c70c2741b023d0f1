"""Record shapes: JSON schema inference only for records whose shape a table does not fit yet.

Schema evolution needs to know, every batch, whether a table's records carry anything its schema
lacks. Spark's JSON inference answers that by reading every record. A stream's records come in few
shapes (the set of field paths and value kinds, see icetide's JVM class ``io.icetide.spark.JsonScan``),
and two records of the same shape infer to the same schema. So each record gets its shape's 64-bit
fingerprint while the batch is routed; once a table's shapes are known to need no change against
its current schema, a batch made only of those shapes skips inference for that table. A new shape
(a new field at any depth, an integer too wide, a value of another kind), a schema change, or a
table where shapes cannot settle (decimal columns, where inference depends on the digits; CDC
tables of the Debezium format, whose row is a side of the envelope and may come as a JSON string the
shape does not see into; fields evolution refused) is inferred as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, DecimalType, FloatType, IntegerType, MapType, StructField, StructType

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SHAPE = "_icetide_shape"
#: The fingerprint of a record the JVM could not read (always inferred).
UNKNOWN = 0
#: Deeper than this a record's shape is UNKNOWN (``JsonScan.MAX_SHAPE_DEPTH``).
MAX_DEPTH = 64
#: Distinct shapes a table may show in one batch and still settle; beyond that it is inferred.
MAX_SHAPES = 256


#: Besides one record of each shape, inference reads 1 record in this many (by Kafka position), so
#: a string field's type (timestamp or string: the one thing inference reads from a value the shape
#: does not tell) is decided by many records, not one.
SPREAD = 64


def column(spark: SparkSession, value: Column) -> Column | None:
    """The shape of ``value`` (binary JSON) alone, or None when icetide's JVM classes are not loaded.
    A batch takes it with JSON's record checks, in one read of each record (:mod:`icetide.ingest.formats.json`)."""
    from icetide.ingest.formats.json import shape_column

    return shape_column(spark, value, MAX_DEPTH)


def inference_sample(rows: DataFrame, table_col: str, whole: list[str]) -> DataFrame:
    """What schema inference needs to read of fingerprinted ``rows``: one record of each (table,
    shape), every record whose shape is unknown (malformed, too deep, trailing text), 1 in
    :data:`SPREAD` of the others, and every record of the tables in ``whole``. Records of one shape
    infer to one schema except for which strings read as timestamps, which the spread samples;
    value-dependent decisions (integer width, decimal digits, nulls, mixed kinds) are still made
    over every record
    (:func:`icetide.ingest.value_checks.check_values`)."""
    shape, table = F.col(SHAPE), F.col(table_col)
    known = shape.isNotNull() & (shape != F.lit(UNKNOWN))
    firsts = rows.where(known & ~table.isin(whole) if whole else known).dropDuplicates([table_col, SHAPE])
    spread = F.pmod(F.xxhash64("_kafka_partition", "_kafka_offset"), F.lit(SPREAD)) == 0
    keep = ~known | spread
    if whole:
        keep = keep | table.isin(whole)
    return firsts.unionByName(rows.where(keep))


def _anywhere(t: DataType, hit: Callable[[DataType], bool], field: Callable[[StructField], bool]) -> bool:
    """Whether ``hit`` holds for ``t`` or a type inside it, or ``field`` for a struct field at any depth."""
    if hit(t):
        return True
    if isinstance(t, StructType):
        return any(field(f) or _anywhere(f.dataType, hit, field) for f in t.fields)
    if isinstance(t, ArrayType):
        return _anywhere(t.elementType, hit, field)
    if isinstance(t, MapType):
        return _anywhere(t.keyType, hit, field) or _anywhere(t.valueType, hit, field)
    return False


def settles(schema: StructType) -> bool:
    """Whether records of a known shape always infer the same against ``schema`` (no decimals)."""
    return not _anywhere(schema, lambda t: isinstance(t, DecimalType), lambda f: False)


def settles_unseen(schema: DataType) -> bool:
    """Whether a table of ``schema`` can settle shapes it has not seen from one kept value each (the
    one pass's ``_fits``): besides :func:`settles`, no ``int`` or ``float`` column and no required
    field, which only every record's values decide (``int`` width, ``float`` against JSON's doubles,
    nulls), so a table with one is left to the usual path rather than written and then aborted."""
    return not _anywhere(schema, lambda t: isinstance(t, (DecimalType, IntegerType, FloatType)),
                         lambda f: not f.nullable)


@dataclass
class KnownShapes:
    """Per table: the schema its shapes were settled against, and those shapes."""

    _known: dict[str, tuple[str, frozenset[int]]] = field(default_factory=dict)

    def covers(self, table: str, schema: StructType, shapes: frozenset[int] | None) -> bool:
        """True when every shape of the batch is known to need no change to ``schema``."""
        if shapes is None:  # too many to list, or not fingerprinted
            return False
        known = self._known.get(table)
        return known is not None and known[0] == schema.json() and shapes <= known[1]

    def known(self, table: str, schema: StructType) -> frozenset[int]:
        """The shapes known to fit ``schema`` for ``table`` (none after a schema change)."""
        known = self._known.get(table)
        return known[1] if known is not None and known[0] == schema.json() else frozenset()

    def knows(self, table: str, schema: StructType) -> bool:
        """Whether some shapes are known to fit ``schema`` for ``table``."""
        known = self._known.get(table)
        return known is not None and known[0] == schema.json()

    def settle(self, table: str, schema: StructType, shapes: frozenset[int] | None) -> None:
        """Remember that ``shapes`` fit ``schema`` (the table's schema after this batch's evolution)."""
        if shapes is None or not settles(schema):
            self._known.pop(table, None)
            return
        shapes = shapes - {UNKNOWN}
        known = self._known.get(table)
        if known is not None and known[0] == schema.json():
            shapes = shapes | known[1]
        if len(shapes) > 4 * MAX_SHAPES:  # a stream that never settles: start over rather than grow
            shapes = frozenset()
        self._known[table] = (schema.json(), frozenset(shapes))

    def forget(self, table: str | None = None) -> None:
        if table is None:
            self._known.clear()
        else:
            self._known.pop(table, None)
