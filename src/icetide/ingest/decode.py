"""Kafka rows → table rows, or dead letters with a reason.

JSON values are parsed on the JVM with ``from_json`` in PERMISSIVE mode against the table schema.
A record is a dead letter when its value is null or empty, larger than ``max_value_bytes``, not
JSON, not a JSON object, or has a field whose type does not match the schema.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from icetide.config.target import TargetTable
from icetide.ingest import names

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CORRUPT = "_icetide_corrupt"
PARSED = "_icetide_parsed"
ERROR_CLASS = "_icetide_error_class"
ERROR_MESSAGE = "_icetide_error_message"
RAW = "_icetide_raw"
#: The key's original bytes when ``_kafka_key`` holds its decoded text (source.key_format: avro).
RAW_KEY = "_icetide_raw_key"

#: Kafka metadata columns added to each target table (and always to the dead-letter table).
KAFKA_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key")


def with_kafka_columns(kafka_df: DataFrame) -> DataFrame:
    """Rename Spark's Kafka source columns to icetide's ``_kafka_*`` names."""
    cols = [
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").alias("_kafka_key"),
        F.col("value"),
    ]
    if "headers" in kafka_df.columns:
        cols.append(F.col("headers").alias("_kafka_headers"))
    return kafka_df.select(*cols)


#: Every class a dead letter can have.
ERROR_CLASSES = ("null_value", "empty_value", "oversized_value", "malformed_json", "not_a_json_object",
                 "too_deep", "too_wide", "duplicate_key", "invalid_utf8", "non_finite_number",
                 "type_mismatch", "missing_route", "invalid_route", "table_limit", "table_policy",
                 "invalid_field", "ambiguous_field", "reserved_field", "schema_limit",
                 "unknown_operation", "missing_key", "missing_ordering",
                 # Avro (icetide.ingest.formats.avro)
                 "truncated_record", "bad_magic_byte", "unknown_schema_id", "unsupported_schema", "undecodable",
                 "incompatible_schema")


def parse(df: DataFrame, schema: StructType, max_value_bytes: int,
          extra: list[tuple[Column, Column]] | None = None,
          columns: tuple[Column, Column, Column] | None = None) -> DataFrame:
    """Add the parsed struct and, for bad records, an error class and message.

    ``extra``: more (error class, message) checks, in order, for records that parse (a field schema
    evolution refused, a CDC change without a key, ...); they may refer to the parsed struct.
    ``columns``: the (parsed, error class, message) of the record format (see
    :mod:`icetide.ingest.formats`); JSON's by default.
    """
    app = df.sparkSession.sparkContext.applicationId  # columns are JVM objects of one application
    parsed, error_class, message = columns or parse_columns(app, schema.json(), max_value_bytes)
    for extra_class, extra_message in extra or []:
        message = F.when(error_class.isNull() & extra_class.isNotNull(), extra_message).otherwise(message)
        error_class = F.coalesce(error_class, extra_class)
    # The message repeats the checks (and re-reads the JSON): only records with an error pay for it.
    return (df.withColumn(PARSED, parsed).withColumn(ERROR_CLASS, error_class)
            .withColumn(ERROR_MESSAGE, F.when(F.col(ERROR_CLASS).isNotNull(), message)))


@functools.lru_cache(maxsize=512)
def parse_columns(app: str, schema_json: str, max_value_bytes: int, parsed_name: str = PARSED
                   ) -> tuple[Column, Column, Column]:
    """(parsed struct, error class, error message) for one schema, built once: a fan-out writes many
    tables per batch, and building these expressions costs hundreds of JVM calls. The error columns
    read the parsed struct from column ``parsed_name``."""
    schema = StructType.fromJson(json.loads(schema_json))
    text = F.col("value").cast("string")
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


def is_good() -> Column:
    return F.col(ERROR_CLASS).isNull()


def good_columns(schema: StructType, kafka_columns: bool, parsed: str = PARSED) -> dict[str, Column]:
    """A table's columns from a parsed record (column ``parsed``): its fields, then the Kafka
    metadata columns."""
    cols = {f.name: F.col(parsed)[f.name] for f in schema.fields}
    if kafka_columns:
        cols.update({c: F.col(c) for c in KAFKA_COLUMNS[:-1]})
        cols["_kafka_key"] = F.col("_kafka_key").cast("string")
    return cols


def good_rows(parsed: DataFrame, schema: StructType, kafka_columns: bool, keep: list[str] | None = None) -> DataFrame:
    cols = [c.alias(name) for name, c in good_columns(schema, kafka_columns).items()]
    return parsed.select(*cols, *[F.col(c) for c in keep or []])


HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def dead_letter_rows(parsed: DataFrame, pipeline: str, target_table: Column,
                     error_class: str = ERROR_CLASS, error_message: str = ERROR_MESSAGE) -> DataFrame:
    headers = F.col("_kafka_headers") if "_kafka_headers" in parsed.columns else F.lit(None).cast(HEADERS_TYPE)
    raw = F.col(RAW) if RAW in parsed.columns else F.col("value")  # CDC rows keep the original bytes there
    key = F.col(RAW_KEY) if RAW_KEY in parsed.columns else F.col("_kafka_key")
    return parsed.select(
        *[F.col(c) for c in KAFKA_COLUMNS[:-1]], key.alias("_kafka_key"),
        raw.alias("value"),
        headers.alias("_kafka_headers"),
        F.lit(pipeline).alias("pipeline"),
        target_table.alias("target_table"),
        F.col(error_class).alias("error_class"),
        F.col(error_message).alias("error_message"),
        F.current_timestamp().alias("dead_lettered_at"),
    )


DEAD_LETTER_SCHEMA = StructType.fromJson(
    {
        "type": "struct",
        "fields": [
            {"name": n, "type": t, "nullable": True, "metadata": {}}
            for n, t in [
                ("_kafka_topic", "string"), ("_kafka_partition", "integer"), ("_kafka_offset", "long"),
                ("_kafka_timestamp", "timestamp"), ("_kafka_key", "binary"), ("value", "binary"),
                ("pipeline", "string"), ("target_table", "string"), ("error_class", "string"),
                ("error_message", "string"), ("dead_lettered_at", "timestamp"),
            ]
        ] + [
            {"name": "_kafka_headers", "nullable": True, "metadata": {},
             "type": {"type": "array", "containsNull": True, "elementType": {"type": "struct", "fields": [
                 {"name": "key", "type": "string", "nullable": True, "metadata": {}},
                 {"name": "value", "type": "binary", "nullable": True, "metadata": {}}]}}}
        ],
    }
)


def skipped_tombstone(target: TargetTable) -> Column:
    """Per dead-letter row (:func:`dead_letter_rows`): a Kafka tombstone that is skipped (counted),
    not written. Under ``route.by: record_name`` always (a null value names no record type, so it
    has no table); on append tables when ``target.on_tombstone: skip``."""
    classes = ["missing_route"] if target.route is not None and target.route.by == "record_name" else []
    if target.on_tombstone == "skip":
        classes.append("null_value")
    return F.col("value").isNull() & F.col("error_class").isin(classes) if classes else F.lit(False)


def dead_letter_counts(rows: DataFrame) -> tuple[dict[str | None, dict[str, int]], int]:
    """Dead-letter rows (with ``_tomb``: :func:`skipped_tombstone`) counted per target table and
    class, and the Kafka tombstones among them that are skipped instead."""
    by_table: dict[str | None, dict[str, int]] = {}
    tombstones = 0
    for table, cls, tomb, k in rows.groupBy("target_table", "error_class", "_tomb").count().collect():
        if tomb:
            tombstones += int(k)
        elif k:
            by_table.setdefault(table, {})[str(cls)] = int(k)
    return by_table, tombstones
