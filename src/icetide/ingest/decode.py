"""Kafka rows → table rows, or dead letters with a reason: the columns every format's parse fills
(:mod:`icetide.ingest.formats`), the good rows, and the dead-letter rows and table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from icetide.config.target import TargetTable

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
                 "incompatible_schema",
                 # JSON Schema (icetide.ingest.formats.json_schema)
                 "schema_violation")


def parse(df: DataFrame, columns: tuple[Column, Column, Column],
          extra: list[tuple[Column, Column]] | None = None) -> DataFrame:
    """Add the parsed struct and, for bad records, an error class and message.

    ``columns``: the (parsed, error class, message) of the record format
    (:meth:`icetide.ingest.formats.Formats.parse_columns`). ``extra``: more (error class, message)
    checks, in order, for records that parse (a field schema evolution refused, a CDC change without
    a key, ...); they may refer to the parsed struct.
    """
    parsed, error_class, message = columns
    for extra_class, extra_message in extra or []:
        message = F.when(error_class.isNull() & extra_class.isNotNull(), extra_message).otherwise(message)
        error_class = F.coalesce(error_class, extra_class)
    # The message repeats the checks (and re-reads the JSON): only records with an error pay for it.
    return (df.withColumn(PARSED, parsed).withColumn(ERROR_CLASS, error_class)
            .withColumn(ERROR_MESSAGE, F.when(F.col(ERROR_CLASS).isNotNull(), message)))


def is_good() -> Column:
    return F.col(ERROR_CLASS).isNull()


def good_columns(schema: StructType, kafka_columns: bool, parsed: str = PARSED) -> dict[str, Column]:
    """A table's columns from a parsed record (column ``parsed``): its fields, then the Kafka
    metadata columns."""
    return {**record_columns(schema, parsed), **metadata_columns(kafka_columns)}


def record_columns(schema: StructType, parsed: str = PARSED) -> dict[str, Column]:
    """A record's fields, from its parsed struct (column ``parsed``)."""
    return {f.name: F.col(parsed)[f.name] for f in schema.fields}


def metadata_columns(kafka_columns: bool) -> dict[str, Column]:
    """The Kafka metadata columns a table takes (none unless ``kafka_columns``)."""
    if not kafka_columns:
        return {}
    return {**{c: F.col(c) for c in KAFKA_COLUMNS[:-1]}, "_kafka_key": F.col("_kafka_key").cast("string")}


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
