"""JSON values in the Confluent JSON Schema wire format (byte 0, a 4-byte big-endian schema id, then
the JSON text), typed by their registry schema (``schemaType: JSON``) and checked against it.

Per batch the driver lists the batch's schema ids and fetches the ones it has not seen from the
registry, as for Avro (:mod:`.wire`, :mod:`.registry`: cached for the run, a 404 believed for
60 s, an outage waited out). Each schema is mapped to column types and validation rules once
(:mod:`.json_schema_types`, pure) and its ``pattern`` regexes compiled by Java on the driver (Spark's
``rlike`` runs them); a schema that fails anywhere is refused (``unsupported_schema``, with the
reason) and never stops the run. A table's type is the union of the versions it has seen
(:meth:`JsonSchemaFormat.declared`, as Avro's): evolution adds a new version's fields.

A record is read as a JSON value is (:func:`.json.json_columns` on the text after the header:
``from_json`` against the table's columns, with JSON's dead letters for a text that is not JSON,
not an object, or holds a value its column cannot), then checked against the rules of its own
schema id (:mod:`.json_schema_checks`): the first rule it breaks makes it a ``schema_violation``
dead letter whose message names the JSON path (``$.address.zip: does not match pattern …``).

Dead-letter classes: ``truncated_record``, ``bad_magic_byte``, ``unknown_schema_id``,
``unsupported_schema`` (:meth:`JsonSchemaFormat.verdict`, before any parse); ``null_value``,
``empty_value``, ``oversized_value``, ``malformed_json``, ``not_a_json_object``, ``type_mismatch``
(the parse); ``schema_violation``. CDC tables over JSON Schema values are refused by the config
check (not read yet).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

import icetide.ingest.formats.json_schema_checks as checks
import icetide.ingest.formats.json_schema_types as types
import icetide.ingest.formats.wire as wire
from icetide.config.registry import SchemaRegistry
from icetide.config.source import KafkaSource
from icetide.config.target import CdcSettings, RouteSettings
from icetide.ingest.decode import CORRUPT, PARSED
from icetide.ingest.formats.avro_types import UnsupportedSchema, merged
from icetide.ingest.formats.base import OK, Parsed, ValueFormat, register
from icetide.ingest.formats.json import json_columns
from icetide.ingest.formats.registry import RegistryClient
from icetide.ingest.formats.wire import registered_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: A record that breaks a rule of its own schema
VIOLATION = "schema_violation"
#: The dead-letter classes of the parse (JSON's, :mod:`.json`)
PARSE_CLASSES = ("null_value", "empty_value", "oversized_value", "malformed_json", "not_a_json_object", "type_mismatch")


def text() -> Column:
    """A record's JSON text: what follows the header."""
    return wire.payload().cast("string")


@register
@dataclass
class JsonSchemaFormat(ValueFormat):
    """The JSON Schema format of one pipeline run: the schemas seen so far, by id."""

    name: ClassVar[str] = "json_schema"
    error_classes: ClassVar[tuple[str, ...]] = (*PARSE_CLASSES, *wire.ERROR_CLASSES, VIOLATION)
    declares_types: ClassVar[bool] = True

    registry: SchemaRegistry
    client: RegistryClient = field(init=False)
    schemas: dict[int, types.JsonSchema] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)  # id → why (unsupported_schema)
    unknown: dict[int, float] = field(default_factory=dict)  # id the registry did not know → when (clock)
    batch_ids: list[int] = field(default_factory=list)
    clock: Callable[[], float] = time.monotonic
    #: schema id → its rules as one expression (None: no rule), built once per run
    violations: dict[int, Column | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.client = RegistryClient(self.registry)

    @classmethod
    def of(cls, source: KafkaSource) -> JsonSchemaFormat:
        assert source.schema_registry is not None, "the config check requires a registry for JSON Schema"
        return cls(source.schema_registry)

    def registry_client(self) -> RegistryClient:
        return self.client

    # -- per batch --------------------------------------------------------------------------------
    def with_ids(self, rows: DataFrame, mine: Column | None) -> DataFrame:
        """Each record's schema id (:data:`.wire.ID`; null when not in the wire format)."""
        return wire.with_ids(rows, mine)

    def resolve(self, spark: SparkSession, rows: DataFrame, mine: Column | None = None) -> None:
        """Learn every schema id of the batch's records (waits out a registry outage; see :mod:`.registry`)."""
        self.learn(wire.ids_of(rows, mine), lambda s: java_accepts(spark, s))

    def learn(self, ids: list[int], check: Callable[[types.JsonSchema], None]) -> None:
        """Fetch the ids not seen yet (``check``: the JVM's word on a schema; see :func:`.wire.learn`)."""
        def make(sid: int) -> types.JsonSchema:
            text = registered_text(self.client, sid, "JSON", "JSON Schema (source.format: json_schema)",
                                   "its definitions inlined ($defs)")
            schema = types.parse(sid, text)
            check(schema)
            return schema

        self.schemas.update(wire.learn(ids, self.schemas, self.refused, self.unknown, self.clock(), make))
        self.batch_ids = ids

    def verdict(self, columns: list[str] | None = None) -> Column:
        """``"<class>\\t<message>"`` for records no schema reads; null otherwise."""
        return wire.verdict(self.batch_ids, self.unknown, self.refused, "JSON Schema", self.name)

    def route_value(self, route: RouteSettings) -> Column | None:
        """``field`` routes read the JSON text after the header (the other routes: :mod:`icetide.ingest.routing`)."""
        if route.by != "field":
            return None
        assert route.name is not None  # a validated dot path (config), never record data
        return F.get_json_object(text(), "$." + route.name)

    def text(self) -> Column:
        return text()

    # -- columns ----------------------------------------------------------------------------------
    def declared(self, ids: list[int], cdc: CdcSettings | None = None) -> StructType | None:
        """The record type of the table fed by ``ids``: every field of their schemas."""
        found = [self.schemas[i].struct for i in sorted(ids) if i in self.schemas]
        return merged(found) if found else None

    def parse_columns(self, spark: SparkSession, schema: StructType, max_value_bytes: int,
                      parsed_name: str = PARSED, cdc: CdcSettings | None = None) -> Parsed:
        """JSON's parse of the text after the header, then each record's own schema rules on the
        records that parsed. ``cdc`` is not read (the config refuses CDC over JSON Schema)."""
        struct, error_class, message = json_columns(spark.sparkContext.applicationId, schema.json(), max_value_bytes,
                                                    parsed_name, wire=True)
        broken = self.broken()
        if broken is None:
            return Parsed(struct, error_class, message)
        return Parsed(struct, F.coalesce(error_class, F.when(broken.isNotNull(), F.lit(VIOLATION))),
                      F.when(error_class.isNotNull(), message).otherwise(broken))

    def broken(self) -> Column | None:
        """Per record: the first rule of its schema id it breaks (``"<path>: <what>"``); None when the
        batch's schemas have no rule."""
        sid, out, any_rule = F.col(wire.ID), F.lit(None).cast("string"), False
        for i in self.batch_ids:
            s = self.schemas.get(i)
            if s is None:
                continue
            if i not in self.violations:
                self.violations[i] = checks.violation(text(), s.rules)
            rule = self.violations[i]
            if rule is not None:
                out, any_rule = F.when(sid == F.lit(i), rule).otherwise(out), True
        return out if any_rule else None

    def unified(self, parsed: Parsed, names_: list[str]) -> Column:
        p = parsed.struct
        return F.when(p.isNotNull(), F.struct(*[p[n].alias(n) for n in names_], F.lit(True).alias(OK),
                                              p[CORRUPT].alias(CORRUPT)))


def java_accepts(spark: SparkSession, schema: types.JsonSchema) -> None:
    """Compile the schema's ``pattern`` regexes with Java's, on the driver (Spark's ``rlike`` runs
    them: a pattern Java refuses would fail every task): :class:`UnsupportedSchema` with Java's reason."""
    jvm: Any = spark._jvm
    for p in schema.patterns:
        try:
            jvm.java.util.regex.Pattern.compile(p)
        except Exception as e:  # Py4JJavaError: Java refused the pattern
            java = getattr(e, "java_exception", None)
            why = str(java.getMessage()) if java is not None else str(e)
            raise UnsupportedSchema(f"schema id {schema.id}: pattern {p[:120]!r} is not a Java regular expression "
                                    f"(Spark checks patterns with Java's): {why[:300]}") from None
