"""Admit and prepare a batch's tables: which routed tables a batch may write, their record shapes,
schema inference and evolution, and creation on first sight.

Invariants: a routed name reaches the catalog only after :func:`icetide.ingest.routing.admit`
re-validated it on the driver (identifier rules, allowed namespaces, ``max_tables``, never one of
icetide's own tables); admission is deterministic when a batch replays (known tables first, then
new ones by name); a known table whose records all have shapes it already fits skips inference;
evolution only widens or adds (see :mod:`icetide.ingest.evolution`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType, _parse_datatype_string

from icetide.config.base import STREAMING_TABLE_DEFAULTS, TRANSFORM_RE
from icetide.config.models import PipelineConfig
from icetide.errors import ConfigError
from icetide.ingest import cdc, decode, evolution, inference, names, refused, routing, shapes, value_checks
from icetide.ingest.formats import ID, Formats, avro_types
from icetide.ingest.ledger import Ledger
from icetide.lake.offsets import table_property
from icetide.lake.tables import create_table, empty_frame, ensure_namespace, ensure_table, list_tables, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

Parallel = Callable[[Callable[[Any], Any], list[Any]], list[Any]]

log = logging.getLogger(__name__)


#: A table_policy refusal whose cause is in the config (a partition, sort or key column no record has),
#: not in the records: the same for every batch until the config changes (see BatchResult.config_refused).
CONFIG_ROOTED = re.compile(r"^target(?:\.tables)?\.(?:partition_by|sort_by|cdc\.primary_key): ")


@dataclass
class TablePlan:
    """One routed table of one batch: its record schema and the fields evolution refused."""

    table: str  # namespace.table
    schema: StructType
    refused: tuple[Column, Column] | None = None
    evolved: list[str] = field(default_factory=list)


@dataclass
class Prepared:
    """What preparing a batch decided: tables to write, tables created, tables refused with a reason."""

    plans: list[TablePlan]
    created: list[str]
    refused: dict[str, tuple[str, str]]  # namespace.table → (error class, message)


class Preparer:
    """Tables, schemas and shapes of one pipeline, across batches."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, ledger: Ledger, parallel: Parallel) -> None:
        self.spark = spark
        self.cfg = cfg
        self.catalog = cfg.catalog.name
        self.ledger = ledger
        self.parallel = parallel
        self.reserved = cfg.own_tables()  # never a routing destination
        self._schemas: dict[str, StructType] = {}  # namespace.table → record schema (no _kafka_ columns)
        self._full_schemas: dict[str, StructType] = {}  # namespace.table → every column, in order
        self._known: set[str] | None = None  # tables that exist in the target namespaces
        self.route_counts: dict[str, int] = {}
        #: The batch's record shapes per table (None: too many, or not fingerprinted), and the
        #: shapes each table is known to fit: inference only for tables with a new shape.
        self.batch_shapes: dict[str, frozenset[int] | None] = {}
        self.inferred: list[str] = []  # this batch's tables that went through inference
        #: tables made before a batch (as the run starts; an Avro run's first schema): the next batch
        #: that prepares or takes the one pass reports them as created (:meth:`take_created_before`)
        self.created_before: list[str] = []
        self.shapes = shapes.KnownShapes()
        self.formats = Formats(cfg.source)
        #: The batch's Avro schema ids per table (what declares the tables' types).
        self.batch_ids: dict[str, list[int]] = {}
        self.declared: dict[str, StructType] = {}  # this batch's tables typed by their format (Avro)
        self._settles: dict[tuple[str, int], tuple[StructType, bool]] = {}  # (table, id) → (schema, answer)

    def q(self, table: str) -> str:
        return f"{self.catalog}.{table}"

    def known_tables(self, refresh: bool = False) -> set[str]:
        """Existing tables this pipeline may write (namespace.table), icetide's own excluded."""
        if self._known is None or refresh:
            t = self.cfg.target
            if t.table is not None:
                self._known = {t.table} if table_exists(self.spark, self.q(t.table)) else set()
            else:
                found = {name for ns in t.namespaces() for name in list_tables(self.spark, self.catalog, ns)}
                self._known = found - self.reserved
        return self._known

    def forget(self) -> None:
        """Re-read schemas and tables on next use; forget known shapes (after a failed commit)."""
        self._schemas.clear()
        self._known = None
        self.shapes.forget()

    def schema(self, table: str) -> StructType:
        """The table's record schema: its columns minus Kafka and CDC metadata."""
        if table not in self._schemas:
            full = self.spark.table(self.q(table)).schema
            if self.cfg.target.field_names == "sanitize":  # the producers' names, from the table property
                full = names.with_originals(full, self._original_names(table))
            meta = {*decode.KAFKA_COLUMNS, *cdc.META_COLUMNS}
            self._full_schemas[table] = full
            self._schemas[table] = StructType([f for f in full.fields if f.name not in meta])
        return self._schemas[table]

    def _original_names(self, table: str) -> dict[str, str] | None:
        """The table's :data:`~icetide.ingest.names.PROPERTY` (None: absent, or not a JSON object of strings)."""
        text = table_property(self.spark, self.q(table), names.PROPERTY)
        try:
            raw = json.loads(text) if text else None
        except ValueError:
            raw = None
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            if text:
                log.warning("%s: table property %s is not a JSON object of names; reading the column comments",
                            table, names.PROPERTY)
            return None
        return {str(k): v for k, v in raw.items()}

    def settles(self, table: str, sid: int) -> bool:
        """Whether the records of schema id ``sid`` (learned already) go into ``table`` as it is, as
        the usual path would write them: the id's declared type fits the table's columns and adds,
        widens and refuses nothing. The one pass of a registry format commits a table only when every
        id it met settles (:class:`icetide.ingest.one_pass.OnePass`)."""
        schema = self.schema(table)
        hit = self._settles.get((table, sid))
        if hit is not None and hit[0] is schema:
            return hit[1]
        t = self.cfg.target
        seen = self.formats.declared([sid], None)
        ok = seen is not None and avro_types.fit(schema, seen).ok
        if ok and seen is not None and t.evolve_schema:
            if t.field_names == "sanitize":
                seen = cast(StructType, names.sanitized_type(seen))
            evo = evolution.diff(schema, seen, t.max_columns)
            _declared_widenings(evo, schema, seen)
            ok = not evo and not evo.rejected
        self._settles[(table, sid)] = (schema, ok)
        return ok

    def full_schema(self, table: str) -> StructType:
        self.schema(table)
        return self._full_schemas[table]

    def shape_column(self, columns: list[str]) -> Column | None:
        """Each record's shape, when schema evolution needs it and icetide's JVM classes are loaded
        (``columns``: the batch's, see :meth:`Formats.with_scan`)."""
        if not self.cfg.target.evolve_schema:
            return None
        return self.formats.shape(columns)

    def routed(self, rows: DataFrame) -> DataFrame:
        """The batch's records with their checks (one read of each value), their table or route error
        (:func:`routing.with_route`) and their shape: what the one pass and the usual path read."""
        cfg, formats = self.cfg, self.formats
        route = cfg.target.route
        rows = formats.with_scan(self.spark, formats.with_keys(rows))
        rows = routing.with_route(rows, cfg.target, self.reserved, cfg.source.max_value_bytes,
                                  formats.verdict(self.spark, rows.columns),
                                  formats.route_value(route, routing.raw_value(route)) if route else None)
        rows = formats.keys_as_text(rows)
        shape = self.shape_column(rows.columns)
        if shape is not None:  # taken with the checks, kept in the cache (8 bytes a record)
            rows = rows.withColumn(shapes.SHAPE, shape)
        return formats.without_scans(rows)

    def admit(self, rows: DataFrame) -> tuple[routing.Admission, int, bool]:
        """Admitted tables of the batch, the number of routing errors, and whether tables were cut off."""
        t = self.cfg.target
        fingerprinted = shapes.SHAPE in rows.columns
        seen = F.collect_set(shapes.SHAPE)
        shape_aggs = [F.size(seen).alias("n_shapes"), F.slice(seen, 1, shapes.MAX_SHAPES).alias("shapes")
                      ] if fingerprinted else []
        with_ids = ID in rows.columns
        if with_ids:  # the Avro schema ids of each table's records (those that passed the checks)
            shape_aggs.append(F.collect_set(F.when(F.col(routing.TABLE).isNotNull(), F.col(ID))).alias("ids"))
        self.batch_ids = {}
        if t.route is None:
            assert t.table is not None
            self.batch_shapes = {}
            failed = F.count_if(F.col(routing.TABLE).isNull()).alias("failed")
            r = rows.agg(failed, *shape_aggs).first()
            assert r is not None
            if fingerprinted:
                self.batch_shapes[t.table] = _shape_set(r)
            if with_ids:
                self.batch_ids[t.table] = sorted(int(i) for i in r["ids"])
            return routing.Admission(accepted=[t.table]), int(r["failed"]), False
        known = self.known_tables()
        col = F.col(routing.TABLE)
        limit = t.route.max_tables + 2
        # Known tables first, then new ones by name: admission is deterministic when a batch replays.
        groups = (rows.groupBy(col).agg(F.count(F.lit(1)).alias("count"), *shape_aggs)
                  .orderBy(col.isNull().desc(), col.isin(sorted(known)).desc(), col).limit(limit).collect())
        route_errors = sum(int(r["count"]) for r in groups if r[0] is None)
        self.route_counts = {str(r[0]): int(r["count"]) for r in groups if r[0] is not None}
        self.batch_shapes = {str(r[0]): _shape_set(r) for r in groups if r[0] is not None and fingerprinted}
        self.batch_ids = {str(r[0]): sorted(int(i) for i in r["ids"]) for r in groups if r[0] is not None and with_ids}
        routes = [str(r[0]) for r in groups if r[0] is not None]
        admission = routing.admit(routes, known, t, self.reserved)
        return admission, route_errors, len(groups) >= limit

    def prepare(self, rows: DataFrame, tables: list[str]) -> Prepared:
        """Create missing tables and evolve existing ones."""
        t = self.cfg.target
        known = self.known_tables()
        new = [x for x in tables if x not in known]
        infer_for = list(tables) if t.evolve_schema else [x for x in new if t.policy_for(x).schema_ddl is None]
        # A known table whose records all have shapes it already fits needs no inference.
        infer_for = [x for x in infer_for if x not in known or not self.shaped_rows(x)
                     or not self.shapes.covers(x, self.schema(x), self.batch_shapes.get(x))]
        self.inferred = sorted(infer_for)
        texts = {x: cdc.text_for_inference(c) for x in infer_for if (c := t.policy_for(x).cdc) is not None}
        json_for = infer_for if self.formats.infers else []
        # A plain change's shape is its row's; a Debezium row may be a JSON string inside the envelope,
        # whose fields no shape sees: such tables are inferred over every record (shaped_rows).
        whole = [x for x in json_for if not self.shaped_rows(x)]
        shaped = shapes.inference_sample(rows, routing.TABLE, whole) if shapes.SHAPE in rows.columns else None
        sample = rows if shaped is None else shaped
        inferred = inference.infer(self.spark, sample, routing.TABLE, json_for, texts) if json_for else {}
        self.declared = {x: d for x in tables if (d := self.formats.declared(
            self.batch_ids.get(x, []), t.policy_for(x).cdc)) is not None}
        for x, d in self.declared.items():  # types from the registry (Avro), with JSON's where a table has both
            inferred[x] = avro_types.merged([d, inferred[x]]) if x in inferred else d
        if t.field_names == "sanitize":
            inferred = {x: cast(StructType, names.sanitized_type(s)) for x, s in inferred.items()}
        out = Prepared([], self.take_created_before(), {})
        for ns in sorted({x.split(".")[0] for x in new}):  # once, before tables are created in parallel
            ensure_namespace(self.spark, self.catalog, ns)
        errors = dict(zip(new, self.parallel(lambda x: self.create(x, inferred.get(x), rows, shaped), new),
                          strict=True))
        for table in tables:
            if table not in known:
                err = errors[table]
                if err is not None:
                    out.refused[table] = ("table_policy", err)
                    continue
                out.created.append(table)
                known.add(table)
            out.plans.append(self._evolve(rows, table, inferred.get(table), shaped))
        return out

    def _evolve(self, rows: DataFrame, table: str, seen: StructType | None, shaped: DataFrame | None) -> TablePlan:
        t = self.cfg.target
        plan = TablePlan(table, self.schema(table))
        if not t.evolve_schema or seen is None:
            return plan
        evo = evolution.diff(plan.schema, seen, t.max_columns)
        if table in self.declared and not self.formats.infers:  # declared types: no values to look at
            _declared_widenings(evo, plan.schema, seen)
        else:
            self._check_values(rows, shaped, table, evo)
        if evo:
            evolution.apply(self.spark, self.q(table), plan.schema, evo)
            # foreachBatch frames belong to their own session, with its own catalog cache.
            rows.sparkSession.catalog.refreshTable(self.q(table))
            self._schemas.pop(table, None)
            plan.schema = self.schema(table)
            plan.evolved = evo.changes
        cdc_settings = t.policy_for(table).cdc
        cond = refused.rejected_condition(evo, self.formats.text(),
                                          lambda p, hit: self.formats.carries(p.parts, cdc_settings, hit))
        if cond is not None:
            plan.refused = (cond, refused.rejected_message(evo, t.max_columns))
        if cond is None and self.shaped_rows(table):
            self.shapes.settle(table, plan.schema, self.batch_shapes.get(table))
        else:
            self.shapes.forget(table)
        return plan

    def take_created_before(self) -> list[str]:
        """:attr:`created_before`, once."""
        made, self.created_before = self.created_before, []
        return made

    def create(self, table: str, inferred: StructType | None, rows: DataFrame | None = None,
               shaped: DataFrame | None = None) -> str | None:
        """Create ``table`` from its policy (or from its records in ``rows``: never typed by one
        outlier record, see :func:`icetide.ingest.value_checks.check_values`); an error message if its
        records cannot make it."""
        policy = self.cfg.target.policy_for(table)
        key = "target.tables" if table != self.cfg.target.table else "target"
        if policy.schema_ddl:
            try:
                parsed = _parse_datatype_string(policy.schema_ddl)
            except Exception as e:
                raise ConfigError(f"{key}.schema: not a valid Spark DDL schema: {e}") from None
            if not isinstance(parsed, StructType):
                raise ConfigError(f"{key}.schema: must be a list of columns like 'id STRING, ts TIMESTAMP'")
            schema = parsed
        else:
            if inferred is None:
                return (f"no JSON object among the records for {table} to create it from; give {key}.schema "
                        "or fix the records, then replay the dead letters")
            evo = evolution.diff(StructType([]), inferred, self.cfg.target.max_columns)
            if rows is not None and not (table in self.declared and not self.formats.infers):
                self._check_values(rows, shaped, table, evo)
            schema = StructType([StructField(p.parts[0], dt, True, {"comment": evo.comments[p]}
                                             if p in evo.comments else None) for p, dt in evo.added])
        have = {f.name: f.dataType for f in schema.fields}
        for transform in policy.partition_by:
            m = TRANSFORM_RE.fullmatch(transform)
            assert m is not None
            column = m.group("col1") or m.group("col2") or m.group("col3")
            if column not in have:
                return (f"{key}.partition_by: {transform} needs column {column!r}, which the records for {table} "
                        "do not have; give the column in the schema or change the partitioning, then replay")
        for c in policy.sort_by:
            if c not in have:
                return f"{key}.sort_by: column {c!r} is not in the records for {table}"
        full = self._with_kafka(schema)
        if policy.cdc is not None:
            missing = [k for k in policy.cdc.primary_key if k not in have]
            if missing:
                return (f"{key}.cdc.primary_key: column(s) {missing} are not in the records for {table}; "
                        "fix the key or give the schema, then replay")
            full = StructType([*full.fields, StructField(cdc.ORDERING, cdc.ordering_type(policy.cdc), True),
                               StructField(cdc.POSITION, cdc.POSITION_TYPE, True)])
        try:
            props = policy.table_properties()
            renamed = names.originals(full)
            if renamed:  # where the producers' names live (column comments are only documentation)
                props = {**props, names.PROPERTY: json.dumps(renamed, ensure_ascii=False, sort_keys=True)}
            if create_table(self.spark, self.catalog, table, full, policy.partition_by, props, policy.sort_by):
                self.ledger.created(self.q(table))
            if policy.cdc is not None and policy.cdc.tombstones:
                ensure_table(self.spark, self.catalog, f"{table}_tombstones",
                             cdc.tombstone_schema(full, policy.cdc), [], {**STREAMING_TABLE_DEFAULTS})
        except Exception as e:
            text = str(e)
            if "Invalid" in text or "Cannot" in text or "IllegalArgument" in text or "ValidationException" in text:
                return f"creating {table} failed: {text.splitlines()[0][:300]}"
            raise
        return None

    def shaped_rows(self, table: str) -> bool:
        """Whether a record's shape is its row's: an append table's record, or a plain CDC change (the
        value is the row). A Debezium change's row is a side of its envelope, which may come as a JSON
        string (MongoDB's connector, a double-encoded ``payload``) whose fields the shape never sees:
        such tables are inferred every batch, over every record."""
        c = self.cfg.target.policy_for(table).cdc
        return c is None or c.format == "plain"

    def _check_values(self, rows: DataFrame, shaped: DataFrame | None, table: str, evo: evolution.Evolution) -> None:
        """:func:`value_checks.check_values` over ``table``'s records; its shapes vouch for them only
        where a record's shape is its row's (:meth:`shaped_rows`)."""
        def of(frame: DataFrame) -> DataFrame:
            return frame.where(F.col(routing.TABLE) == F.lit(table))
        value_checks.check_values(of(rows), evo, self._row_text(table),
                                  of(shaped) if shaped is not None and self.shaped_rows(table) else None)

    def _row_text(self, table: str) -> Column | None:
        """The JSON text a record's columns come from: the value, or a CDC change's row."""
        c = self.cfg.target.policy_for(table).cdc
        return cdc.text_for_inference(c) if c is not None else None

    def _with_kafka(self, schema: StructType) -> StructType:
        empty = empty_frame(self.spark, decode.DEAD_LETTER_SCHEMA).withColumn(
            decode.PARSED, F.lit(None).cast(schema))
        return decode.good_rows(empty, schema, self.cfg.target.kafka_metadata_columns).schema


def _declared_widenings(evo: evolution.Evolution, have: StructType, seen: StructType) -> None:
    """Widen what a declared (registry) type widens: no value needs a look (unlike JSON's inference)."""
    evo.int_candidates.clear()
    evo.decimal_candidates.clear()
    done = {p.parts for p, _, _ in evo.widened}
    for parts, old, new in avro_types.fit(have, seen).widen:
        if parts not in done:
            evo.widened.append((evolution.Path(parts, "element" in parts), old, new))


def _shape_set(row: Row) -> frozenset[int] | None:
    """The shapes of an aggregate row; None when there were more than could be listed."""
    if row["n_shapes"] > shapes.MAX_SHAPES:
        return None
    return frozenset(int(x) for x in row["shapes"])
