"""Avro values in the Confluent wire format (byte 0, a 4-byte big-endian schema id, Avro binary),
decoded on the executors by Spark's ``from_avro``.

Per batch, the driver lists the batch's schema ids (one small job over the batch) and fetches the ids it has not
seen from the registry (:mod:`.registry`, cached for the run). Each record is decoded with its own writer schema and
nothing else: never reshaped by another version of its subject, so what it holds does not depend on which versions
exist, on the subject it came through, or on a restart. A table's type is the union of the versions it has seen
(:meth:`AvroFormat.declared`, evolution never drops a column); the decoded record is projected by name onto the
table's columns (:func:`.avro_rows.project`), and an id whose types conflict with the table's is refused as a whole
(``incompatible_schema``). References are written out and a top-level union of records is read as one id per member
(:mod:`.avro_refs`, :meth:`AvroFormat.with_scan`).

A schema is data from outside: its defaults are never read (a record decodes with its own writer schema, so they are
dropped from the schema ``from_avro`` gets: registries accept defaults Avro's strict parser refuses), it is checked
once on the driver with the JVM's own parser and type conversion, and one that fails anywhere is refused
(``unsupported_schema``, with the reason); it never stops the run.

``from_avro`` in PERMISSIVE mode turns a payload it cannot decode into a row of nulls, which would land silently.
Every reader schema therefore carries one more field, ``__icetide_ok`` (boolean, default true), that no writer has:
Avro resolution fills it for every record that decodes, and a record it is null for is a dead letter
(``undecodable``), never a row.

Dead-letter classes: ``truncated_record`` (shorter than the 5-byte header), ``bad_magic_byte``, ``unknown_schema_id``
(the registry answers 404), ``unsupported_schema`` (recursive, a missing reference, not a record, … see
:mod:`.avro_types`), ``undecodable``, ``incompatible_schema``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StringType, StructField, StructType

import icetide.ingest.formats.avro_refs as avro_refs
import icetide.ingest.formats.avro_rows as avro_rows
import icetide.ingest.formats.avro_types as avro_types
from icetide.config.registry import SchemaRegistry
from icetide.config.source import KafkaSource
from icetide.config.target import CdcSettings, RouteSettings
from icetide.ingest import cdc as cdc_rules
from icetide.ingest.decode import CORRUPT, PARSED
from icetide.ingest.formats.avro_keys import KEY_ID as KEY_ID
from icetide.ingest.formats.avro_keys import KEY_TEXT as KEY_TEXT
from icetide.ingest.formats.avro_keys import Keys, with_sentinel
from icetide.ingest.formats.avro_refs import MAX_MEMBERS
from icetide.ingest.formats.avro_rows import OK as OK
from icetide.ingest.formats.avro_rows import has_path, row_type
from icetide.ingest.formats.base import Parsed, ValueFormat, register
from icetide.ingest.formats.registry import RegistryClient
from icetide.ingest.formats.wire import ID as ID
from icetide.ingest.formats.wire import UNKNOWN_RETRY_S as UNKNOWN_RETRY_S
from icetide.ingest.formats.wire import ids_of, payload, registered_text, value_faults, with_ids
from icetide.ingest.formats.wire import learn as wire_learn
from icetide.ingest.formats.wire import schema_id as schema_id
from icetide.ingest.formats.wire import verdict as wire_verdict

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: In a CDC table's parsed struct: the change's operation and ordering value, as the envelope gives them.
CDC_OP, CDC_ORDERING = "__icetide_op", "__icetide_ordering"
ERROR_CLASSES = ("truncated_record", "bad_magic_byte", "unknown_schema_id", "unsupported_schema", "undecodable",
                 "incompatible_schema")


@dataclass
class Decoding:
    """How one schema id is decoded: with its own writer schema (plus the sentinel field), then its
    semantic conversions; ``struct`` is the decoded record's type."""

    writer: avro_types.WriterSchema
    member: int | None = None  # a member of a top-level union: its record follows the member's index (one byte)

    @property
    def struct(self) -> StructType:
        return self.writer.struct

    def column(self) -> Column:
        from pyspark.sql.avro.functions import from_avro

        w = self.writer
        data = payload() if self.member is None else F.substring(F.col("value"), 7, 2**31 - 1)
        decoded = from_avro(data, w.text, {"mode": "PERMISSIVE", "avroSchema": with_sentinel(w.schema),
                                                    **avro_types.SPARK_OPTIONS})
        return avro_rows.converted(decoded, w.decoded_struct, w.conversions)


@register
@dataclass
class AvroFormat(ValueFormat):
    """The Avro format of one pipeline run: the schemas seen so far and how each id is decoded."""

    name: ClassVar[str] = "avro"
    error_classes: ClassVar[tuple[str, ...]] = ("null_value", "empty_value", "oversized_value", *ERROR_CLASSES)
    declares_types: ClassVar[bool] = True
    decodes_envelopes: ClassVar[bool] = True

    registry: SchemaRegistry
    client: RegistryClient = field(init=False)
    decodings: dict[int, Decoding] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)  # id → why (unsupported_schema)
    unknown: dict[int, float] = field(default_factory=dict)  # id the registry did not know → when (clock)
    batch_ids: list[int] = field(default_factory=list)
    #: top-level unions of records: schema id → how many members (each decoded as its own id, :func:`member_id`)
    unions: dict[int, int] = field(default_factory=dict)
    keys: Keys = field(default_factory=Keys)  # Avro keys (source.key_format: avro)
    clock: Callable[[], float] = time.monotonic
    frozen: float | None = None  # the clock of expect_known, for the same batch's learn

    def __post_init__(self) -> None:
        self.client = RegistryClient(self.registry)

    @classmethod
    def of(cls, source: KafkaSource) -> AvroFormat:
        assert source.schema_registry is not None, "the config check requires a registry for Avro"
        return cls(source.schema_registry)

    # -- per batch --------------------------------------------------------------------------------
    def with_ids(self, rows: DataFrame, mine: Column | None) -> DataFrame:
        """Each record's schema id (:data:`ID`; null when not in the wire format, or not Avro's record)."""
        return with_ids(rows, mine)

    def resolve(self, spark: SparkSession, rows: DataFrame, mine: Column | None = None) -> None:
        """Learn every schema id of the batch's Avro records (waits out a registry outage; see :mod:`.registry`)."""
        self.learn(ids_of(rows, mine), lambda w: spark_accepts(spark, w))

    def registry_client(self) -> RegistryClient:
        return self.client

    def learn(self, ids: list[int], check: Callable[[avro_types.WriterSchema], None]) -> None:
        """Fetch the ids not seen yet (``check``: the JVM's word on a writer schema; see :func:`.wire.learn`)."""
        def make(sid: int) -> list[Decoding]:
            writers, union = self._writers(sid)
            for w in writers:
                check(w)
            return [Decoding(w, k if union else None) for k, w in enumerate(writers)]

        known = {*self.decodings, *self.unions}
        now, self.frozen = (self.frozen if self.frozen is not None else self.clock()), None
        for sid, got in wire_learn(ids, known, self.refused, self.unknown, now, make).items():
            if got[0].member is None:
                self.decodings[sid] = got[0]
                continue
            self.unions[sid] = len(got)
            self.decodings.update({member_id(sid, k): d for k, d in enumerate(got)})
        self.batch_ids = [*ids, *(member_id(s, k) for s in ids for k in range(self.unions.get(s, 0)))]

    def expect_known(self) -> bool:
        """Take every id learned so far (decoded, refused, unknown to the registry, union members) as
        the batch's, for columns built before the batch's ids are listed; False when none is. An id
        the registry did not know whose retry is due is left out (not learned: its records keep
        their table, whose one pass is then aborted), and the batch's :meth:`learn` asks with this
        moment's clock, so it cannot learn an id these columns took as unknown."""
        self.frozen = now = self.clock()
        unknown = {i for i, t in self.unknown.items() if now - t < UNKNOWN_RETRY_S}
        self.batch_ids = sorted({*self.decodings, *self.unions, *self.refused, *unknown})
        return bool(self.decodings)

    def with_scan(self, spark: SparkSession, rows: DataFrame, mine: Column | None) -> DataFrame:
        """A record of a top-level union of records takes its member's id (:func:`member_id`, from
        the member's index, the payload's first byte), so each member is typed, routed and decoded
        as a record of its own; a record naming no member keeps the union's id (``undecodable``)."""
        unions = {s: self.unions[s] for s in self.batch_ids if s in self.unions}
        if not unions:
            return rows
        sid = F.col(ID)
        first = F.conv(F.hex(F.substring(F.col("value"), 6, 1)), 16, 10).cast("long")
        k = F.floor(first / 2)
        out = sid
        for s, n in sorted(unions.items()):
            out = F.when((sid == F.lit(s)) & (first % 2 == 0) & (k < n), F.lit(-s * MAX_MEMBERS - 1) - k).otherwise(out)
        return rows.withColumn(ID, out if mine is None else F.when(mine, out).otherwise(sid))

    def label(self, i: int) -> str:
        """How messages name id ``i``: a schema id, or a union member's."""
        if i >= 0:
            return f"schema id {i}"
        s, k = divmod(-i - 1, MAX_MEMBERS)
        d = self.decodings.get(i)
        return f"schema id {s} (union member {k}{': ' + d.writer.full_name if d is not None else ''})"

    def resolve_keys(self, rows: DataFrame) -> None:
        """Learn the batch's key schema ids (see :mod:`.avro_keys`)."""
        self.keys.resolve(self.client, rows)

    def key_text(self) -> Column:
        return self.keys.text()

    def key_verdict(self) -> Column:
        return self.keys.verdict()

    def _writers(self, sid: int) -> tuple[list[avro_types.WriterSchema], bool]:
        """The writer schemas of id ``sid``: its own, or one per member of a top-level union (and whether
        it is one); references written out (:mod:`.avro_refs`)."""
        refs: list[Any] = []
        text = registered_text(self.client, sid, "AVRO", "Avro (source.format: avro)", "its types inlined", refs)
        schemas, union = avro_refs.resolved(self.client, sid, text, refs)
        semantic = self.registry.semantic_types == "convert"
        return [avro_types.parse(sid, json.dumps(s) if refs or union else text, semantic) for s in schemas], union

    # -- columns ----------------------------------------------------------------------------------
    def with_decoded(self, rows: DataFrame) -> DataFrame:
        """Each record decoded once, into the column of its schema id (:func:`decoded_column`), for
        :meth:`parse_columns`: as one expression per table column (``from_avro`` in a CASE branch,
        which common-subexpression elimination does not share) every column would decode it again."""
        decoded = self.decoding_columns()
        return rows.withColumns(decoded) if decoded else rows

    def decoding_columns(self) -> dict[str, Column]:  # with_decoded's, by name
        return {decoded_column(i): F.when(F.col(ID) == F.lit(i), self.decodings[i].column())
                for i in self.batch_ids if i in self.decodings}

    def columns_key(self) -> tuple[Any, ...]:  # what the batch's columns depend on (Formats.columns_key)
        ids = tuple((i, d.member, d.writer.text) if (d := self.decodings.get(i)) else (i,) for i in self.batch_ids)
        return ids, tuple(sorted(self.refused)), tuple(sorted(self.unknown)), self.registry.semantic_types

    def decoded_columns(self) -> list[str]:
        return [decoded_column(i) for i in self.batch_ids if i in self.decodings]

    def verdict(self, columns: list[str] | None = None) -> Column:
        """``"<class>\\t<message>"`` for records that cannot be decoded at all; null otherwise."""
        out = wire_verdict(self.batch_ids, self.unknown, self.refused, "Avro", self.name)
        left = [s for s in self.batch_ids if s in self.unions]  # with_scan gave the others their member's id
        return out.when(F.col(ID).isin(left), F.concat(
            F.lit("undecodable\tthe payload names no member of the union of records of schema id "),
            F.col(ID).cast("string"))) if left else out

    def route_value(self, route: RouteSettings) -> Column | None:
        """The routing value of ``record_name`` and ``field`` routes (None: the format has no say)."""
        sid = F.col(ID)
        if route.by == "record_name":
            out = F.lit(None).cast("string")
            for i in self.batch_ids:
                if i in self.decodings:
                    name = record_route_value(self.decodings[i].writer.full_name)
                    out = F.when(sid == F.lit(i), F.lit(name)).otherwise(out)
            return out
        if route.by == "field":
            assert route.name is not None
            out = F.lit(None).cast("string")
            for i in self.batch_ids:
                d = self.decodings.get(i)
                if d is None or not has_path(d.struct, route.name.split(".")):
                    continue
                value = d.column()
                for part in route.name.split("."):
                    value = value[part]
                out = F.when(sid == F.lit(i), value.cast("string")).otherwise(out)
            return out
        return None

    def declared(self, ids: list[int], cdc: CdcSettings | None = None) -> StructType | None:
        """The record type of the table fed by ``ids``: every field of their decoded rows."""
        types = [t for i in sorted(ids, key=writer_order) if i in self.decodings
                 and (t := row_type(self.decodings[i].struct, cdc)) is not None]
        return avro_types.merged(types) if types else None

    def carries(self, parts: tuple[str, ...], cdc: CdcSettings | None) -> Column:
        """The records whose writer schema declares the field at ``parts`` (a field a table policy
        refused: every record of such a version is a dead letter, as a JSON record with the key is)."""
        ids = [i for i in self.batch_ids if (d := self.decodings.get(i)) is not None
               and (row := row_type(d.struct, cdc)) is not None and avro_rows.declares(row, parts)]
        return F.col(ID).isin(ids) if ids else F.lit(False)

    def parse_columns(self, spark: SparkSession | None, schema: StructType, max_value_bytes: int,
                      parsed_name: str = PARSED, cdc: CdcSettings | None = None) -> Parsed:
        """(parsed struct: the table's columns plus ``__icetide_ok`` and, for CDC, the change's
        operation and ordering; error class; error message)."""
        sid = F.col(ID)
        rows, conflicts = self._rows(schema, cdc)
        parsed = F.lit(None).cast(StructType([*schema.fields, *self._extra(cdc)]))
        for i, cols in rows.items():
            decoded = F.col(decoded_column(i))
            parsed = F.when(sid == F.lit(i), F.when(decoded.isNotNull(), F.struct(*cols))).otherwise(parsed)
        error_class, message = self._faults(F.col(parsed_name)[OK], conflicts, max_value_bytes, cdc)
        return Parsed(F.when(F.length(F.col("value")) <= max_value_bytes, parsed), error_class, message)

    def parse_fields(self, schema: StructType, max_value_bytes: int) -> tuple[dict[str, Column], Column]:
        """:meth:`parse_columns` of an append table as one column per table column, read straight from
        the decoded records (:meth:`with_decoded`), and the error class: no struct is built per record.
        A good record's columns, and whether a record is good, are what :meth:`parse_columns` gives."""
        sid = F.col(ID)
        rows, conflicts = self._rows(schema, None)
        fields: dict[str, Column] = {}
        for k, f in enumerate([*schema.fields, *self._extra(None)]):
            out = F.lit(None).cast(f.dataType)  # CASE over the ids (no id fits: null)
            for i, cols in rows.items():
                out = F.when(sid == F.lit(i), cols[k]).otherwise(out)
            fields[f.name] = out.alias(f.name)
        return fields, self._faults(fields.pop(OK), conflicts, max_value_bytes, None)[0]

    @staticmethod
    def _extra(cdc: CdcSettings | None) -> list[StructField]:
        return [StructField(OK, BooleanType(), True), *([] if cdc is None else [StructField(
            CDC_OP, StringType(), True), StructField(CDC_ORDERING, cdc_rules.ordering_type(cdc), True)])]

    def _rows(self, schema: StructType, cdc: CdcSettings | None) -> tuple[dict[int, list[Column]], dict[int, str]]:
        """Per schema id of the batch whose records fit the table: a record's values as the table's
        columns, then ``__icetide_ok`` and, for CDC, the operation and ordering (each read from the
        id's decoded column); per id that does not fit: why."""
        rows: dict[int, list[Column]] = {}
        conflicts: dict[int, str] = {}
        for i in self.batch_ids:
            d = self.decodings.get(i)
            row = row_type(d.struct, cdc) if d is not None else None
            if d is None or row is None:
                continue
            fit = avro_types.fit(schema, row)
            if not fit.ok:
                conflicts[i] = "; ".join(fit.conflicts)[:600]
                continue
            decoded = F.col(decoded_column(i))
            cols = [*avro_rows.project(avro_rows.row(decoded, d.struct, cdc), row, schema).values(),
                    decoded[OK].alias(OK)]
            if cdc is not None:
                cols += [avro_rows.pick(decoded, d.struct, avro_rows.op_path(cdc)).cast("string").alias(CDC_OP),
                         avro_rows.pick(decoded, d.struct, cdc.ordering).try_cast(cdc_rules.ordering_type(cdc))
                         .alias(CDC_ORDERING)]
            rows[i] = cols
        return rows, conflicts

    def _faults(self, ok: Column, conflicts: dict[int, str], max_value_bytes: int, cdc: CdcSettings | None
                ) -> tuple[Column, Column]:
        """(error class, message) of a record whose decoded ``__icetide_ok`` is ``ok`` (null: it did not decode)."""
        sid = F.col(ID)
        error_class, message = value_faults(max_value_bytes)
        for i, why in sorted(conflicts.items()):
            error_class = error_class.when(sid == F.lit(i), F.lit("incompatible_schema"))
            message = message.when(sid == F.lit(i), F.lit(f"{self.label(i)} cannot be written to the table: {why}"))
        if cdc is not None and cdc.format == "debezium":
            for i in self.batch_ids:
                d = self.decodings.get(i)
                if d is not None and row_type(d.struct, cdc) is None:
                    error_class = error_class.when(sid == F.lit(i), F.lit("incompatible_schema"))
                    message = message.when(sid == F.lit(i), F.lit(
                        f"{self.label(i)} is not a Debezium envelope (no record field 'after'; target.cdc.format)"))
        error_class = error_class.when(ok.isNull(), F.lit("undecodable"))
        shown = sid.cast("string")
        for i in self.batch_ids:
            if i < 0:
                shown = F.when(sid == F.lit(i), F.lit(self.label(i).removeprefix("schema id "))).otherwise(shown)
        message = message.when(ok.isNull(), F.concat(
            F.lit("the Avro payload does not decode with writer schema id "), shown,
            F.lit(" (truncated, not written with that schema, or a value its column cannot hold: a decimal wider "
                  "than 38 digits, a ZonedTimestamp that is not ISO-8601)")))
        return error_class, message

    def unified(self, parsed: Parsed, names: list[str]) -> Column:
        p = parsed.struct
        return F.when(p.isNotNull(), F.struct(*[p[n].alias(n) for n in names], p[OK].alias(OK),
                                              F.lit(None).cast("string").alias(CORRUPT)))


def decoded_column(sid: int) -> str:
    """The column holding the records of schema id ``sid`` decoded (null for other records)."""
    return f"_icetide_avro_{sid}" if sid >= 0 else f"_icetide_avro_m{-sid}"


def member_id(sid: int, k: int) -> int:
    """The id records of member ``k`` of top-level union ``sid`` carry once read (negative: no
    registry id is; see :meth:`AvroFormat.with_scan`)."""
    return -sid * MAX_MEMBERS - 1 - k


def writer_order(i: int) -> tuple[int, int]:
    """Ids in the order their fields become columns: by registry id, a top-level union's members in
    the writer's order (member ids are negative: sorted as numbers they would reverse it)."""
    return (i, -1) if i >= 0 else divmod(-i - 1, MAX_MEMBERS)


def record_route_value(full_name: str) -> str:
    """The routing value of a record under ``target.route.by: record_name``: its full name with
    ``.`` as ``_`` (``io.debezium.Envelope`` → ``io_debezium_Envelope``; the table template
    lower-cases it), so records of the same short name in different namespaces never share a table."""
    return full_name.replace(".", "_")


def spark_accepts(spark: SparkSession, writer: avro_types.WriterSchema) -> None:
    """Parse the decode schema as Avro does when a task deserializes ``from_avro``'s schema (the
    strict parser: Spark's lenient one runs on the driver only) and convert it to Spark's type, on
    the driver: :class:`~.avro_types.UnsupportedSchema` with the JVM's reason when either fails,
    instead of a batch job failing on every record of the id."""
    jvm: Any = spark._jvm
    try:
        parsed = jvm.org.apache.avro.Schema.Parser().parse(with_sentinel(writer.schema))
        jvm.org.apache.spark.sql.avro.SchemaConverters.toSqlType(parsed, True, avro_types.UNION_PREFIX, -1)
    except Exception as e:  # Py4JJavaError: the JVM refused the schema
        java = getattr(e, "java_exception", None)
        why = str(java.getMessage()) if java is not None else str(e)
        raise avro_types.UnsupportedSchema(f"schema id {writer.id} ({writer.full_name}): Avro or Spark refuses it: "
                                           f"{why[:300]}") from None
