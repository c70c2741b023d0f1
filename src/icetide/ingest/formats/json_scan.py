"""JSON's record checks before anything parses a record: depth, width, duplicate keys, UTF-8.

A record nested a few hundred levels deep, or with a hundred thousand fields, can exhaust a JVM
stack or blow up schema inference long before any per-field rule sees it. icetide's JVM UDF
``io.icetide.spark.JsonScan`` reads each value once with a streaming parser (no recursion), takes
its shape (:meth:`.json.JsonFormat.shape`) in the same pass, and flags, as dead letters that never
reach inference, routing or a table:

- ``too_deep``: objects/arrays nested more than ``source.max_depth`` levels;
- ``too_wide``: more than ``source.max_fields`` field names in the record (all depths);
- ``duplicate_key``: one field name twice in one object (which value wins is undefined in JSON);
- ``ambiguous_field``: two field names of one object equal ignoring case (Spark and Iceberg
  resolve column names ignoring case; against the table's columns, evolution applies the same rule);
- ``reserved_field``: a top-level name starting with ``_kafka_``, ``_icetide_`` or ``_cdc_``
  (icetide's own columns), in any case;
- ``invalid_utf8``: bytes that are not well-formed UTF-8, overlong forms and encoded surrogates included
  (Spark would silently replace them with U+FFFD);
- ``non_finite_number``: ``NaN``/``Infinity`` as a number (not JSON; Spark's ``from_json`` would take
  them but its ``get_json_object``, used for routing, reads the record as not JSON at all);
- ``invalid_field``: an empty field name (Spark's inference drops it: its value would be lost).

Malformed JSON and non-objects pass through here: the parse classifies them as before.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from icetide.config.source import KafkaSource
from icetide.ingest.names import RESERVED_PREFIXES
from icetide.spark.session import has_class

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

JVM_CLASS = "io.icetide.spark.JsonScan"
#: The column holding each JSON record's scan: ``struct<check string, shape bigint>``.
SCAN = "_icetide_scan"
#: Per Spark application and limits: the JVM UDF, or None when icetide's classes are not loaded.
_UDFS: dict[tuple[str, int, int], Any] = {}


def scan(spark: SparkSession, value: Column, max_depth: int, max_fields: int) -> Column | None:
    """``struct<check, shape>`` of ``value`` (binary), read once by the JVM's ``JsonScan``: ``check``
    is ``"<class>\t<message>"`` for a record that must never be parsed, null when it passes; ``shape``
    its fingerprint (see :mod:`icetide.ingest.shapes`). None when icetide's JVM classes are not
    loaded (then only the parse's own checks apply, and every batch is inferred). Store it in a
    column (:data:`SCAN`) before reading its fields: one call a record."""
    key = (spark.sparkContext.applicationId, max_depth, max_fields)
    if key not in _UDFS:
        jvm: Any = spark._jvm
        if has_class(spark, JVM_CLASS):
            prefixes = spark.sparkContext._gateway.new_array(jvm.java.lang.String, len(RESERVED_PREFIXES))  # type: ignore[union-attr]
            for i, prefix in enumerate(RESERVED_PREFIXES):
                prefixes[i] = prefix
            _UDFS[key] = jvm.io.icetide.spark.JsonScan.udf(max_depth, max_fields, prefixes)
        else:
            _UDFS[key] = None
            log.warning("icetide's JVM classes are not loaded (run `icetide setup`): records are not checked "
                        "for depth, width, duplicate keys and UTF-8 before they are parsed")
    udf = _UDFS[key]
    if udf is None:
        return None
    from pyspark.sql.classic.column import Column as ClassicColumn
    from pyspark.sql.classic.column import _to_seq

    return ClassicColumn(udf.apply(_to_seq(spark.sparkContext, [value._jc])))  # type: ignore[attr-defined]


def with_scan(spark: SparkSession, rows: DataFrame, source: KafkaSource, which: Column | None = None) -> DataFrame:
    """``rows`` with :data:`SCAN` (only where ``which`` holds, when given); unchanged without the JVM classes."""
    col = scan(spark, F.col("value"), source.max_depth, source.max_fields)
    if col is None:
        return rows
    return rows.withColumn(SCAN, col if which is None else F.when(which, col))
