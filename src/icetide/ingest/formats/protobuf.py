"""Protobuf values in the Confluent wire format (byte 0, a 4-byte big-endian schema id, the message
indexes, the message), typed by their registry schema (``schemaType: PROTOBUF``) and decoded on the
executors by icetide's JVM decoder (``io.icetide.protobuf``, over protobuf-java's ``DynamicMessage``).

Per batch, each record's schema id and message indexes (which message of its schema it is: ``0``
for the first, ``1.0`` for the first nested in the second, … read by the JVM's ``MessageIndexes``)
are listed in one small job; the driver fetches the ids it has not seen from the registry (with
their references, :mod:`.protobuf_schema`, compiled by protoc), maps each message to column types
once (:mod:`.protobuf_types`, pure) and builds its JVM decoder from the compiled descriptors and
that type (the JVM refuses, on the driver, any field it would convert otherwise). Indexes that
name no message of their schema are judged per schema id (not among its messages'), so records
with random indexes leave no state behind and add nothing to the plan. A record is decoded with its
own writer schema and message only; a table's type is the union of the messages and versions it
has seen (:meth:`ProtobufFormat.declared`, as Avro's), so a version adding a field adds a column;
the decoded row is projected by name onto the table's columns and a message whose types conflict
with the table's is refused as a whole (``incompatible_schema``; a column takes another version's
type only exactly: :data:`.protobuf_types.HOLDS`).

Dead-letter classes: ``truncated_record``, ``bad_magic_byte``, ``unknown_schema_id``,
``unsupported_schema`` (not Protobuf, a reference missing or refused, protoc refuses it, recursive,
…), ``undecodable`` (message indexes that do not parse or name no message, bytes that are not the
message, a value no column holds, a number a proto2 enum does not name, with protobuf-java's
reason), ``incompatible_schema``; ``null_value``, ``empty_value``, ``oversized_value`` (never
decoded). CDC tables over Protobuf values are refused by the config check (not read yet).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StructField, StructType

import icetide.ingest.formats.avro_rows as avro_rows
import icetide.ingest.formats.wire as wire
from icetide.config.registry import SchemaRegistry
from icetide.config.source import KafkaSource
from icetide.config.target import CdcSettings, RouteSettings
from icetide.errors import SetupError
from icetide.ingest.decode import CORRUPT, PARSED
from icetide.ingest.formats.avro_types import UnsupportedSchema, fit, merged
from icetide.ingest.formats.base import OK, Parsed, ValueFormat, register
from icetide.ingest.formats.protobuf_schema import compile_schema, well_known_dir
from icetide.ingest.formats.protobuf_types import HOLDS, Compiled, Message, NoSuchMessage, parse_indexes_text
from icetide.ingest.formats.registry import RegistryClient
from icetide.spark.session import has_class

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: Per record: its message indexes as text (``"0"``, ``"1.0"``); null when they do not parse
MSG = "_icetide_proto_msg"
DECODER_CLASS = "io.icetide.protobuf.ProtobufDecoder"
ERROR_CLASSES = ("null_value", "empty_value", "oversized_value", *wire.ERROR_CLASSES, "undecodable",
                 "incompatible_schema")
#: A message of a schema: (schema id, its indexes as text)
Key = tuple[int, str]
#: Per Spark application: the JVM's message-index UDF
_INDEX_UDFS: dict[str, Any] = {}


def jvm_column(spark: SparkSession, udf: Any, value: Column) -> Column:
    """A JVM ``UserDefinedFunction`` applied to ``value``."""
    from pyspark.sql.classic.column import Column as ClassicColumn
    from pyspark.sql.classic.column import _to_seq

    return ClassicColumn(udf.apply(_to_seq(spark.sparkContext, [value._jc])))  # type: ignore[attr-defined]


def require_jvm(spark: SparkSession) -> Any:
    """The JVM, once icetide's Protobuf classes are known to be on it (else :class:`SetupError`)."""
    if not has_class(spark, DECODER_CLASS):
        raise SetupError("source.format: protobuf decodes on the JVM with icetide's classes and protobuf-java, "
                         "which this Spark session does not have: run `icetide setup` (spark.jars: none: the "
                         "cluster must ship com.google.protobuf:protobuf-java and icetide-protobuf.jar)")
    return spark._jvm


def indexes(spark: SparkSession, value: Column) -> Column:
    """Per record: its message indexes as text, null when the value is not in the wire format."""
    app = spark.sparkContext.applicationId
    if app not in _INDEX_UDFS:
        _INDEX_UDFS[app] = require_jvm(spark).io.icetide.protobuf.MessageIndexes.udf()
    return jvm_column(spark, _INDEX_UDFS[app], value)


def decoded_column(key: Key) -> str:
    """The column holding the records of one message of one schema id decoded (null for others)."""
    return f"_icetide_proto_{key[0]}_{key[1].replace('.', '_')}"


def matches(key: Key) -> Column:
    return (F.col(wire.ID) == F.lit(key[0])) & (F.col(MSG) == F.lit(key[1]))


@register
@dataclass
class ProtobufFormat(ValueFormat):
    """The Protobuf format of one pipeline run: the schemas seen so far, their messages and decoders."""

    name: ClassVar[str] = "protobuf"
    error_classes: ClassVar[tuple[str, ...]] = ERROR_CLASSES
    declares_types: ClassVar[bool] = True

    registry: SchemaRegistry
    max_value_bytes: int = 8 * 1024 * 1024
    max_depth: int = 32
    client: RegistryClient = field(init=False)
    schemas: dict[int, Compiled] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)  # id → why (unsupported_schema)
    unknown: dict[int, float] = field(default_factory=dict)  # id the registry did not know → when (clock)
    batch_ids: list[int] = field(default_factory=list)
    messages: dict[Key, Message] = field(default_factory=dict)
    #: a message of a schema no table can hold → why (``unsupported_schema``); at most one per message of
    #: a schema: indexes that name no message are judged per schema id (:meth:`verdict`), never kept
    unreadable: dict[Key, str] = field(default_factory=dict)
    batch: list[Key] = field(default_factory=list)  # the batch's messages (of its learned schemas)
    clock: Callable[[], float] = time.monotonic
    compiler: Callable[[RegistryClient, int], Compiled] = compile_schema
    #: (Spark application, message) → its JVM decoder
    decoders: dict[tuple[str, Key], Any] = field(default_factory=dict)
    spark: SparkSession | None = field(default=None, repr=False)  # the session :meth:`resolve` last saw

    def __post_init__(self) -> None:
        self.client = RegistryClient(self.registry)

    @classmethod
    def of(cls, source: KafkaSource) -> ProtobufFormat:
        assert source.schema_registry is not None, "the config check requires a registry for Protobuf"
        well_known_dir()  # protoc is there, or the run does not start
        return cls(source.schema_registry, source.max_value_bytes, source.max_depth)

    def registry_client(self) -> RegistryClient:
        return self.client

    # -- per batch --------------------------------------------------------------------------------
    def with_ids(self, rows: DataFrame, mine: Column | None) -> DataFrame:
        """Each record's schema id (:data:`.wire.ID`) and message indexes (:data:`MSG`)."""
        rows = wire.with_ids(rows, mine)
        has_id = F.col(wire.ID).isNotNull() if mine is None else mine & F.col(wire.ID).isNotNull()
        kept = F.col(MSG) if MSG in rows.columns else F.lit(None).cast("string")
        return rows.withColumn(MSG, F.when(has_id, indexes(rows.sparkSession, F.col("value"))).otherwise(kept))

    def resolve(self, spark: SparkSession, rows: DataFrame, mine: Column | None = None) -> None:
        """Learn every schema id and message of the batch's records (waits out a registry outage)."""
        self.spark = spark
        picked = rows if mine is None else rows.where(mine)
        # indexes naming no message of an already learned schema come back as null: one row per id
        found = picked.select(F.col(wire.ID).alias("i"), F.when(self.named(), F.col(MSG)).alias("m")
                              ).where(F.col("i").isNotNull())
        seen = sorted({(int(r[0]), r[1]) for r in found.distinct().collect()}, key=lambda x: (x[0], x[1] or ""))
        self.learn(spark, sorted({i for i, _ in seen}), [(i, m) for i, m in seen if m is not None])

    def learn(self, spark: SparkSession | None, ids: list[int], keys: list[Key]) -> None:
        """Fetch and compile the ids not seen yet (:func:`.wire.learn`), then map each new message and
        build its decoder (``spark`` None: no JVM check, for tests)."""
        self.schemas.update(wire.learn(ids, self.schemas, self.refused, self.unknown, self.clock(),
                                       lambda sid: self.compiler(self.client, sid)))
        self.batch_ids = ids
        keys = [k for k in keys if k[0] in self.schemas and k[1] in self.schemas[k[0]].message_keys()]
        for key in keys:
            if key in self.messages or key in self.unreadable:
                continue
            try:
                message = self.schemas[key[0]].message(parse_indexes_text(key[1]), self.max_depth)
                if spark is not None:
                    self.decoder(spark, key, message)
                self.messages[key] = message
            except NoSuchMessage:  # not among message_keys(): never; the verdict's "no message" if it were
                continue
            except UnsupportedSchema as e:
                log.warning("schema id %s, message indexes %s refused: %s", key[0], key[1], e)
                self.unreadable[key] = str(e)
        self.batch = [k for k in keys if k in self.messages or k in self.unreadable]

    def named(self) -> Column:
        """Whether a record's message indexes may name a message of its schema: one of the schema's for
        a learned id, none for a refused one, any for an id not learned yet (one term per id)."""
        sid = F.col(wire.ID)
        done = sorted({*self.schemas, *self.refused})
        out = ~sid.isin(done) if done else F.lit(True)
        for i in sorted(self.schemas):
            out = out | ((sid == F.lit(i)) & F.col(MSG).isin(sorted(self.schemas[i].message_keys())))
        return out

    def decoder(self, spark: SparkSession, key: Key, message: Message) -> Any:
        """The JVM decoder of one message (built once per Spark application); :class:`UnsupportedSchema`
        with the JVM's reason when it refuses the schema."""
        app = spark.sparkContext.applicationId
        if (app, key) not in self.decoders:
            jvm = require_jvm(spark)
            path = spark.sparkContext._gateway.new_array(jvm.int, len(message.indexes))  # type: ignore[union-attr]
            for n, i in enumerate(message.indexes):
                path[n] = i
            compiled = self.schemas[key[0]]
            try:
                self.decoders[(app, key)] = jvm.io.icetide.protobuf.ProtobufDecoder.udf(
                    compiled.descriptor_set, compiled.main, path, message.struct.json())
            except Exception as e:  # Py4JJavaError: the JVM refused the schema
                java = getattr(e, "java_exception", None)
                why = str(java.getMessage()) if java is not None else str(e)
                raise UnsupportedSchema(f"schema id {key[0]}, message {message.full_name}: the JVM decoder refuses "
                                        f"it: {why[:300]}") from None
        return self.decoders[(app, key)]

    def _decode(self, key: Key) -> Column:
        """Records decoded as message ``key`` (only after :meth:`resolve` built its decoder)."""
        assert self.spark is not None, "resolve() runs before any column is asked for"
        return jvm_column(self.spark, self.decoder(self.spark, key, self.messages[key]), F.col("value"))

    def verdict(self, columns: list[str] | None = None) -> Column:
        """``"<class>\\t<message>"`` for records no schema reads; null otherwise."""
        out = wire.verdict(self.batch_ids, self.unknown, self.refused, "Protobuf", self.name)
        out = out.when(F.col(wire.ID).isNotNull() & F.col(MSG).isNull(), F.lit(
            "undecodable\tthe message indexes after the schema id do not parse (the Confluent Protobuf wire format: "
            "their count, then each index, as zig-zag varints; 0 alone for the first message)"))
        for sid in self.batch_ids:  # one branch per schema id, whatever indexes its records name
            if sid in self.schemas:
                keys = self.schemas[sid].message_keys()
                out = out.when((F.col(wire.ID) == F.lit(sid)) & ~F.col(MSG).isin(sorted(keys)),
                               F.concat(F.lit(f"undecodable\tschema id {sid} has no message at indexes ["),
                                        F.regexp_replace(F.col(MSG), r"\.", ", "),
                                        F.lit(f"] (its file declares {sum('.' not in k for k in keys)} top-level "
                                              "messages)")))
        for key in self.batch:
            if key in self.unreadable:
                out = out.when(matches(key), F.lit(f"unsupported_schema\t{self.unreadable[key]}"[:1000]))
        return out

    def route_value(self, route: RouteSettings) -> Column | None:
        """The routing value of ``field`` routes, from the decoded message (the other routes: routing's)."""
        if route.by != "field":
            return None
        assert route.name is not None  # a validated dot path (config), never record data
        parts = route.name.split(".")
        out = F.lit(None).cast("string")
        for key in self.batch:
            m = self.messages.get(key)
            if m is None or not avro_rows.has_path(m.struct, parts):
                continue
            value = self._decode(key)["row"]
            for part in parts:
                value = value[part]
            out = F.when(matches(key), value.cast("string")).otherwise(out)
        return out

    # -- columns ----------------------------------------------------------------------------------
    def with_decoded(self, rows: DataFrame) -> DataFrame:
        """Each record decoded once, into the column of its message (:func:`decoded_column`): the
        parse reads it once per column (see :meth:`.avro.AvroFormat.with_decoded`). Oversized values
        are never decoded."""
        small = F.length(F.col("value")) <= F.lit(self.max_value_bytes)
        present = [k for k in self.batch if k in self.messages]
        return rows.withColumns({decoded_column(k): F.when(matches(k) & small, self._decode(k))
                                 for k in present}) if present else rows

    def decoded_columns(self) -> list[str]:
        return [decoded_column(k) for k in self.batch if k in self.messages]

    def declared(self, ids: list[int], cdc: CdcSettings | None = None) -> StructType | None:
        """The record type of the table fed by ``ids``: every field of the batch's messages of them."""
        found = [self.messages[k].struct for k in self.batch if k[0] in ids and k in self.messages]
        return merged(found, HOLDS) if found else None

    def conflicts(self, schema: StructType) -> dict[Key, str]:
        """The batch's messages a table of type ``schema`` cannot take (why): types that differ other
        than by a widening or an exact conversion (:data:`.protobuf_types.HOLDS`)."""
        out: dict[Key, str] = {}
        for key in self.batch:
            m = self.messages.get(key)
            fitted = fit(schema, m.struct, holds=HOLDS) if m is not None else None
            if fitted is not None and not fitted.ok:
                out[key] = "; ".join(fitted.conflicts)[:600]
        return out

    def parse_columns(self, spark: SparkSession | None, schema: StructType, max_value_bytes: int,
                      parsed_name: str = PARSED, cdc: CdcSettings | None = None) -> Parsed:
        """(parsed struct: the table's columns plus ``__icetide_ok``; error class; error message).
        ``cdc`` is not read (the config refuses CDC over Protobuf)."""
        parsed = F.lit(None).cast(StructType([*schema.fields, StructField(OK, BooleanType(), True)]))
        error = F.lit(None).cast("string")
        conflicts = self.conflicts(schema)
        for key in self.batch:
            m = self.messages.get(key)
            if m is None or key in conflicts:
                continue
            row = F.col(decoded_column(key))["row"]
            cols = [*avro_rows.project(row, m.struct, schema).values(), F.lit(True).alias(OK)]
            parsed = F.when(matches(key), F.when(row.isNotNull(), F.struct(*cols))).otherwise(parsed)
            error = F.when(matches(key), F.concat(F.lit(f"not decoded as {m.full_name} (schema id {key[0]}): "),
                                                  F.col(decoded_column(key))["error"])).otherwise(error)
        p, v = F.col(parsed_name), F.col("value")
        error_class, message = wire.value_faults(max_value_bytes)
        for key, why in sorted(conflicts.items()):
            error_class = error_class.when(matches(key), F.lit("incompatible_schema"))
            message = message.when(matches(key), F.lit(f"schema id {key[0]} (message indexes {key[1]}) cannot be "
                                                       f"written to the table: {why}"))
        error_class = error_class.when(p[OK].isNull(), F.lit("undecodable"))
        message = message.when(p[OK].isNull(), F.coalesce(error, F.lit("the Protobuf payload does not decode")))
        return Parsed(F.when(F.length(v) <= max_value_bytes, parsed), error_class, message)

    def unified(self, parsed: Parsed, names: list[str]) -> Column:
        p = parsed.struct
        return F.when(p.isNotNull(), F.struct(*[p[n].alias(n) for n in names], p[OK].alias(OK),
                                              F.lit(None).cast("string").alias(CORRUPT)))
