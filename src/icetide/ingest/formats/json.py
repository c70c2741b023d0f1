"""JSON values: parsed on the JVM with ``from_json`` (PERMISSIVE) against the table's schema, after
one streaming pass of checks over each value (:mod:`.json_scan`: depth, width, duplicate and
reserved names, UTF-8, and the shape fingerprint known shapes skip inference with).

A record is a dead letter when its value is null or empty, larger than ``max_value_bytes``, not
JSON, not a JSON object, fails a check of :mod:`.json_scan`, or has a field whose type does not
match its column. JSON declares no types: a table's come from inference over the values
(:mod:`icetide.ingest.evolution`). Routing by ``field`` reads the value's text
(:func:`icetide.ingest.routing.raw_value`), so the format has no say in it.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, ClassVar

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

import icetide.ingest.formats.json_scan as json_scan
from icetide.config.source import KafkaSource
from icetide.config.target import CdcSettings
from icetide.ingest import names
from icetide.ingest.decode import CORRUPT, PARSED
from icetide.ingest.formats.base import OK, Parsed, ValueFormat, register
from icetide.ingest.formats.wire import payload

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The dead-letter classes of JSON's parse (the checks' are :mod:`.json_scan`'s)
ERROR_CLASSES = ("null_value", "empty_value", "oversized_value", "malformed_json", "not_a_json_object",
                 "type_mismatch", "too_deep", "too_wide", "duplicate_key", "ambiguous_field", "reserved_field",
                 "invalid_utf8", "non_finite_number", "invalid_field")


@register
class JsonFormat(ValueFormat):
    name: ClassVar[str] = "json"
    error_classes: ClassVar[tuple[str, ...]] = ERROR_CLASSES
    scan_columns: ClassVar[tuple[str, ...]] = (json_scan.SCAN,)

    def __init__(self, source: KafkaSource) -> None:
        self.source = source

    @classmethod
    def of(cls, source: KafkaSource) -> JsonFormat:
        return cls(source)

    def with_scan(self, spark: SparkSession, rows: DataFrame, mine: Column | None) -> DataFrame:
        """Each record's checks and shape, read in one pass (:data:`.json_scan.SCAN`); a batch drops
        the column once it has taken them. Unchanged without icetide's JVM classes."""
        return json_scan.with_scan(spark, rows, self.source, mine)

    def verdict(self, columns: list[str]) -> Column | None:
        return F.col(json_scan.SCAN)["check"] if json_scan.SCAN in columns else None

    def shape(self, columns: list[str]) -> Column | None:
        return F.col(json_scan.SCAN)["shape"] if json_scan.SCAN in columns else None

    def parse_columns(self, spark: SparkSession, schema: StructType, max_value_bytes: int,
                      parsed_name: str = PARSED, cdc: CdcSettings | None = None) -> Parsed:
        """``cdc`` is not read: a JSON change is unwrapped from its text first (:func:`icetide.ingest.cdc.unwrap`)."""
        return Parsed(*json_columns(spark.sparkContext.applicationId, schema.json(), max_value_bytes, parsed_name))

    def unified(self, parsed: Parsed, names_: list[str]) -> Column:
        p = parsed.struct
        return F.when(p.isNotNull(), F.struct(*[p[n].alias(n) for n in names_], F.lit(True).alias(OK),
                                              p[CORRUPT].alias(CORRUPT)))


def shape_column(spark: SparkSession, value: Column, max_depth: int) -> Column | None:
    """A record's shape fingerprint alone (no limits but ``max_depth``); None without the JVM classes."""
    scanned = json_scan.scan(spark, value, max_depth, 1 << 30)
    return None if scanned is None else scanned["shape"]


@functools.lru_cache(maxsize=512)
def json_columns(app: str, schema_json: str, max_value_bytes: int, parsed_name: str = PARSED, wire: bool = False
                   ) -> tuple[Column, Column, Column]:
    """(parsed struct, error class, error message) for one schema, built once: a fan-out writes many
    tables per batch, and building these expressions costs hundreds of JVM calls. The error columns
    read the parsed struct from column ``parsed_name``. ``wire``: the JSON text follows the Confluent
    wire format's 5-byte header (JSON Schema values, :mod:`.json_schema`); the value's size limits
    still count the whole value."""
    schema = StructType.fromJson(json.loads(schema_json))
    text = (payload() if wire else F.col("value")).cast("string")
    if not names.renamed(schema):
        with_corrupt = StructType([*schema.fields, StructField(CORRUPT, StringType())])
        parsed = F.from_json(text, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    else:  # field_names: sanitize: read by the producer's names, then cast to the table's (by position)
        given = names.record_type(schema)
        assert isinstance(given, StructType)
        read = F.from_json(text, StructType([*given.fields, StructField(CORRUPT, StringType())]),
                           {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
        parsed = F.when(read.isNotNull(), F.struct(
            *[read.getField(g.name).cast(f.dataType).alias(f.name) for g, f in zip(given.fields, schema.fields,
                                                                                   strict=True)],
            read.getField(CORRUPT).alias(CORRUPT)))
    p = F.col(parsed_name)
    error_class = (
        F.when(F.col("value").isNull(), F.lit("null_value"))
        .when(F.length("value") == 0, F.lit("empty_value"))
        .when(F.length("value") > max_value_bytes, F.lit("oversized_value"))
        .when(p.isNull(), F.lit("malformed_json"))
        .when(p[CORRUPT].isNotNull(), _corrupt_class(text))
    )
    return (F.when(F.length("value") <= max_value_bytes, parsed), error_class,
            _error_message(text, schema, max_value_bytes, p))


def _corrupt_class(text: Column) -> Column:
    trimmed = F.ltrim(text)
    return (
        F.when(F.get_json_object(text, "$").isNull(), F.lit("malformed_json"))
        .when(~trimmed.startswith("{"), F.lit("not_a_json_object"))
        .otherwise(F.lit("type_mismatch"))
    )


def _error_message(text: Column, schema: StructType, max_value_bytes: int, p: Column) -> Column:
    given = names.field_texts(text, [(names.original(f),) for f in schema.fields])
    mismatched = F.concat_ws(
        ", ",
        *[
            F.when(
                given[(names.original(f),)].isNotNull() & p[f.name].isNull(),
                F.lit(f"{f.name[:64]} (expected {f.dataType.simpleString()})"),
            )
            for f in schema.fields
        ],
    )
    return (
        F.when(F.col("value").isNull(), F.lit("the record has no value (a tombstone)"))
        .when(F.length("value") == 0, F.lit("the record value is empty"))
        .when(
            F.length("value") > max_value_bytes,
            F.concat(F.lit("value of "), F.length("value").cast("string"),
                     F.lit(f" bytes exceeds source.max_value_bytes={max_value_bytes}")),
        )
        .when(p.isNull() | F.get_json_object(text, "$").isNull(), F.lit("value is not valid JSON"))
        .when(~F.ltrim(text).startswith("{"), F.lit("value is JSON but not an object"))
        .when(
            p[CORRUPT].isNotNull(),
            F.concat(F.lit("fields do not match the table schema: "),
                     F.when(mismatched == "", F.lit("(nested value)")).otherwise(mismatched)),
        )
    )
