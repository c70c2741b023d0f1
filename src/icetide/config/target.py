"""Section ``target``: where records land — one table or routed tables, their creation
policy, and CDC."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from icetide.config.base import (
    FIELD_PATH_RE,
    HEADER_RE,
    PLACEHOLDER_RE,
    STREAMING_TABLE_DEFAULTS,
    TEMPLATE_RE,
    TRANSFORM_RE,
    Columns,
    Interval,
    Properties,
    Strict,
    TableId,
    Transforms,
    check_overrides,
    keyed,
    merged_for,
)
from icetide.config.ddl import KAFKA_METADATA, DdlError, DdlType, parse_schema, suggest, transform_problem
from icetide.errors import IdentifierError
from icetide.identifiers import validate_name


class CdcSettings(Strict):
    """Change data capture: keep a current-state table by primary key (MERGE per micro-batch)."""

    format: Literal["plain", "debezium"] = Field(
        default="plain",
        description="plain: each record is the row plus an operation field; debezium: the Debezium JSON "
        "envelope (before/after/op/ts_ms/source, optionally inside 'payload')",
    )
    primary_key: Columns = Field(description="Key columns of the row")
    ordering: str = Field(
        description="Field that decides which change wins (e.g. 'version', or 'source.lsn' in the envelope); "
        "a change never overwrites a newer one"
    )
    ordering_type: Literal["long", "timestamp", "string"] = Field(
        default="long", description="How ordering values compare"
    )
    operation_field: str = Field(default="op", description="Field holding the operation (plain format)")
    insert_values: list[str] = Field(default_factory=lambda: ["c", "i", "insert", "create"])
    update_values: list[str] = Field(default_factory=lambda: ["u", "update"])
    delete_values: list[str] = Field(default_factory=lambda: ["d", "delete"])
    read_values: list[str] = Field(
        default_factory=lambda: ["r", "read", "snapshot"], description="Snapshot reads: applied as upserts"
    )
    write_mode: Literal["merge-on-read", "copy-on-write"] = Field(
        default="merge-on-read", description="write.merge/update/delete.mode of CDC tables icetide creates"
    )
    tombstones: bool = Field(
        default=True,
        description="Remember deleted keys' ordering (table <name>_tombstones) so an older change arriving "
        "after a delete cannot bring the row back",
    )
    tombstone_horizon: Interval | None = Field(
        default=None,
        description="Maintenance trims tombstones older than this (by the delete's Kafka timestamp): a change "
        "for a deleted key that arrives later than this after the delete can bring the row back. null: keep "
        "every tombstone",
    )

    @field_validator("primary_key")
    @classmethod
    def _pk(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("list at least one key column")
        return v

    @field_validator("ordering", "operation_field")
    @classmethod
    def _path(cls, v: str) -> str:
        if not FIELD_PATH_RE.fullmatch(v):
            raise ValueError(f"{v[:64]!r} is not a field path like 'version' or 'source.lsn'")
        return v

    def table_properties(self) -> dict[str, str]:
        return {f"write.{op}.mode": self.write_mode for op in ("merge", "update", "delete")}


class TablePolicy(Strict):
    """How icetide creates a table it has not seen before."""

    schema_ddl: str | None = Field(
        default=None,
        alias="schema",
        description="Record schema as Spark DDL ('id STRING, ts TIMESTAMP, ...'); "
        "default: the existing table's schema, else inferred from the records",
    )
    partition_by: Transforms = Field(
        default_factory=list, description="Partition transforms, e.g. ['days(event_time)']"
    )
    sort_by: Columns = Field(
        default_factory=list, description="Sort order columns (used by writes and sort compaction)"
    )
    properties: Properties = Field(
        default_factory=dict, description="Table properties on create (over icetide's defaults)"
    )
    cdc: CdcSettings | None = Field(
        default=None, description="Upserts and deletes by primary key instead of appends"
    )

    @field_validator("schema_ddl")
    @classmethod
    def _schema(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                columns = parse_schema(v)
            except DdlError as e:
                raise ValueError(f"not a Spark DDL schema: {e}") from None
            for c in columns:  # icetide's own columns: a record can never set them (ingest.names.RESERVED_PREFIXES)
                if c.name.lower().startswith(("_icetide_", "_cdc_")):
                    raise ValueError(f"column {c.name!r}: names starting with _icetide_ or _cdc_ (any case) are "
                                     "icetide's own; rename the column")
        return v

    def column_problems(self, extra: dict[str, DdlType]) -> list[tuple[str, str]]:
        """(key, problem) for each partition, sort or CDC column the given schema lacks or cannot
        use; nothing when no schema is given (the records decide, checked when the table is made)."""
        if self.schema_ddl is None:
            return []
        have = {**extra, **{c.name: c.type for c in parse_schema(self.schema_ddl)}}
        out: list[tuple[str, str]] = []
        for t in self.partition_by:
            m = TRANSFORM_RE.fullmatch(t)
            assert m is not None  # Transforms validated it
            fn = m.group("fn") or m.group("pfn") or "identity"
            problem = transform_problem(fn, m.group("col1") or m.group("col2") or m.group("col3"), have,
                                        "the schema")
            if problem:
                out.append(("partition_by", f"{t} {problem}"))
        for c in self.sort_by:
            if c not in have:
                out.append(("sort_by", f"column {c!r} is not in the schema{suggest(c, list(have))}; fix the "
                                       "column name or add the column to the schema"))
        if self.cdc is not None:
            for c in self.cdc.primary_key:
                if c not in have:
                    out.append(("cdc.primary_key", f"column {c!r} is not in the schema{suggest(c, list(have))}; "
                                                   "fix the key or add the column to the schema"))
        return out

    def table_properties(self) -> dict[str, str]:
        cdc = self.cdc.table_properties() if self.cdc else {}
        return {**STREAMING_TABLE_DEFAULTS, **cdc, **self.properties}


class RouteSettings(Strict):
    """Route each record to a table chosen by its topic, one of its fields, a header, or (Avro) its record type."""

    by: Literal["topic", "field", "header", "record_name"] = Field(
        description="Where the routing value comes from; record_name: the Avro record's full name with '.' as "
        "'_' (shop.Order → shop_order in the template), so one topic carrying several record types fans out to a "
        "table per type and records of one short name in different namespaces (Debezium's Envelope) never "
        "share a table; route Debezium topics by: topic")
    name: str | None = Field(
        default=None, description="The field (dot path for nested fields) or header holding the value"
    )
    table: str = Field(
        description="Table template, e.g. 'raw.{topic}' or 'events.{value}'; {value} (or {<name>}) "
        "is the routing value, {topic} the topic, both lower-cased with '.' and '-' as '_' for topics"
    )
    namespaces: list[str] | None = Field(
        default=None, description="Namespaces routed tables may live in; default: the template's namespace"
    )
    max_tables: int = Field(
        default=100, gt=0, description="At most this many routed tables; records for more are dead-lettered"
    )

    @model_validator(mode="after")
    def _check(self) -> RouteSettings:
        if self.by in ("topic", "record_name"):
            if self.name is not None:
                raise ValueError("'name' is only used with by: field or by: header")
        elif self.name is None:
            raise ValueError(f"by: {self.by} needs 'name': the {self.by} that holds the routing value")
        elif self.by == "field" and not FIELD_PATH_RE.fullmatch(self.name):
            raise ValueError(f"name {self.name[:64]!r} is not a field path like 'event_type' or 'meta.kind'")
        elif self.by == "header" and not HEADER_RE.fullmatch(self.name):
            raise ValueError(f"name {self.name[:64]!r} is not a header name (A-Z a-z 0-9 . _ -)")
        m = TEMPLATE_RE.fullmatch(self.table)
        if m is None:
            raise ValueError(
                f"table {self.table[:64]!r} is not a template like 'raw.{{topic}}' or 'events.{{value}}' "
                "(namespace.table of a-z 0-9 _ and {placeholders})"
            )
        allowed = {"topic", "value"} | ({self.name} if self.name and "." not in self.name else set())
        for ph in PLACEHOLDER_RE.findall(self.table):
            if ph not in allowed:
                raise ValueError(f"table template placeholder {{{ph}}} is unknown; use one of "
                                 + ", ".join(f"{{{a}}}" for a in sorted(allowed)))
        if not PLACEHOLDER_RE.search(m.group("table")):
            raise ValueError("table template must have a placeholder in the table name, e.g. 'raw.{topic}'")
        if self.namespaces is None:
            if PLACEHOLDER_RE.search(m.group("ns")):
                raise ValueError("the template's namespace has a placeholder: list the allowed 'namespaces'")
            self.namespaces = [m.group("ns")]
        for ns in self.namespaces:
            try:
                validate_name(ns, "namespace")
            except IdentifierError as e:
                raise ValueError(str(e)) from None
        return self

    def template_parts(self) -> tuple[str, str]:
        ns, table = self.table.split(".")
        return ns, table


class TargetTable(TablePolicy):
    """Where records land: one table, or tables chosen per record by routing rules."""

    table: TableId | None = Field(default=None, description="namespace.table inside the catalog")
    route: RouteSettings | None = Field(default=None, description="Route records to many tables (instead of table)")
    tables: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-table creation policy: glob on namespace.table → schema, partition_by, sort_by, properties",
    )
    kafka_metadata_columns: bool = Field(
        default=True,
        description="Add _kafka_topic, _kafka_partition, _kafka_offset, _kafka_timestamp, _kafka_key",
    )
    field_names: Literal["keep", "sanitize"] = Field(
        default="keep",
        description="keep: columns keep the names producers give fields (user-agent, service.name, 2fa); "
        "sanitize: new columns get ASCII identifier names (user_x2Dagent, service_x2Ename, _2fa), the "
        "producer's names kept in the table property icetide.original-names (and shown in the column comments), "
        "for query engines that need identifiers",
    )
    evolve_schema: bool = Field(
        default=True,
        description="Add new fields as nullable columns and widen int→long, float→double, decimal "
        "precision; off: fields not in the table are ignored",
    )
    max_columns: int = Field(
        default=1000, gt=0, description="Schema evolution never grows a table beyond this many fields"
    )
    on_tombstone: Literal["dead_letter", "skip"] = Field(
        default="dead_letter",
        description="A Kafka tombstone (a record with a null value) bound for an append table (no cdc): "
        "dead_letter: a null_value dead letter; skip: dropped and counted (tombstones_skipped in the batch "
        "event), as Iceberg's Kafka Connect sink does. CDC tables always skip them (a delete's marker); under "
        "route.by: record_name they are always skipped (a null value names no record type)",
    )

    @field_validator("tables")
    @classmethod
    def _tables(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        check_overrides(TablePolicy, v)
        return v

    @model_validator(mode="after")
    def _one_target(self) -> TargetTable:
        if (self.table is None) == (self.route is None):
            raise ValueError("set exactly one of 'table' (one table) or 'route' (tables chosen per record)")
        extra = KAFKA_METADATA if self.kafka_metadata_columns else {}
        base = self.base_policy()
        problems = base.column_problems(extra)
        if problems:
            key, problem = problems[0]
            raise ValueError(keyed(key, problem))
        for pattern, values in self.tables.items():
            merged = base.model_dump()
            merged.update({("schema_ddl" if k == "schema" else k): v for k, v in values.items()})
            for key, problem in TablePolicy(**merged).column_problems(extra)[:1]:
                raise ValueError(keyed(f"tables.{pattern}.{key}", problem))
        return self

    def base_policy(self) -> TablePolicy:
        return TablePolicy(schema=self.schema_ddl, partition_by=self.partition_by, sort_by=self.sort_by,
                           properties=self.properties, cdc=self.cdc)

    def policy_for(self, table: str) -> TablePolicy:
        return merged_for(self.base_policy(), {k: {("schema_ddl" if kk == "schema" else kk): vv for kk, vv in v.items()}
                                 for k, v in self.tables.items()}, table)

    def namespaces(self) -> list[str]:
        if self.route is not None:
            return list(self.route.namespaces or [])
        assert self.table is not None
        return [self.table.split(".")[0]]
