"""Pipeline configuration: nested pydantic models, unknown keys rejected.

Every field documents itself; ``docs/config.md`` is the reference a user reads.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from icetide.config.policy import MaintenancePolicy
from icetide.config.thresholds import HealthThresholds
from icetide.errors import IdentifierError
from icetide.identifiers import validate_name, validate_pipeline, validate_table, validate_topic

INTERVAL_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?)\s*$")
TRANSFORM_RE = re.compile(
    r"^(?:(?P<fn>years|months|days|hours)\((?P<col1>[A-Za-z_][A-Za-z0-9_]*)\)"
    r"|(?P<pfn>bucket|truncate)\((?P<n>\d+),\s*(?P<col2>[A-Za-z_][A-Za-z0-9_]*)\)"
    r"|(?P<col3>[A-Za-z_][A-Za-z0-9_]*))$"
)
PROPERTY_KEY_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
COLUMN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

#: Table properties icetide sets on tables it creates, tuned for streaming appends. Any of them can
#: be overridden per table under ``target.properties``.
STREAMING_TABLE_DEFAULTS: dict[str, str] = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "write.target-file-size-bytes": str(128 * 1024 * 1024),
    # Each micro-batch is already grouped by Spark's Kafka partitions; a hash shuffle per batch
    # costs more than it saves at streaming batch sizes. Compaction fixes file layout later.
    "write.distribution-mode": "none",
    "write.spark.fanout.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
    "commit.retry.num-retries": "10",
}


def _table_id(v: str) -> str:
    try:
        validate_table(v)
    except IdentifierError as e:
        raise ValueError(str(e)) from None
    return v


def _interval(v: str) -> str:
    interval_seconds(v)
    return v


#: ``namespace.table``, validated (see icetide.identifiers).
TableId = Annotated[str, AfterValidator(_table_id)]
#: '10 seconds', '500 ms', '2 minutes'.
Interval = Annotated[str, AfterValidator(_interval)]


M = TypeVar("M", bound=BaseModel)


def check_overrides(model: type[BaseModel], overrides: dict[str, dict[str, Any]]) -> None:
    """Each per-table override must be valid on its own for ``model``."""
    for pattern, values in overrides.items():
        try:
            model(**values)
        except ValidationError as e:
            problems = []
            for err in e.errors():
                key = ".".join(str(x) for x in err["loc"])
                what = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
                problems.append(f"{key}: {what}")
            raise ValueError(f"override {pattern!r}: {'; '.join(problems)}") from None


def merged_for(base: M, overrides: dict[str, dict[str, Any]], table: str) -> M:
    """``base``, then every override whose glob matches ``table``, in the order written."""
    merged = base.model_dump()
    for pattern, values in overrides.items():
        if fnmatch.fnmatchcase(table, pattern):
            merged.update(values)
    return type(base)(**merged)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


_UNIT_SECONDS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1.0,
                 "second": 1.0, "seconds": 1.0, "m": 60.0, "minute": 60.0, "minutes": 60.0,
                 "h": 3600.0, "hour": 3600.0, "hours": 3600.0}


def interval_seconds(text: str) -> float:
    """Parse '10 seconds', '500 ms' or '2 minutes' into seconds."""
    m = INTERVAL_RE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not an interval; write e.g. '10 seconds', '500 ms', '2 minutes'")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


class KafkaSource(Strict):
    """Where records come from."""

    bootstrap_servers: str = Field(description="Kafka bootstrap servers, host:port[,host:port]")
    topics: list[str] | None = Field(default=None, description="Topics to read")
    topic_pattern: str | None = Field(
        default=None, description="Java regex of topics to read; new matching topics are picked up"
    )
    starting_offsets: Literal["earliest", "latest"] = Field(
        default="earliest", description="Where a new pipeline (no checkpoint, no table offsets) starts"
    )
    max_offsets_per_trigger: int | None = Field(
        default=1_000_000, gt=0, description="Upper bound of records per micro-batch"
    )
    min_partitions: int | None = Field(default=None, gt=0, description="Spark input partitions")
    max_value_bytes: int = Field(
        default=8 * 1024 * 1024, gt=0, description="Larger values are dead-lettered as oversized"
    )
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Kafka consumer settings, e.g. security.protocol (kafka. prefix added)",
    )

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, v: str) -> str:
        for hp in v.split(","):
            host, _, port = hp.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"{hp!r} is not host:port")
        return v

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if not v:
                raise ValueError("list at least one topic")
            for t in v:
                try:
                    validate_topic(t)
                except IdentifierError as e:
                    raise ValueError(str(e)) from None
        return v

    @field_validator("topic_pattern")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a valid regular expression: {e}") from None
        return v

    @model_validator(mode="after")
    def _one_subscription(self) -> KafkaSource:
        if (self.topics is None) == (self.topic_pattern is None):
            raise ValueError("set exactly one of 'topics' or 'topic_pattern'")
        return self


class JdbcCatalog(Strict):
    """Embedded default: Iceberg's JDBC catalog on a SQLite file plus a local warehouse folder."""

    type: Literal["jdbc"] = "jdbc"
    name: str = Field(default="icetide", description="Spark catalog name")
    uri: str = Field(default="jdbc:sqlite:.icetide/catalog.db", description="JDBC URL of the catalog DB")
    warehouse: str = Field(default=".icetide/warehouse", description="Warehouse folder or URI")
    user: str | None = None
    password: SecretStr | None = None
    properties: dict[str, str] = Field(default_factory=dict, description="Extra catalog properties")


class RestCatalog(Strict):
    """An Iceberg REST catalog (the production path)."""

    type: Literal["rest"]
    name: str = Field(default="icetide", description="Spark catalog name")
    uri: str = Field(description="REST catalog base URL, e.g. https://catalog.example.com/api")
    warehouse: str | None = Field(default=None, description="Warehouse name or location")
    credential: SecretStr | None = Field(default=None, description="OAuth2 client_id:client_secret")
    token: SecretStr | None = Field(default=None, description="Bearer token")
    properties: dict[str, str] = Field(default_factory=dict, description="Extra catalog properties")

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if not re.match(r"^https?://[^\s/]+", v):
            raise ValueError(f"{v!r} is not an http(s) URL")
        return v.rstrip("/")


CatalogConfig = Annotated[JdbcCatalog | RestCatalog, Field(discriminator="type")]





_TEMPLATE_PART = r"(?:[a-z0-9_]|\{[a-z_][a-z0-9_]*\})+"
TEMPLATE_RE = re.compile(rf"^(?P<ns>{_TEMPLATE_PART})\.(?P<table>{_TEMPLATE_PART})$")
PLACEHOLDER_RE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
FIELD_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}(?:\.[A-Za-z_][A-Za-z0-9_]{0,127}){0,7}$")
HEADER_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def _check_transforms(v: list[str]) -> list[str]:
    for t in v:
        if not TRANSFORM_RE.fullmatch(t.strip()):
            raise ValueError(
                f"{t!r} is not a partition transform; use a column name, years|months|days|"
                "hours(col), bucket(N, col) or truncate(N, col)"
            )
    return [t.strip() for t in v]


def _check_properties(v: dict[str, str]) -> dict[str, str]:
    for k in v:
        if not PROPERTY_KEY_RE.fullmatch(k):
            raise ValueError(f"property key {k!r} is not allowed (use A-Z a-z 0-9 . _ -)")
    return {k: str(val) for k, val in v.items()}


def _check_columns(v: list[str]) -> list[str]:
    for c in v:
        if not COLUMN_RE.fullmatch(c):
            raise ValueError(f"column {c[:64]!r} is not allowed (use A-Z a-z 0-9 _, starting with a letter or _)")
    return v


Transforms = Annotated[list[str], AfterValidator(_check_transforms)]
Properties = Annotated[dict[str, str], AfterValidator(_check_properties)]
Columns = Annotated[list[str], AfterValidator(_check_columns)]


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

    def table_properties(self) -> dict[str, str]:
        cdc = self.cdc.table_properties() if self.cdc else {}
        return {**STREAMING_TABLE_DEFAULTS, **cdc, **self.properties}


class RouteSettings(Strict):
    """Route each record to a table chosen by its topic, one of its fields, or a header."""

    by: Literal["topic", "field", "header"] = Field(description="Where the routing value comes from")
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
        if self.by == "topic":
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
    evolve_schema: bool = Field(
        default=True,
        description="Add new fields as nullable columns and widen int→long, float→double, decimal "
        "precision; off: fields not in the table are ignored",
    )
    max_columns: int = Field(
        default=1000, gt=0, description="Schema evolution never grows a table beyond this many fields"
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
        return self

    def policy_for(self, table: str) -> TablePolicy:
        base = TablePolicy(schema=self.schema_ddl, partition_by=self.partition_by, sort_by=self.sort_by,
                           properties=self.properties, cdc=self.cdc)
        return merged_for(base, {k: {("schema_ddl" if kk == "schema" else kk): vv for kk, vv in v.items()}
                                 for k, v in self.tables.items()}, table)

    def namespaces(self) -> list[str]:
        if self.route is not None:
            return list(self.route.namespaces or [])
        assert self.table is not None
        return [self.table.split(".")[0]]


class DeadLetter(Strict):
    """Where records that cannot be written go, with the reason."""

    table: TableId = Field(default="icetide.dead_letters", description="namespace.table")
    replay_log_table: TableId | None = Field(
        default=None, description="namespace.table recording replayed dead letters (default: <table>_replayed)"
    )

    def replay_log(self) -> str:
        return self.replay_log_table or f"{self.table}_replayed"


class StreamSettings(Strict):
    """Structured Streaming settings."""

    trigger_interval: Interval = Field(default="60 seconds", description="Micro-batch trigger interval")
    checkpoint_location: str = Field(
        default=".icetide/checkpoints/{pipeline}",
        description="Spark checkpoint folder or URI; {pipeline} is replaced by the pipeline name",
    )
    on_missing_checkpoint: Literal["resume", "fail"] = Field(
        default="resume",
        description="When the checkpoint is gone: resume from offsets recorded in the tables, or fail",
    )
    restart_attempts: int = Field(default=3, ge=0, description="Restarts after a transient failure")
    watermark_mirror_interval: Interval = Field(
        default="60 seconds",
        description="At most this often, copy each table's offsets into a table property (one extra commit); "
        "maintenance also copies them before it expires snapshots",
    )
    table_write_parallelism: int = Field(
        default=4, ge=1, le=64, description="Tables of one micro-batch written concurrently (each commits once)"
    )
    multi_table_write: bool = Field(
        default=True,
        description="With routing, write the appends of all tables of a micro-batch in one Spark job "
        "(each table still commits on its own); false: one Spark job per table",
    )
    one_pass_write: bool = Field(
        default=True,
        description="With routing and multi_table_write, first write the batch's records for existing tables in "
        "one pass over the batch (no cache), committing each table whose records show only shapes it is known to "
        "fit; new tables, new shapes and bad records then take the usual two passes. false: always two passes",
    )
    batch_log_table: TableId | None = Field(
        default="icetide.ingest_batches",
        description="namespace.table keeping per-batch metrics per table (null: log only)",
    )

    def trigger_seconds(self) -> float:
        return interval_seconds(self.trigger_interval)


class SparkSettings(Strict):
    """How the SparkSession is built."""

    master: str | None = Field(
        default="local[*]",
        description="Spark master URL; null to take it from spark-submit/SPARK_MASTER",
    )
    app_name: str | None = Field(default=None, description="Default: icetide-<pipeline>")
    jars: Literal["local", "packages", "none"] = Field(
        default="local",
        description="local: jars fetched by `icetide setup`; packages: spark.jars.packages (Ivy); "
        "none: the cluster provides them",
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings")


class HealthSettings(Strict):
    """Table health: which tables to watch, thresholds, history, alerts, metrics."""

    namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces `icetide status` and `icetide metrics` watch (default: the target's)",
    )
    history_table: TableId = Field(default="icetide.health", description="namespace.table of health history")
    thresholds: HealthThresholds = Field(default_factory=HealthThresholds, description="Defaults for every table")
    overrides: dict[str, dict[str, float | int | None]] = Field(
        default_factory=dict,
        description="Per-table thresholds: glob on namespace.table (e.g. 'raw.*') → threshold keys",
    )
    webhook_url: str | None = Field(default=None, description="POST alerts as JSON to this URL")
    metrics_port: int = Field(default=9464, gt=0, lt=65536, description="Prometheus endpoint port")
    metrics_host: str = Field(default="127.0.0.1", description="Prometheus endpoint bind address")
    interval: Interval = Field(default="60 seconds", description="Collection interval of `icetide metrics`")
    max_partitions_exported: int = Field(
        default=20, ge=0, description="Per table, the worst N partitions get partition-level metrics"
    )

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for ns in v:
            try:
                validate_name(ns, "namespace")
            except IdentifierError as e:
                raise ValueError(str(e)) from None
        return v

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, v: dict[str, dict[str, float | int | None]]) -> dict[str, dict[str, float | int | None]]:
        check_overrides(HealthThresholds, v)
        return v

    def thresholds_for(self, table: str) -> HealthThresholds:
        return merged_for(self.thresholds, self.overrides, table)


class MaintenanceSettings(Strict):
    """The maintenance control plane: policy, per-table overrides, budget, action log."""

    policy: MaintenancePolicy = Field(default_factory=MaintenancePolicy, description="Defaults for every table")
    overrides: dict[str, dict[str, object]] = Field(
        default_factory=dict, description="Per-table policy: glob on namespace.table → policy keys"
    )
    log_table: TableId = Field(default="icetide.maintenance", description="namespace.table of the action log")
    rewrites_per_cycle: int = Field(default=1, ge=1, description="Data/delete rewrites per cycle")
    rewrite_bytes_per_cycle: int = Field(default=50 * 1024**3, gt=0, description="Bytes rewritten per cycle")
    telemetry_table: TableId | None = Field(
        default=None,
        description="namespace.table of query telemetry (table_name STRING, queried_at TIMESTAMP, ...) that "
        "engines append to; tables queried more are maintained first",
    )
    telemetry_window: Interval = Field(default="24 hours", description="Queries counted over this window")
    in_run: bool = Field(default=False, description="Run maintenance inside `icetide run`, beside ingestion")
    interval: Interval = Field(default="10 minutes", description="At most this long between cycles (polling)")
    min_interval: Interval = Field(default="60 seconds", description="At least this long between cycles")

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, v: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
        check_overrides(MaintenancePolicy, v)
        return v

    def policy_for(self, table: str) -> MaintenancePolicy:
        return merged_for(self.policy, self.overrides, table)


class PipelineConfig(Strict):
    """A complete icetide pipeline."""

    name: str = Field(description="Stable pipeline identity, recorded in every commit")
    source: KafkaSource
    catalog: CatalogConfig = Field(default_factory=JdbcCatalog)
    target: TargetTable
    dead_letter: DeadLetter = Field(default_factory=DeadLetter)
    stream: StreamSettings = Field(default_factory=StreamSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    #: Folder the config was read from; relative paths resolve against it.
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        try:
            return validate_pipeline(v)
        except IdentifierError as e:
            raise ValueError(str(e)) from None

    def resolve(self, path: str) -> str:
        """Resolve a local path against the config's folder; URIs pass through."""
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", path):
            return path
        p = Path(path)
        return str(p if p.is_absolute() else (self.base_dir / p).resolve())

    def checkpoint_dir(self) -> str:
        return self.resolve(self.stream.checkpoint_location.replace("{pipeline}", self.name))
