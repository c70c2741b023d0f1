"""Record formats: how a record's value is checked, routed, typed and decoded.

The seam, one method per stage of a batch (see ``ARCHITECTURE.md``, "The path of one batch"):

- ``with_ids`` and ``resolve``: per batch, before anything reads a value (Avro: each record's schema
  id; the batch's new ids fetched from the registry);
- ``verdict``: ``"<class>\\t<message>"`` for a record that must never reach parsing, else null;
- ``route_value``: the routing value, for the routes the format decides (``field``, ``record_name``);
- ``with_scan``: JSON's checks and shape, read in one pass; ``shape``: each record's fingerprint, so
  known shapes skip inference (JSON only);
- ``declared``: a table's record type when the format declares it (Avro: from the registry), else
  the table's type comes from inference over the JSON records (:mod:`icetide.ingest.evolution`);
- ``parse_columns``: (parsed struct with the table's columns, error class, error message).

JSON's rules live where they always did (:mod:`icetide.ingest.checks`, :mod:`~icetide.ingest.shapes`,
:mod:`~icetide.ingest.evolution`, :mod:`~icetide.ingest.decode`); Avro's in :mod:`.avro`. A third
format (Protobuf or JSON Schema through the registry) is one module with the same methods, a
``source.format`` value, and a branch in :class:`Formats`.

:class:`Formats` is what the rest of ingest talks to: with ``source.topic_formats`` one batch can
hold records of both formats, and every column it returns picks per record by topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from icetide.config.source import KafkaSource
from icetide.config.target import CdcSettings, RouteSettings
from icetide.ingest import checks, decode, shapes
from icetide.ingest.formats.avro import ID, KEY_ID, KEY_TEXT, OK, AvroFormat, schema_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ID", "Formats"]


class Formats:
    """The formats one pipeline reads, and per record which one applies."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source
        names = source.formats()
        self.json = "json" in names
        self.avro = AvroFormat(source.schema_registry) if source.needs_registry() and source.schema_registry else None
        self.avro_values = "avro" in names
        self.avro_keys = source.key_format == "avro"

    @property
    def mixed(self) -> bool:
        """JSON and Avro values in one pipeline (by topic)."""
        return self.json and self.avro_values

    def is_avro(self) -> Column:
        """Per record: whether its topic is read as Avro."""
        out = F.lit(self.source.format == "avro")
        for pattern, fmt in reversed(list(self.source.topic_formats.items())):
            topic = F.col("_kafka_topic")
            hit = (topic == F.lit(pattern)) | topic.rlike("^(?:" + pattern + r")\z")
            out = F.when(hit, F.lit(fmt == "avro")).otherwise(out)
        return out

    # -- the stages -------------------------------------------------------------------------------
    def with_ids(self, rows: DataFrame) -> DataFrame:
        """Add what later stages read per record (Avro: the schema id)."""
        if self.avro is None:
            return rows
        if self.avro_keys:
            rows = rows.withColumn(KEY_ID, schema_id("_kafka_key"))
        if not self.avro_values:
            return rows
        return rows.withColumn(ID, F.when(self.is_avro(), schema_id()) if self.mixed else schema_id())

    def resolve(self, spark: SparkSession, rows: DataFrame) -> None:
        """Learn the batch's schemas (Avro: its new schema ids, from the registry); ``rows`` has the ids."""
        if self.avro is not None and self.avro_values:
            self.avro.resolve(spark, rows.where(F.col(ID).isNotNull()))
        if self.avro is not None and self.avro_keys:
            self.avro.resolve_keys(rows)

    def with_keys(self, rows: DataFrame) -> DataFrame:
        """Avro keys: each record's key as JSON text (before the verdict, which refuses keys that do not decode)."""
        return rows.withColumn(KEY_TEXT, self.avro.key_text()) if self.avro is not None and self.avro_keys else rows

    def keys_as_text(self, rows: DataFrame) -> DataFrame:
        """Avro keys: ``_kafka_key`` becomes the key's JSON text; the original bytes stay for dead letters."""
        if self.avro is None or not self.avro_keys:
            return rows
        return (rows.withColumn(decode.RAW_KEY, F.col("_kafka_key"))
                .withColumn("_kafka_key", F.col(KEY_TEXT).cast("binary")))

    def with_scan(self, spark: SparkSession, rows: DataFrame) -> DataFrame:
        """JSON: each record's checks and shape, read in one pass (:data:`checks.SCAN`), for
        :meth:`verdict` and :meth:`shape`; a batch drops the column once it has taken them."""
        if not self.json:
            return rows
        return checks.with_scan(spark, rows, self.source, ~self.is_avro() if self.mixed else None)

    def verdict(self, spark: SparkSession, columns: list[str]) -> Column | None:
        """``columns``: the batch's (with :data:`checks.SCAN` when :meth:`with_scan` could add it)."""
        json_v = F.col(checks.SCAN)["check"] if self.json and checks.SCAN in columns else None
        value_v = json_v
        if self.avro is not None and self.avro_values:
            avro_v = self.avro.verdict()
            value_v = avro_v if not self.mixed else F.when(self.is_avro(), avro_v).otherwise(
                json_v if json_v is not None else F.lit(None).cast("string"))
        if self.avro is None or not self.avro_keys:
            return value_v
        key_v = self.avro.key_verdict()
        return key_v if value_v is None else F.coalesce(value_v, key_v)

    def route_value(self, route: RouteSettings) -> Column | None:
        if self.avro is None or not self.avro_values:
            return None
        avro_v = self.avro.route_value(route)
        if avro_v is None or not self.mixed:
            return avro_v
        from icetide.ingest.routing import raw_value

        return F.when(self.is_avro(), avro_v).otherwise(raw_value(route))

    def shape(self, columns: list[str]) -> Column | None:
        if not self.json or checks.SCAN not in columns:
            return None
        col = F.col(checks.SCAN)["shape"]
        if not self.mixed:
            return col
        return F.when(self.is_avro(), F.lit(shapes.UNKNOWN).cast("long")).otherwise(col)

    def declared(self, ids: list[int], cdc: CdcSettings | None = None) -> StructType | None:
        return self.avro.declared(ids, cdc) if self.avro is not None and self.avro_values else None

    def parse_columns(self, spark: SparkSession, schema: StructType, max_value_bytes: int,
                      parsed_name: str = decode.PARSED) -> tuple[Column, Column, Column]:
        app = spark.sparkContext.applicationId
        if self.avro is None or not self.avro_values:
            return decode.parse_columns(app, schema.json(), max_value_bytes, parsed_name)
        a = self.avro.parse_columns(schema, max_value_bytes, parsed_name)
        if not self.mixed:
            return a
        j = decode.parse_columns(app, schema.json(), max_value_bytes, parsed_name)
        names = [f.name for f in schema.fields]

        def unified(p: Column, ok: Column, corrupt: Column) -> Column:
            return F.when(p.isNotNull(), F.struct(*[p[n].alias(n) for n in names], ok.alias(OK),
                                                  corrupt.alias(decode.CORRUPT)))

        parsed = F.when(self.is_avro(), unified(a[0], a[0][OK], F.lit(None).cast("string"))).otherwise(
            unified(j[0], F.lit(True), j[0][decode.CORRUPT]))
        is_avro = self.is_avro()
        return parsed, F.when(is_avro, a[1]).otherwise(j[1]), F.when(is_avro, a[2]).otherwise(j[2])


