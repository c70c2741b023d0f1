"""The ``foreachBatch`` writer: route, evolve, decode, dedupe against each table's watermark, commit.

One micro-batch commits each table at most once, tagged with the pipeline, run, batch and offsets
(see :mod:`icetide.ingest.offsets`). A replayed batch is filtered per table against the watermark
the table already holds, so it can never land twice, including after a crash between two tables'
commits. Per batch:

1. route every record (:mod:`icetide.ingest.routing`); admit the distinct tables;
2. infer the records' schema per table in one pass and create or evolve tables
   (:mod:`icetide.ingest.evolution`);
3. parse each table's records against its schema and append them (tables in parallel);
4. append everything that could not be written to the dead-letter table, with the reason;
5. append the batch's figures to ``stream.batch_log_table``.

The batch is cached once (memory, spilling to disk), so Kafka is read once per batch. With routing,
a batch whose tables exist and whose record shapes are known is first written in one pass with no
cache (:mod:`icetide.ingest.one_pass`); steps 1–5 then run only on what that pass left.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, TypeVar

from pyspark import StorageLevel
from pyspark.sql import Column, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StructField,
    StructType,
    _parse_datatype_string,
)

from icetide.config.base import STREAMING_TABLE_DEFAULTS, TRANSFORM_RE, interval_seconds
from icetide.config.models import PipelineConfig
from icetide.config.target import CdcSettings
from icetide.errors import ConfigError
from icetide.ingest import cdc, checkpoint, decode, evolution, inflight, multi_write, one_pass, routing, shapes
from icetide.ingest.batch_log import BatchLog, BatchResult, Laps, PipelineCounters
from icetide.ingest.offsets import (
    BatchRanges,
    Watermark,
    commit_properties,
    read_watermark,
    set_property,
)
from icetide.ingest.tables import (
    create_table,
    empty_frame,
    ensure_namespace,
    ensure_table,
    list_tables,
    table_exists,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

#: With routing, each table's share of a batch is written by one task per this many records.
ROWS_PER_WRITE_TASK = 200_000

@dataclass
class TablePlan:
    """One routed table of one batch: its record schema and the fields evolution refused."""

    table: str  # namespace.table
    schema: StructType
    refused: tuple[Column, Column] | None = None
    evolved: list[str] = field(default_factory=list)


@dataclass
class Pending:
    """A table's commit for one batch: the watermark it will hold, its snapshot tags, and (when a
    replay finds part of the batch already in the table) the filter keeping only the new rows."""

    table: str  # catalog.namespace.table
    watermark: Watermark
    tags: dict[str, str]
    keep: Column | None


class BatchWriter:
    """Callable passed to ``DataStreamWriter.foreachBatch``."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, run_id: str,
                 on_commit: Callable[[str, Watermark], None] | None = None) -> None:
        self.spark = spark
        self.cfg = cfg
        self.run_id = run_id
        self.catalog = cfg.catalog.name
        self.dead_letter_table = self.q(cfg.dead_letter.table)
        #: icetide's own tables: never a routing destination.
        self.reserved = {t for t in (cfg.dead_letter.table, cfg.dead_letter.replay_log(), cfg.health.history_table,
                                     cfg.maintenance.log_table, cfg.stream.batch_log_table) if t}
        self._schemas: dict[str, StructType] = {}  # namespace.table → record schema (no _kafka_ columns)
        self._full_schemas: dict[str, StructType] = {}  # namespace.table → every column, in order
        self._known: set[str] | None = None  # tables that exist in the target namespaces
        self._dead_letters_ready = False
        self._batch_log = BatchLog(spark, cfg, run_id)
        self._route_counts: dict[str, int] = {}
        #: The batch's record shapes per table (None: too many, or not fingerprinted), and the
        #: shapes each table is known to fit: inference only for tables with a new shape.
        self._batch_shapes: dict[str, frozenset[int] | None] = {}
        self._inferred: list[str] = []  # this batch's tables that went through inference
        self._shapes = shapes.KnownShapes()
        self._shape_ok: bool | None = None
        self._locations: dict[str, str] = {}
        self._mirror_every = interval_seconds(cfg.stream.watermark_mirror_interval)
        self._mirrored_at: dict[str, float] = {}
        self._unmirrored: dict[str, Watermark] = {}
        self._watermarks: dict[str, Watermark | None] = {}
        self._multi: bool | None = None
        self._recent: dict[str, int] = {}  # catalog.namespace.table → the last batch committed to it
        self._alone: dict[str, str] = {}  # table → why the multi-table job refused it (logged once)
        self.counters = PipelineCounters()
        self.on_commit = on_commit
        #: When the batch being written started (epoch ms), None between batches: orphan cleanup
        #: never considers files younger than this.
        self.in_flight_since_ms: int | None = None

    def q(self, table: str) -> str:
        return f"{self.catalog}.{table}"

    # -- tables -----------------------------------------------------------------------------
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

    def tables(self) -> list[str]:
        """Tables written by this pipeline so far, plus the dead-letter table (namespace.table)."""
        return sorted(self.known_tables() | {self.cfg.dead_letter.table})

    def _schema(self, table: str) -> StructType:
        """The table's record schema: its columns minus Kafka and CDC metadata."""
        if table not in self._schemas:
            full = self.spark.table(self.q(table)).schema
            meta = {*decode.KAFKA_COLUMNS, *cdc.META_COLUMNS}
            self._full_schemas[table] = full
            self._schemas[table] = StructType([f for f in full.fields if f.name not in meta])
        return self._schemas[table]

    def _full_schema(self, table: str) -> StructType:
        self._schema(table)
        return self._full_schemas[table]

    def _with_kafka(self, schema: StructType) -> StructType:
        empty = empty_frame(self.spark, decode.DEAD_LETTER_SCHEMA).withColumn(
            decode.PARSED, F.lit(None).cast(schema))
        return decode.good_rows(empty, schema, self.cfg.target.kafka_metadata_columns).schema

    # -- watermarks -------------------------------------------------------------------------
    def watermark(self, table: str) -> Watermark | None:
        if table not in self._watermarks:
            self._watermarks[table] = (
                read_watermark(self.spark, table, self.cfg.name) if table_exists(self.spark, table) else None
            )
        return self._watermarks[table]

    def forget_watermarks(self) -> None:
        """Re-read watermarks and schemas from the tables on next use (after a failed commit)."""
        self._watermarks.clear()
        self._schemas.clear()
        self._known = None
        self._shapes.forget()

    # -- the batch --------------------------------------------------------------------------
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        self.in_flight_since_ms = int(time.time() * 1000)
        try:
            result = self._process(df, batch_id, started)
        except BaseException:
            self.forget_watermarks()
            raise
        finally:
            self.in_flight_since_ms = None
        if result is not None:
            self.counters.add(result)
            log.info(json.dumps(result.as_event(self.cfg.name)))
            self._batch_log.append(result)

    def _process(self, df: DataFrame, batch_id: int, started: float) -> BatchResult | None:
        cfg = self.cfg
        rows = routing.with_route(decode.with_kafka_columns(df), cfg.target, self.reserved,
                                  cfg.source.max_value_bytes)
        ranges = self._ranges(batch_id, rows)
        if not ranges.ranges:
            return None
        shape = self._shape_column()
        if shape is not None:  # computed with the routing value, kept in the cache (8 bytes a record)
            rows = rows.withColumn(shapes.SHAPE, shape)
        lap = Laps()
        done = self._one_pass(rows, batch_id, ranges, lap)
        if done is not None and not done.rest:
            return BatchResult(batch_id, sum(done.committed.values()), done.committed, 0, [],
                               time.monotonic() - started, max(done.ts_max) if done.ts_max else None,
                               timings=lap.timings)
        if cfg.target.route is not None:
            # Clustered by table, each table's scan of the cache skips the column batches of the
            # others (in-memory partition pruning on the batch min/max of the table column).
            rows = rows.sortWithinPartitions(routing.TABLE)
        # DESER: PySpark's MEMORY_AND_DISK is the *serialized* level; every scan of the cache (one
        # per table) would Java-deserialize the whole batch again.
        rows = rows.persist(StorageLevel.MEMORY_AND_DISK_DESER)
        try:
            return self._process_cached(rows, batch_id, ranges, started, lap, done)
        finally:
            rows.unpersist()

    def _one_pass(self, rows: DataFrame, batch_id: int, ranges: BatchRanges, lap: Laps) -> one_pass.Result | None:
        """Write the records of recently written tables in one pass (see :mod:`icetide.ingest.one_pass`);
        None when no table qualifies."""
        cfg, t = self.cfg, self.cfg.target
        if t.route is None or not cfg.stream.one_pass_write or not self._multi_table_write():
            return None
        if t.evolve_schema and shapes.SHAPE not in rows.columns:
            return None
        candidates = [x for x in sorted(self.known_tables())
                      if batch_id - self._recent.get(self.q(x), batch_id - one_pass.RECENT_BATCHES - 1)
                      <= one_pass.RECENT_BATCHES
                      and t.policy_for(x).cdc is None
                      and (not t.evolve_schema or self._shapes.knows(x, self._schema(x)))]
        if not candidates:
            return None
        if len(candidates) > one_pass.MAX_TARGETS:
            candidates = sorted(sorted(candidates, key=lambda x: -self._recent[self.q(x)])[:one_pass.MAX_TARGETS])
        job = multi_write.MultiTableWrite(self.spark)

        def add(table: str) -> Pending | None:
            pending = self._begin(self.q(table), batch_id, ranges)
            if pending is None or pending.keep is not None:  # a replay: the usual path sorts it out
                return None
            reason = job.add_target(self.catalog, table, self._full_schema(table), pending.tags)
            if reason is not None:
                if self._alone.get(table) != reason:
                    log.info("%s is written by its own Spark job: %s", table, reason)
                    self._alone[table] = reason
                return None
            return pending

        staged = {x: p for x, p in zip(candidates, self._parallel(add, candidates), strict=True) if p is not None}
        if not staged:
            return None
        order = sorted(staged)
        tasks = max(1, -(-sum(end - start for start, end in ranges.ranges.values()) // one_pass.ROWS_PER_TASK))
        if tasks < len(ranges.ranges):  # the Kafka source reads one task per topic partition
            rows = rows.coalesce(tasks)
        targets = [one_pass.Target(x, self._schema(x), self._full_schema(x)) for x in order]
        frame, struct_of = one_pass.frame(rows, targets, t.kafka_metadata_columns, cfg.source.max_value_bytes)
        lap("one_pass_plan")
        since = self.in_flight_since_ms or int(time.time() * 1000)
        for x in order:
            inflight.mark(self.spark, self._location(self.q(x)), cfg.name, self.run_id, since)
        try:
            log.info("writing batch %s to %d tables in one pass", batch_id, len(order))
            job.run_routed(frame, order, struct_of, shapes.MAX_SHAPES)
        except BaseException:
            for x in order:
                inflight.clear(self.spark, self._location(self.q(x)), cfg.name)
            raise
        lap("one_pass_job")
        result = one_pass.Result(rest=job.unrouted() > 0)
        ready: list[str] = []
        for x in order:
            w = job.written(x)
            fits = not t.evolve_schema or self._shapes.covers(x, self._schema(x), job.shapes(x))
            if w.good + w.bad > 0 and fits:
                ready.append(x)
                continue
            job.abort(x)  # no record, or a shape the table may not fit: the usual path infers it
            inflight.clear(self.spark, self._location(self.q(x)), cfg.name)
            result.rest = result.rest or w.good + w.bad > 0

        def commit(table: str) -> multi_write.Written:
            log.info("committing batch %s to %s", batch_id, self.q(table))
            try:
                job.commit(table)
            finally:
                inflight.clear(self.spark, self._location(self.q(table)), cfg.name)
            w = job.written(table)
            self._finish(staged[table], w.ts_max)
            return w

        for x, w in zip(ready, self._parallel(commit, ready), strict=True):
            result.committed[x] = w.good
            if w.ts_max is not None:
                result.ts_max.append(w.ts_max)
            if w.bad:
                result.with_bad.append(x)
                result.rest = True
        lap("one_pass_commit")
        return result

    def _process_cached(self, batch: DataFrame, batch_id: int, ranges: BatchRanges,
                        started: float, lap: Laps, done: one_pass.Result | None) -> BatchResult:
        cfg = self.cfg
        table_col = F.col(routing.TABLE)
        timings = lap.timings
        # What the one pass committed is done, except for its records that failed (dead letters).
        rows = batch
        if done is not None and done.committed:
            rows = batch.where(table_col.isNull() | ~table_col.isin(sorted(done.committed)))

        admission, route_errors, overflow = self._admit(rows)
        lap("admit")
        rejected_tables = dict(admission.rejected)
        plans, created, policy_errors = self._prepare(rows, admission.accepted)
        lap("prepare")
        rejected_tables.update(policy_errors)
        admission_needs_dead_letters = route_errors > 0 or bool(rejected_tables) or overflow

        # Records whose table was not admitted (or could not be created) are dead letters too.
        admitted = [p.table for p in plans]
        route_error = F.col(routing.ROUTE_ERROR)
        route_message = F.col(routing.ROUTE_MESSAGE)
        for t, (cls, msg) in sorted(rejected_tables.items()):
            route_error = F.when(table_col == F.lit(t), F.lit(cls)).otherwise(route_error)
            route_message = F.when(table_col == F.lit(t), F.lit(msg)).otherwise(route_message)
        if cfg.target.route is not None:
            unlisted = table_col.isNotNull() & ~table_col.isin(admitted) & ~table_col.isin(sorted(rejected_tables))
            limit_msg = (f"target.route.max_tables={cfg.target.route.max_tables} reached: the table was not "
                         "created; raise the limit and replay the dead letters")
            route_error = F.when(unlisted, F.lit("table_limit")).otherwise(route_error)
            route_message = F.when(unlisted, F.lit(limit_msg)).otherwise(route_message)

        written: dict[str, int] = {}
        skipped: list[str] = []
        ts_max: list[int] = []
        bad_frames: list[DataFrame] = []
        release: list[DataFrame] = []

        def parse(plan: TablePlan) -> DataFrame:
            subset = rows.where(table_col == F.lit(plan.table))
            routed = self._route_counts.get(plan.table)
            if routed is not None:
                # One write task per ROWS_PER_WRITE_TASK records: fewer, larger files and less
                # overhead per table when a batch fans out thinly to many tables.
                subset = subset.coalesce(max(1, -(-routed // ROWS_PER_WRITE_TASK)))
            policy = cfg.target.policy_for(plan.table)
            extra = [plan.refused] if plan.refused is not None else []
            if policy.cdc is not None:
                subset = cdc.unwrap(subset, policy.cdc)
                extra.append(cdc.errors(policy.cdc, decode.PARSED))
            parsed = decode.parse(subset, plan.schema, cfg.source.max_value_bytes, extra)
            if policy.cdc is not None:  # unwrapping is costly: the MERGE and the dead letters share it
                parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK_DESER)
                release.append(parsed)
            return parsed

        def write(plan: TablePlan) -> None:
            parsed = parse(plan)
            policy = cfg.target.policy_for(plan.table)
            good = decode.is_good()
            stats = Observation(f"icetide_{batch_id}_{uuid.uuid4().hex[:8]}")
            observed = parsed.observe(stats, F.count_if(good).alias("good"), F.count_if(~good).alias("bad"),
                                      F.max(F.unix_millis("_kafka_timestamp")).alias("ts_max"))
            meta = cfg.target.kafka_metadata_columns
            if policy.cdc is None:
                n = self._commit(self.q(plan.table), observed.where(good),
                                 lambda d: decode.good_rows(d, plan.schema, meta), batch_id, ranges, stats)
            else:
                settings = policy.cdc
                n = self._commit(self.q(plan.table), observed.where(good),
                                 lambda d: decode.good_rows(d, plan.schema, meta, [cdc.OP, cdc.ORDERING]),
                                 batch_id, ranges, stats,
                                 apply=lambda changes, tags: self._merge(plan.table, changes, tags, settings,
                                                                         batch_id, ranges))
            if n is None:
                skipped.append(plan.table)
                c = parsed.agg(F.count_if(~good).alias("bad"),
                               F.max(F.unix_millis("_kafka_timestamp")).alias("ts_max")).first()
                totals = c.asDict() if c is not None else {"bad": 0, "ts_max": None}
            else:
                written[plan.table] = n
                totals = stats.get
            if totals.get("ts_max") is not None:
                ts_max.append(int(totals["ts_max"]))  # type: ignore[arg-type]
            if totals["bad"]:
                bad_frames.append(decode.dead_letter_rows(parsed.where(~good), cfg.name, F.lit(plan.table)))

        def write_together(candidates: list[TablePlan]) -> list[TablePlan]:
            """Append ``candidates`` in one Spark job; returns the plans left to write one by one."""
            job = multi_write.MultiTableWrite(self.spark)

            def add(plan: TablePlan) -> tuple[Pending, DataFrame] | None:
                pending = self._begin(self.q(plan.table), batch_id, ranges)
                if pending is None or pending.keep is not None:  # a replay: the per-table path sorts it out
                    return None
                parsed = parse(plan)
                frame = multi_write.frame(
                    parsed, decode.is_good(), F.unix_millis("_kafka_timestamp"),
                    decode.good_columns(plan.schema, cfg.target.kafka_metadata_columns), self._full_schema(plan.table))
                reason = job.add(self.catalog, plan.table, frame, pending.tags)
                if reason is not None:
                    if self._alone.get(plan.table) != reason:
                        log.info("%s is written by its own Spark job: %s", plan.table, reason)
                        self._alone[plan.table] = reason
                    return None
                return pending, parsed

            added = self._parallel(add, candidates)
            staged = {p.table: a for p, a in zip(candidates, added, strict=True) if a is not None}
            alone = [p for p, a in zip(candidates, added, strict=True) if a is None]
            lap("together_plan")
            if not staged:
                return alone
            since = self.in_flight_since_ms or int(time.time() * 1000)
            for table in staged:
                inflight.mark(self.spark, self._location(self.q(table)), cfg.name, self.run_id, since)
            try:
                log.info("writing batch %s to %d tables in one job", batch_id, len(staged))
                job.run()
            except BaseException:
                for table in staged:
                    inflight.clear(self.spark, self._location(self.q(table)), cfg.name)
                raise
            lap("together_job")

            def commit(table: str) -> None:
                pending, parsed = staged[table]
                log.info("committing batch %s to %s", batch_id, pending.table)
                try:
                    job.commit(table)
                finally:
                    inflight.clear(self.spark, self._location(pending.table), cfg.name)
                w = job.written(table)
                self._finish(pending, w.ts_max)
                written[table] = w.good
                if w.ts_max is not None:
                    ts_max.append(w.ts_max)
                if w.bad:
                    bad_frames.append(decode.dead_letter_rows(parsed.where(~decode.is_good()), cfg.name,
                                                              F.lit(table)))

            self._parallel(commit, list(staged))
            return alone

        alone = plans
        appends = [p for p in plans if cfg.target.policy_for(p.table).cdc is None]
        if cfg.target.route is not None and len(appends) > 1 and self._multi_table_write():
            merges = [p for p in plans if cfg.target.policy_for(p.table).cdc is not None]
            alone = merges + write_together(appends)
            lap("together_commit")
        self._parallel(write, alone)

        lap("write")
        if done is not None:
            written.update(done.committed)
            ts_max.extend(done.ts_max)
            for x in done.with_bad:
                parsed = decode.parse(batch.where(table_col == F.lit(x)), self._schema(x), cfg.source.max_value_bytes)
                bad_frames.append(decode.dead_letter_rows(parsed.where(~decode.is_good()), cfg.name, F.lit(x)))
        if admission_needs_dead_letters:
            flagged = rows.withColumn("_e", route_error).withColumn("_m", route_message).where(F.col("_e").isNotNull())
            bad_frames.append(decode.dead_letter_rows(flagged, cfg.name, table_col, "_e", "_m"))
        dead, classes = 0, dict[str, int]()
        if bad_frames:
            d = self._dead_letters(bad_frames, batch_id, ranges)
            if d is None:
                skipped.append(self.cfg.dead_letter.table)
            else:
                dead, classes = d
        lap("dead_letters")
        for frame in release:
            frame.unpersist()
        records = sum(written.values()) + dead
        return BatchResult(batch_id, records, written, dead, skipped, time.monotonic() - started,
                           max(ts_max) if ts_max else None, classes,
                           {p.table: p.evolved for p in plans if p.evolved}, created, timings, self._inferred)

    def _shape_column(self) -> Column | None:
        """Each record's shape, when schema evolution needs it and icetide's JVM classes are loaded."""
        if not self.cfg.target.evolve_schema:
            return None
        if self._shape_ok is False:
            return None
        col = shapes.column(self.spark, F.col("value"))
        self._shape_ok = col is not None
        return col

    def _multi_table_write(self) -> bool:
        """Whether routed appends share one Spark job (config, and icetide's JVM classes present)."""
        if self._multi is None:
            self._multi = self.cfg.stream.multi_table_write and multi_write.available(self.spark)
            if self.cfg.stream.multi_table_write and not self._multi:
                log.warning("icetide's JVM classes are not on the classpath (run `icetide setup`, or add "
                            "%s to spark.jars): each table is written by its own Spark job",
                            "$ICETIDE_HOME/jars/icetide/icetide-jvm.jar")
        return self._multi

    def _parallel(self, fn: Callable[[T], R], items: list[T]) -> list[R]:
        """``fn`` over ``items``, ``stream.table_write_parallelism`` at a time; results in order."""
        workers = min(self.cfg.stream.table_write_parallelism, len(items))
        if workers <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(workers, thread_name_prefix="icetide-table") as pool:
            return list(pool.map(fn, items))

    def _admit(self, rows: DataFrame) -> tuple[routing.Admission, int, bool]:
        """Admitted tables of the batch, the number of routing errors, and whether tables were cut off."""
        t = self.cfg.target
        fingerprinted = shapes.SHAPE in rows.columns
        seen = F.collect_set(shapes.SHAPE)
        shape_aggs = [F.size(seen).alias("n_shapes"), F.slice(seen, 1, shapes.MAX_SHAPES).alias("shapes")]
        if t.route is None:
            assert t.table is not None
            self._batch_shapes = {}
            if fingerprinted:
                r = rows.agg(*shape_aggs).first()
                assert r is not None
                self._batch_shapes[t.table] = _shape_set(r)
            return routing.Admission(accepted=[t.table]), 0, False
        known = self.known_tables()
        col = F.col(routing.TABLE)
        limit = t.route.max_tables + 2
        # Known tables first, then new ones by name: admission is deterministic when a batch replays.
        groups = (rows.groupBy(col).agg(F.count(F.lit(1)).alias("count"), *(shape_aggs if fingerprinted else []))
                  .orderBy(col.isNull().desc(), col.isin(sorted(known)).desc(), col).limit(limit).collect())
        route_errors = sum(int(r["count"]) for r in groups if r[0] is None)
        self._route_counts = {str(r[0]): int(r["count"]) for r in groups if r[0] is not None}
        self._batch_shapes = {str(r[0]): _shape_set(r) for r in groups if r[0] is not None and fingerprinted}
        routes = [str(r[0]) for r in groups if r[0] is not None]
        admission = routing.admit(routes, known, t, self.reserved)
        return admission, route_errors, len(groups) >= limit

    def _prepare(self, rows: DataFrame, tables: list[str]
                 ) -> tuple[list[TablePlan], list[str], dict[str, tuple[str, str]]]:
        """Create missing tables and evolve existing ones; plans to write, created, refused tables."""
        t = self.cfg.target
        known = self.known_tables()
        new = [x for x in tables if x not in known]
        infer_for = list(tables) if t.evolve_schema else [x for x in new if t.policy_for(x).schema_ddl is None]
        # A known table whose records all have shapes it already fits needs no inference.
        infer_for = [x for x in infer_for if x not in known or t.policy_for(x).cdc is not None
                     or not self._shapes.covers(x, self._schema(x), self._batch_shapes.get(x))]
        self._inferred = sorted(infer_for)
        texts = {x: cdc.text_for_inference(c) for x in infer_for if (c := t.policy_for(x).cdc) is not None}
        inferred = evolution.infer(self.spark, rows, routing.TABLE, infer_for, texts) if infer_for else {}
        plans: list[TablePlan] = []
        created: list[str] = []
        refused: dict[str, tuple[str, str]] = {}
        for ns in sorted({x.split(".")[0] for x in new}):  # once, before tables are created in parallel
            ensure_namespace(self.spark, self.catalog, ns)
        errors = dict(zip(new, self._parallel(lambda x: self._create(x, inferred.get(x)), new), strict=True))
        for table in tables:
            if table not in known:
                err = errors[table]
                if err is not None:
                    refused[table] = ("table_policy", err)
                    continue
                created.append(table)
                known.add(table)
            schema = self._schema(table)
            plan = TablePlan(table, schema)
            seen = inferred.get(table)
            if t.evolve_schema and seen is not None:
                evo = evolution.diff(schema, seen, t.max_columns)
                evolution.check_values(rows.where(F.col(routing.TABLE) == F.lit(table)), evo)
                if evo:
                    evolution.apply(self.spark, self.q(table), schema, evo)
                    # foreachBatch frames belong to their own session, with its own catalog cache.
                    rows.sparkSession.catalog.refreshTable(self.q(table))
                    self._schemas.pop(table, None)
                    plan.schema = self._schema(table)
                    plan.evolved = evo.changes
                cond = evolution.rejected_condition(evo)
                if cond is not None:
                    plan.refused = (cond, evolution.rejected_message(evo, t.max_columns))
                if cond is None and t.policy_for(table).cdc is None:
                    self._shapes.settle(table, plan.schema, self._batch_shapes.get(table))
                else:
                    self._shapes.forget(table)
            plans.append(plan)
        return plans, created, refused

    def _create(self, table: str, inferred: StructType | None) -> str | None:
        """Create ``table`` from its policy; an error message if its records cannot make it."""
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
            schema = StructType([StructField(p.parts[0], dt, True) for p, dt in evo.added])
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
            full = StructType([*full.fields, StructField(cdc.ORDERING, cdc.ordering_type(policy.cdc), True)])
        try:
            if create_table(self.spark, self.catalog, table, full, policy.partition_by,
                            policy.table_properties(), policy.sort_by):
                self._watermarks[self.q(table)] = None  # new and empty: nothing to read
            if policy.cdc is not None and policy.cdc.tombstones:
                ensure_table(self.spark, self.catalog, f"{table}_tombstones",
                             cdc.tombstone_schema(full, policy.cdc), [], {**STREAMING_TABLE_DEFAULTS})
        except Exception as e:
            text = str(e)
            if "Invalid" in text or "Cannot" in text or "IllegalArgument" in text or "ValidationException" in text:
                return f"creating {table} failed: {text.splitlines()[0][:300]}"
            raise
        return None

    def _dead_letters(self, frames: list[DataFrame], batch_id: int,
                      ranges: BatchRanges) -> tuple[int, dict[str, int]] | None:
        self._ensure_dead_letter_table()
        allrows = reduce(lambda a, b: a.unionByName(b), frames)
        by_class = Observation(f"icetide_dlq_{batch_id}_{uuid.uuid4().hex[:8]}")
        observed = allrows.observe(by_class, *[F.count_if(F.col("error_class") == F.lit(c)).alias(c)
                                               for c in decode.ERROR_CLASSES])
        n = self._commit(self.dead_letter_table, observed, lambda d: d, batch_id, ranges, None)
        if n is None:
            return None
        return n, {k: int(v) for k, v in by_class.get.items() if v}

    def _merge(self, table: str, changes: DataFrame, tags: dict[str, str], c: CdcSettings, batch_id: int,
               ranges: BatchRanges) -> None:
        """One MERGE of the batch's newest change per key, tagged; then the deletes' tombstones."""
        tomb = f"{table}_tombstones"
        # Read tombstones through the batch's own session, freshly: its catalog cache is the one
        # the tombstone MERGEs update (another session's cache may hold an older version).
        session = changes.sparkSession
        changes = changes.persist(StorageLevel.MEMORY_AND_DISK_DESER)
        try:
            latest = cdc.latest_per_key(changes, c)
            if c.tombstones and table_exists(session, self.q(tomb)):
                session.catalog.refreshTable(self.q(tomb))
                latest = cdc.not_buried(latest, session.table(self.q(tomb)), c)
            latest = latest.persist(StorageLevel.MEMORY_AND_DISK_DESER)
            try:
                cdc.merge_retrying_conflicts(self.spark, tags, latest, self.q(table), c)
                if c.tombstones:  # appended (cheap); readers take the newest delete per key
                    deletes = latest.where(F.col(cdc.OP) == "delete").select(*c.primary_key, cdc.ORDERING)
                    self._commit(self.q(tomb), deletes, lambda d: d, batch_id, ranges)
            finally:
                latest.unpersist()
        finally:
            changes.unpersist()

    def _ensure_dead_letter_table(self) -> None:
        if self._dead_letters_ready:
            return
        table = self.cfg.dead_letter.table
        ensure_table(self.spark, self.catalog, table, decode.DEAD_LETTER_SCHEMA, ["days(_kafka_timestamp)"],
                     {**STREAMING_TABLE_DEFAULTS})
        have = self.spark.table(self.q(table)).schema
        missing = [f for f in decode.DEAD_LETTER_SCHEMA.fields if f.name not in have.fieldNames()]
        if missing:  # a dead-letter table from an older icetide: add the new columns
            evo = evolution.Evolution(added=[(evolution.Path((f.name,)), f.dataType) for f in missing])
            evolution.apply(self.spark, self.q(table), have, evo)
        self._dead_letters_ready = True

    def _ranges(self, batch_id: int, parsed: DataFrame) -> BatchRanges:
        """The batch's offsets from Spark's offset log; a scan of the batch only as a fallback."""
        location = self.cfg.checkpoint_dir()
        offsets = checkpoint.batch_offsets(self.spark, location, batch_id)
        if offsets is None:
            log.warning("offset log of batch %s not readable in %s; scanning the batch", batch_id, location)
            return _scan_ranges(parsed)
        planned = checkpoint.batch_time_ms(self.spark, location, batch_id)
        return BatchRanges(offsets, planned_at_ms=planned)

    def _begin(self, table: str, batch_id: int, ranges: BatchRanges) -> Pending | None:
        """The commit ``table`` gets from this batch; None if the table already holds the whole batch."""
        wm = self.watermark(table)
        if wm is not None and wm.covers(ranges):
            log.info("batch %s already in %s (watermark %s); skipped", batch_id, table, wm.encode())
            return None
        new = Watermark(offsets=(wm or Watermark()).advanced(ranges), run=self.run_id, batch=batch_id,
                        batch_ranges=ranges, committed_at_ms=int(time.time() * 1000))
        return Pending(table, new, commit_properties(self.cfg.name, self.run_id, batch_id, ranges, new.offsets),
                       _not_below(wm, ranges) if wm is not None else None)

    def _finish(self, p: Pending, ts_max: int | None) -> None:
        """After ``p`` committed: remember, mirror and report its watermark."""
        new = p.watermark
        new.committed_at_ms = int(time.time() * 1000)
        new.kafka_ts_max = ts_max
        self._watermarks[p.table] = new
        self._recent[p.table] = new.batch
        self._mirror(p.table, new)
        if self.on_commit is not None:
            self.on_commit(p.table, new)

    def _commit(self, table: str, rows: DataFrame, project: Callable[[DataFrame], DataFrame],
                batch_id: int, ranges: BatchRanges, stats: Observation | None = None,
                apply: Callable[[DataFrame, dict[str, str]], None] | None = None) -> int | None:
        """Write the rows not yet in ``table`` (append, or ``apply`` e.g. a MERGE) tagged with the
        batch's offsets; None if the table already holds the whole batch."""
        p = self._begin(table, batch_id, ranges)
        if p is None:
            return None
        if p.keep is not None:
            rows = rows.where(p.keep)
        counted = Observation(f"icetide_{batch_id}_{uuid.uuid4().hex[:8]}")
        log.info("committing batch %s to %s", batch_id, table)
        out = project(rows).observe(counted, F.count(F.lit(1)).alias("n"))
        where = self._location(table)
        inflight.mark(self.spark, where, self.cfg.name, self.run_id,
                      self.in_flight_since_ms or p.watermark.committed_at_ms)
        try:
            if apply is not None:
                apply(out, p.tags)
            else:
                writer = out.writeTo(table)
                for k, v in p.tags.items():
                    writer = writer.option(f"snapshot-property.{k}", v)
                writer.append()
        finally:
            inflight.clear(self.spark, where, self.cfg.name)
        ts = stats.get.get("ts_max") if stats is not None else None  # filled in by the write that just finished
        self._finish(p, int(ts) if ts is not None else None)
        return int(counted.get["n"])

    def _location(self, table: str) -> str:
        if table not in self._locations:
            self._locations[table] = inflight.location(self.spark, table)
        return self._locations[table]

    def _mirror(self, table: str, wm: Watermark, force: bool = False) -> None:
        """Copy the watermark into a table property so it outlives snapshot expiry.

        It costs a commit, so it happens at most every ``stream.watermark_mirror_interval`` per
        table (the snapshot summary is the ledger; maintenance mirrors before expiring snapshots).
        """
        now = time.monotonic()
        # The first mirror of a run waits an interval too: the snapshot summary already holds it,
        # and a fan-out's first batch would otherwise pay one extra commit per table.
        if not force and now - self._mirrored_at.setdefault(table, now) < self._mirror_every:
            self._unmirrored[table] = wm
            return
        set_property(self.spark, table, self.cfg.name, wm)
        self._mirrored_at[table] = now
        self._unmirrored.pop(table, None)

    def flush_mirrors(self) -> None:
        """Mirror every watermark not yet copied (on shutdown)."""
        for table, wm in list(self._unmirrored.items()):
            try:
                self._mirror(table, wm, force=True)
            except Exception as e:  # the snapshot summaries still hold it
                log.warning("could not mirror the watermark of %s: %s", table, str(e).splitlines()[0][:200])



def _shape_set(row: Row) -> frozenset[int] | None:
    """The shapes of an aggregate row; None when there were more than could be listed."""
    if row["n_shapes"] > shapes.MAX_SHAPES:
        return None
    return frozenset(int(x) for x in row["shapes"])


def _scan_ranges(parsed: DataFrame) -> BatchRanges:
    """Offsets per partition by scanning the batch (fallback when the offset log is unreadable)."""
    rows = parsed.groupBy("_kafka_topic", "_kafka_partition").agg(
        F.min("_kafka_offset").alias("lo"), F.max("_kafka_offset").alias("hi")).collect()
    return BatchRanges({(r["_kafka_topic"], int(r["_kafka_partition"])): (int(r["lo"]), int(r["hi"]) + 1)
                        for r in rows})


def _not_below(wm: Watermark, ranges: BatchRanges) -> Column | None:
    """Keep only rows at or above the table's watermark (None: keep everything)."""
    below = [
        (F.col("_kafka_topic") == F.lit(t)) & (F.col("_kafka_partition") == F.lit(p))
        & (F.col("_kafka_offset") < F.lit(wm.get((t, p))))
        for (t, p), (start, _) in ranges.ranges.items()
        if wm.get((t, p)) > start
    ]
    if not below:
        return None
    return ~reduce(lambda a, b: a | b, below)
