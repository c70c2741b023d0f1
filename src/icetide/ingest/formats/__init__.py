"""Record formats: how a record's value is checked, routed, typed and decoded.

One module per format, each one :class:`~.base.ValueFormat` registered under its ``source.format``
name (:data:`~.base.FORMATS`): JSON in :mod:`.json` (+ :mod:`.json_scan`, its one-pass checks),
Avro in :mod:`.avro` (+ :mod:`.avro_types`, :mod:`.avro_semantic`, :mod:`.avro_rows`), JSON Schema
in :mod:`.json_schema` (+ :mod:`.json_schema_types`, :mod:`.json_schema_rules`,
:mod:`.json_schema_checks`), Protobuf in :mod:`.protobuf` (+ :mod:`.protobuf_types`,
:mod:`.protobuf_schema`); the registry formats share :mod:`.wire` (the Confluent wire format)
and :mod:`.registry` (the schema-registry client). :mod:`.base` documents the stages and the
invariants every format keeps. A new format is one module and its name among ``source.format``'s
values.

:class:`Formats` is what the rest of ingest talks to: the formats one pipeline reads and, with
``source.topic_formats``, per record which one applies (the per-topic choice is made here once:
:meth:`Formats.format_of`). Every column it returns applies each format's expression to that
format's records only. Avro keys (``source.key_format: avro``) are read here too, with the Avro
format's registry client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

import icetide.ingest.formats.json  # registers the format (as the next two lines do)
import icetide.ingest.formats.json_schema
import icetide.ingest.formats.protobuf  # noqa: F401 - registers the format
from icetide.config.source import KafkaSource
from icetide.config.target import CdcSettings, RouteSettings
from icetide.ingest import decode
from icetide.ingest.formats.avro import ID, KEY_ID, KEY_TEXT, AvroFormat, schema_id, spark_accepts
from icetide.ingest.formats.avro_types import merged
from icetide.ingest.formats.base import FORMATS, OK, Parsed, ValueFormat
from icetide.ingest.formats.registry import SAFE_LEVELS, RegistryClient, subject

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


__all__ = ["FORMATS", "ID", "OK", "Formats", "Parsed", "ValueFormat"]


class Formats:
    """The formats one pipeline reads, and per record which one applies."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source
        #: name → format, in a fixed order (each built once per run: a format keeps its schemas)
        self.values: dict[str, ValueFormat] = {n: FORMATS[n].of(source) for n in sorted(source.formats())}
        avro = self.values.get(AvroFormat.name)
        if avro is None and source.key_format == "avro" and source.schema_registry is not None:
            avro = AvroFormat.of(source)  # Avro keys under JSON values
        #: The Avro format (values or keys), for its registry client and the keys; None without Avro
        self.avro: AvroFormat | None = avro if isinstance(avro, AvroFormat) else None
        self.avro_keys = source.key_format == "avro"

    @property
    def mixed(self) -> bool:
        """Several value formats in one pipeline (by topic)."""
        return len(self.values) > 1

    @property
    def infers(self) -> bool:
        """Whether some format's tables are typed by inference over the values (JSON)."""
        return any(not f.declares_types for f in self.values.values())

    @property
    def json_only(self) -> bool:
        """Every value and key is plain JSON text (what icetide's one-pass decoders read)."""
        return set(self.values) == {"json"} and self.avro is None

    @property
    def declared_one_pass(self) -> bool:
        """Every value is Avro and keys are not (what the one pass of a declaring format reads:
        :meth:`expect_known`, :mod:`icetide.ingest.one_pass`)."""
        return set(self.values) == {AvroFormat.name} and not self.avro_keys

    def expect_known(self) -> bool:
        """Build the next columns for every schema id learned so far, before the batch's own ids are
        listed (:meth:`resolve` replaces them): a record of an id not learned yet gets no row and
        keeps its id as its shape, so the one pass leaves its table to the usual path. False when no
        id is learned yet."""
        return self.avro is not None and self.avro.expect_known()

    def learn_latest(self, spark: SparkSession, topics: list[str]) -> tuple[list[int], bool]:
        """Before a run's first batch (nothing learned yet): learn the latest version of each topic's
        value subject (``<topic>-value``: the topic_name strategy), so that batch can take the one
        pass. Returns the ids learned, and whether every subject's compatibility is BACKWARD or
        stricter (a reader of the latest version reads every older one: a table may be made from it).
        Asks once, without waiting out an outage (the usual path waits for the batch's own ids)."""
        avro = self.avro
        if avro is None or avro.registry.subject_name_strategy != "topic_name":
            return [], False
        cfg = avro.registry
        quick = RegistryClient(cfg.model_copy(update={"max_wait_s": 0.0, "timeout_s": min(cfg.timeout_s, 5.0)}))
        ids, safe = [], True
        for t in topics:
            name = subject("topic_name", t, "")
            got = quick.latest(name)
            sid = None if got is None else got.get("id")
            if got is None or type(sid) is not int or sid <= 0 or got.get("subject", name) != name:
                return [], False  # no such subject, or an answer that is not one
            ids.append(sid)
            safe = safe and (quick.compatibility(name) or "").upper() in SAFE_LEVELS
        avro.learn(ids, lambda w: spark_accepts(spark, w))
        return [i for i in ids if i in avro.decodings], safe

    def expected(self) -> list[int]:
        """The ids :meth:`expect_known` built the columns for (learned, refused, believed unknown)."""
        return list(self.avro.batch_ids) if self.avro is not None else []

    def learned(self, sid: int) -> bool:
        """Whether schema id ``sid`` was learned and decodes (not refused, not unknown to the registry)."""
        return self.avro is not None and sid in self.avro.decodings

    def clients(self) -> list[RegistryClient]:
        """The schema-registry clients of the formats (values and Avro keys); empty: no registry, so a
        batch has no schema ids to list first."""
        found = [c for f in self.values.values() if (c := f.registry_client()) is not None]
        if self.avro is not None and self.avro.client not in found:
            found.append(self.avro.client)
        return found

    def registry_waited_s(self) -> float:
        """Seconds the formats waited for the registry so far this run (outages)."""
        return sum(c.waited_s for c in self.clients())

    def text(self) -> Column | None:
        """Per record: its value's JSON text where a format says (JSON Schema: after the header), else
        the value (None: every format reads the value itself)."""
        return self._per_record(lambda f: f.text(), F.col("value").cast("string"))

    @property
    def envelopes(self) -> bool:
        """Whether the formats decode a CDC envelope with the row (Avro), rather than from the value's text."""
        return all(f.decodes_envelopes for f in self.values.values())

    def format_of(self) -> Column:
        """Per record: the name of its value format (``source.topic_formats``, else ``source.format``)."""
        out = F.lit(self.source.format)
        for pattern, fmt in reversed(list(self.source.topic_formats.items())):
            topic = F.col("_kafka_topic")
            hit = (topic == F.lit(pattern)) | topic.rlike("^(?:" + pattern + r")\z")
            out = F.when(hit, F.lit(fmt)).otherwise(out)
        return out

    def _mine(self, name: str) -> Column | None:
        return self.format_of() == F.lit(name) if self.mixed else None

    def _per_record(self, pick: Callable[[ValueFormat], Column | None], fallback: Column | None = None
                    ) -> Column | None:
        """Each format's ``pick`` for its own records (``fallback`` for a format whose pick is None);
        None when no format has one."""
        picked = {n: pick(f) for n, f in self.values.items()}
        if all(c is None for c in picked.values()):
            return None
        if not self.mixed:
            return next(iter(picked.values()))
        base = F.lit(None) if fallback is None else fallback
        which, out = self.format_of(), base
        for n, c in picked.items():
            out = F.when(which == F.lit(n), c if c is not None else base).otherwise(out)
        return out

    # -- the stages -------------------------------------------------------------------------------
    def with_ids(self, rows: DataFrame) -> DataFrame:
        """Add what later stages read per record (Avro: the value's and the key's schema ids)."""
        if self.avro is not None and self.avro_keys:
            rows = rows.withColumn(KEY_ID, schema_id("_kafka_key"))
        for n, f in self.values.items():
            rows = f.with_ids(rows, self._mine(n))
        return rows

    def resolve(self, spark: SparkSession, rows: DataFrame) -> None:
        """Learn the batch's schemas (Avro: its new schema ids, from the registry); ``rows`` has the ids."""
        for n, f in self.values.items():
            f.resolve(spark, rows, self._mine(n))
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
        """Each format's one-pass checks of its own records, for :meth:`verdict` and :meth:`shape`."""
        for n, f in self.values.items():
            rows = f.with_scan(spark, rows, self._mine(n))
        return rows

    def without_scans(self, rows: DataFrame) -> DataFrame:
        """``rows`` without the columns :meth:`with_scan` added (once the batch has taken what it needs)."""
        drop = [c for f in self.values.values() for c in f.scan_columns if c in rows.columns]
        return rows.drop(*drop) if drop else rows

    def verdict(self, spark: SparkSession, columns: list[str]) -> Column | None:
        """``columns``: the batch's (with the scan columns when :meth:`with_scan` could add them)."""
        value_v = self._per_record(lambda f: f.verdict(columns))
        if self.avro is None or not self.avro_keys:
            return value_v
        key_v = self.avro.key_verdict()
        return key_v if value_v is None else F.coalesce(value_v, key_v)

    def route_value(self, route: RouteSettings, fallback: Column) -> Column | None:
        """The routing value where a format decides it (``fallback``, the value as routing reads it, for
        the records of formats that do not); None when no format decides."""
        return self._per_record(lambda f: f.route_value(route), fallback)

    def shape(self, columns: list[str]) -> Column | None:
        return self._per_record(lambda f: f.shape(columns), F.lit(UNKNOWN_SHAPE).cast("long"))

    def with_decoded(self, rows: DataFrame) -> DataFrame:
        """One table's rows with each record decoded once, for :meth:`parse_columns` (call it first)."""
        for f in self.values.values():
            rows = f.with_decoded(rows)
        return rows

    def without_decoded(self, rows: DataFrame) -> DataFrame:
        """``rows`` without :meth:`with_decoded`'s columns (the parsed struct holds what they did)."""
        drop = [c for f in self.values.values() for c in f.decoded_columns() if c in rows.columns]
        return rows.drop(*drop) if drop else rows

    def declared(self, ids: list[int], cdc: CdcSettings | None = None) -> StructType | None:
        """The record type of a table whose records carry schema ``ids``: every declaring format's
        fields (a table fed by Avro and JSON Schema topics holds both)."""
        types = [t for f in self.values.values() if (t := f.declared(ids, cdc)) is not None]
        return merged(types) if types else None

    def carries(self, parts: tuple[str, ...], cdc: CdcSettings | None, fallback: Column) -> Column:
        """Per record: whether its value has the field at ``parts`` (one evolution refused), where its
        format says (Avro: the record's writer schema declares it); ``fallback`` (the check on the
        record's JSON text) for the others."""
        out = self._per_record(lambda f: f.carries(parts, cdc), fallback)
        return fallback if out is None else out

    def parse_columns(self, spark: SparkSession, schema: StructType, max_value_bytes: int,
                      parsed_name: str = decode.PARSED, cdc: CdcSettings | None = None) -> Parsed:
        each = {n: f.parse_columns(spark, schema, max_value_bytes, parsed_name, cdc) for n, f in self.values.items()}
        if not self.mixed:
            return next(iter(each.values()))
        names = [f.name for f in schema.fields]
        structs = self._per_record(lambda f: f.unified(each[f.name], names))
        classes = self._per_record(lambda f: each[f.name].error_class)
        messages = self._per_record(lambda f: each[f.name].message)
        assert structs is not None and classes is not None and messages is not None
        return Parsed(structs, classes, messages)

    def decoding_columns(self) -> dict[str, Column]:
        """:meth:`with_decoded`'s columns, by name (a declaring format's one pass: Avro values)."""
        assert self.declared_one_pass and self.avro is not None, "only Avro values decode by columns"
        return self.avro.decoding_columns()

    def columns_key(self) -> tuple[Any, ...]:
        """What :meth:`parse_fields` and :meth:`decoding_columns` depend on besides their arguments: the
        batch's Avro ids, the writer schema each decodes with, the refused and unknown ids. Equal keys,
        equal columns (a registry reached again may give an id another schema: the text is the key)."""
        assert self.avro is not None
        return self.avro.columns_key()

    def parse_fields(self, schema: StructType, max_value_bytes: int) -> tuple[dict[str, Column], Column]:
        """The one pass's parse of a declaring format's append table (:meth:`AvroFormat.parse_fields`)."""
        assert self.declared_one_pass and self.avro is not None, "only Avro values have a parse by fields"
        return self.avro.parse_fields(schema, max_value_bytes)


#: The shape of a record whose format has no shapes (= :data:`icetide.ingest.shapes.UNKNOWN`)
UNKNOWN_SHAPE = 0
