"""Record formats: how a record's value is checked, routed, typed and decoded.

The seam, one method per stage of a batch (see ``ARCHITECTURE.md``, "The path of one batch"):

- ``with_ids`` and ``resolve``: per batch, before anything reads a value (Avro: each record's schema
  id; the batch's new ids fetched from the registry);
- ``verdict``: ``"<class>\\t<message>"`` for a record that must never reach parsing, else null;
- ``route_value``: the routing value, for the routes the format decides (``field``, ``record_name``);
- ``shape``: a fingerprint of the record's shape, so known shapes skip inference (JSON only);
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
from icetide.ingest.formats.avro import ID, OK, AvroFormat, schema_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ID", "Formats"]


class Formats:
    """The formats one pipeline reads, and per record which one applies."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source
        names = source.formats()
        self.json = "json" in names
        self.avro = AvroFormat(source.schema_registry) if "avro" in names and source.schema_registry else None

    @property
    def mixed(self) -> bool:
        return self.json and self.avro is not None

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
        return rows.withColumn(ID, F.when(self.is_avro(), schema_id()) if self.mixed else schema_id())

    def resolve(self, spark: SparkSession, rows: DataFrame) -> None:
        """Learn the batch's schemas (Avro: its new schema ids, from the registry); ``rows`` has the ids."""
        if self.avro is not None:
            self.avro.resolve(spark, rows.where(F.col(ID).isNotNull()))

    def verdict(self, spark: SparkSession) -> Column | None:
        json_v = checks.verdict(spark, F.col("value"), self.source) if self.json else None
        if self.avro is None:
            return json_v
        avro_v = self.avro.verdict()
        if not self.mixed:
            return avro_v
        return F.when(self.is_avro(), avro_v).otherwise(json_v if json_v is not None else F.lit(None).cast("string"))

    def route_value(self, route: RouteSettings) -> Column | None:
        if self.avro is None:
            return None
        avro_v = self.avro.route_value(route)
        if avro_v is None or not self.mixed:
            return avro_v
        from icetide.ingest.routing import raw_value

        return F.when(self.is_avro(), avro_v).otherwise(raw_value(route))

    def shape(self, spark: SparkSession) -> Column | None:
        if not self.json:
            return None
        col = shapes.column(spark, F.col("value"))
        if col is None or not self.mixed:
            return col
        return F.when(self.is_avro(), F.lit(shapes.UNKNOWN).cast("long")).otherwise(col)

    def declared(self, ids: list[int], cdc: CdcSettings | None = None) -> StructType | None:
        return self.avro.declared(ids, cdc) if self.avro is not None else None

    def parse_columns(self, spark: SparkSession, schema: StructType, max_value_bytes: int,
                      parsed_name: str = decode.PARSED) -> tuple[Column, Column, Column]:
        app = spark.sparkContext.applicationId
        if self.avro is None:
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


