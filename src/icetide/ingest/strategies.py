"""Write strategies: how a batch's rows reach its tables.

(:class:`icetide.ingest.one_pass.OnePass` runs first: tables that exist, in one Spark job straight
over the batch with no cache; what it cannot take is left to these.)

- :class:`MultiTable`: the batch's routed appends in one Spark job (icetide's JVM ``MultiTableWrite``).
- :class:`PerTable`: each table by its own Spark job: an append, or for CDC tables one ``MERGE``
  (retried inside the batch on a commit conflict) plus its tombstones.

:class:`MultiTable` and :class:`PerTable` share one interface, ``write(rows, plans, ctx, state)``,
returning the plans they left to the next strategy. Every strategy stages each table's commit with
the :class:`~icetide.ingest.ledger.Ledger` (skipping tables that already hold the batch), writes
inside in-flight markers, commits each table on its own with its offset tags, and records what it
wrote in the batch's :class:`BatchState`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import Column, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from icetide import faults
from icetide.config.models import PipelineConfig
from icetide.config.target import CdcSettings
from icetide.ingest import cdc, decode, multi_write, routing
from icetide.ingest.batch_log import Laps
from icetide.ingest.formats.avro import CDC_OP, CDC_ORDERING
from icetide.ingest.ledger import Ledger, Pending
from icetide.ingest.prepare import Parallel, Preparer, TablePlan
from icetide.lake.offsets import BatchRanges
from icetide.lake.tables import table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: With routing, each table's share of a batch is written by one task per this many records.
ROWS_PER_WRITE_TASK = 200_000


@dataclass
class BatchContext:
    batch_id: int
    ranges: BatchRanges
    since_ms: int | None  # when the batch started: the in-flight markers' time
    lap: Laps
    #: the batch's Kafka read is over: no write left reads Kafka again (the one pass with nothing
    #: left, or the cache once admission filled it); retention's recheck relies on it
    read_over: bool = False
    #: the batch's probe found records Kafka deleted (told once the cached batch is read: no one pass)
    probed: bool = False
    #: called with the cached batch once admission read it, before any commit of the usual path
    #: (:meth:`icetide.ingest.recheck.Recheck.read_done`)
    read_done: Callable[[DataFrame, Collection[str]], None] = lambda cached, committed: None


@dataclass
class BatchState:
    """What one batch's writes produced, filled by the strategies in turn."""

    written: dict[str, int] = field(default_factory=dict)  # namespace.table → rows committed
    skipped: list[str] = field(default_factory=list)  # tables that already held the batch
    ts_max: list[int] = field(default_factory=list)  # newest Kafka timestamp per commit
    bad: list[DataFrame] = field(default_factory=list)  # dead-letter rows
    tombstones: int = 0  # Kafka tombstones skipped on CDC tables
    release: list[DataFrame] = field(default_factory=list)  # frames to unpersist after the batch


class Strategy:
    def __init__(self, spark: SparkSession, cfg: PipelineConfig, ledger: Ledger, preparer: Preparer,
                 parallel: Parallel) -> None:
        self.spark, self.cfg, self.ledger, self.preparer, self.parallel = spark, cfg, ledger, preparer, parallel
        self.q = preparer.q
        self._alone: dict[str, str] = {}  # table → why the multi-table job refused it (logged once)
        self._pre_parsed: tuple[str, StructType] | None = None  # the batch's cache holds this table's parse
        self.parsed_in_cache = 0  # tables whose parse was read from the batch's cache (pre_parse), all batches

    def _refused(self, table: str, reason: str) -> None:
        if self._alone.get(table) != reason:
            log.info("%s is written by its own Spark job: %s", table, reason)
            self._alone[table] = reason

    def pre_parse(self, rows: DataFrame) -> DataFrame:
        """A single-table JSON CDC pipeline's batch (routed, before it is cached), each change
        unwrapped and parsed against its table's schema as it stands, so the cache holds each change
        parsed once and the MERGE reads it from there (:meth:`parse`), rather than a second persisted
        copy. ``value`` keeps the record as it came: admission, inference and the dead letters read
        it. A batch whose table evolves, or refuses some fields, is parsed again from the cache."""
        t, pre = self.cfg.target, self.preparer
        self._pre_parsed = None
        if t.route is not None or t.table is None or t.policy_for(t.table).cdc is None or not pre.formats.json_only:
            return rows
        if t.table not in pre.known_tables():
            return rows  # the first batch makes the table: its schema is not known yet
        plan = TablePlan(t.table, pre.schema(t.table))
        self._pre_parsed = (plan.table, plan.schema)
        # records the checks refused (no table) are not parsed, as on the usual path; every record keeps
        # its bytes in ``value`` once (the dead letters read them there)
        kept = "_icetide_value"
        masked = rows.withColumn(kept, F.col("value")).withColumn(
            "value", F.when(F.col(routing.TABLE).isNotNull(), F.col("value")))
        return self._parsed(masked, plan).withColumn("value", F.col(kept)).drop(kept, cdc.RAW)

    def parse(self, rows: DataFrame, plan: TablePlan, state: BatchState) -> DataFrame:
        """The table's records parsed against its schema, flagged good or bad."""
        subset = rows.where(F.col(routing.TABLE) == F.lit(plan.table))
        if plan.refused is None and self._pre_parsed == (plan.table, plan.schema) and decode.PARSED in rows.columns:
            self.parsed_in_cache += 1
            return subset  # parsed into the batch's cache (pre_parse)
        parsed = self._parsed(subset, plan)
        if self.cfg.target.policy_for(plan.table).cdc is not None:  # unwrapping is costly: the MERGE and the
            parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK_DESER)  # dead letters share it
            state.release.append(parsed)
        return parsed

    def _parsed(self, subset: DataFrame, plan: TablePlan) -> DataFrame:
        cfg = self.cfg
        routed = self.preparer.route_counts.get(plan.table)
        if routed is not None:
            # One write task per ROWS_PER_WRITE_TASK records: fewer, larger files and less overhead
            # per table when a batch fans out thinly to many tables.
            subset = subset.coalesce(max(1, -(-routed // ROWS_PER_WRITE_TASK)))
        policy = cfg.target.policy_for(plan.table)
        extra = [plan.refused] if plan.refused is not None else []
        after: dict[str, Column] = {}  # columns read from the parse
        formats = self.preparer.formats
        subset = formats.with_decoded(subset)  # Avro: each record decoded once, for every column
        if policy.cdc is not None and formats.envelopes:  # the envelope decoded once, with the row (Avro)
            p, cls, msg = formats.parse_columns(self.spark, plan.schema, cfg.source.max_value_bytes, cdc=policy.cdc)
            parsed_col = F.col(decode.PARSED)
            subset = (subset.withColumn(cdc.RAW, F.col("value")).withColumn(decode.PARSED, p)
                      .withColumn("_cdc_op_raw", parsed_col[CDC_OP])
                      .withColumn(cdc.OP, cdc.operations(policy.cdc, parsed_col[CDC_OP]))
                      .withColumn(cdc.ORDERING, parsed_col[CDC_ORDERING]))
            columns = (parsed_col, cls, msg)
            extra.append(cdc.errors(policy.cdc, decode.PARSED))
        elif policy.cdc is not None and formats.json_only and cdc.reads_row(policy.cdc, plan.schema):
            # a plain change's operation and ordering are fields of its row: one parse gives all three
            fields = cdc.row_fields(policy.cdc, decode.PARSED)
            extra.append(cdc.errors(policy.cdc, decode.PARSED, fields))
            after = {cdc.OP: fields[1], cdc.ORDERING: fields[2]}
            columns = formats.parse_columns(self.spark, plan.schema, cfg.source.max_value_bytes)
        else:
            if policy.cdc is not None:
                subset = cdc.unwrap(subset, policy.cdc)
                extra.append(cdc.errors(policy.cdc, decode.PARSED))
            columns = formats.parse_columns(self.spark, plan.schema, cfg.source.max_value_bytes)
        parsed = decode.parse(subset, columns, extra)
        return formats.without_decoded(parsed.withColumns(after) if after else parsed)


class MultiTable(Strategy):
    def write(self, rows: DataFrame, plans: list[TablePlan], ctx: BatchContext, state: BatchState
              ) -> list[TablePlan]:
        """Append ``plans`` in one Spark job; returns the plans left to write one by one."""
        cfg, pre = self.cfg, self.preparer
        job = multi_write.MultiTableWrite(self.spark)

        def add(plan: TablePlan) -> tuple[Pending, DataFrame] | None:
            pending = self.ledger.begin(self.q(plan.table), ctx.batch_id, ctx.ranges)
            if pending is None or pending.keep is not None:  # a replay: the per-table path sorts it out
                return None
            parsed = self.parse(rows, plan, state)
            frame = multi_write.frame(
                parsed, decode.is_good(), F.unix_millis("_kafka_timestamp"),
                decode.good_columns(plan.schema, cfg.target.kafka_metadata_columns), pre.full_schema(plan.table))
            reason = job.add(pre.catalog, plan.table, frame, pending.tags)
            if reason is not None:
                self._refused(plan.table, reason)
                return None
            return pending, parsed

        added = self.parallel(add, plans)
        staged = {p.table: a for p, a in zip(plans, added, strict=True) if a is not None}
        alone = [p for p, a in zip(plans, added, strict=True) if a is None]
        ctx.lap("together_plan")
        if not staged:
            return alone
        qualified = [self.q(x) for x in staged]
        self.ledger.mark(qualified, ctx.since_ms or int(time.time() * 1000))
        try:
            log.info("writing batch %s to %d tables in one job", ctx.batch_id, len(staged))
            job.run()
        except BaseException:
            self.ledger.clear(qualified)
            raise
        ctx.lap("together_job")

        def commit(table: str) -> None:
            pending, parsed = staged[table]
            log.info("committing batch %s to %s", ctx.batch_id, pending.table)
            try:
                self.ledger.commit_written(pending, job, table)
            finally:
                self.ledger.clear([pending.table])
            w = job.written(table)
            self.ledger.finish(pending, w.ts_max)
            state.written[table] = w.good
            if w.ts_max is not None:
                state.ts_max.append(w.ts_max)
            if w.bad:
                state.bad.append(decode.dead_letter_rows(parsed.where(~decode.is_good()), cfg.name, F.lit(table)))

        self.parallel(commit, list(staged))
        return alone


class PerTable(Strategy):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._dated: dict[str, bool] = {}  # tombstone table → has the delete's timestamp column
        self._positioned: set[str] = set()  # CDC tables known to have _cdc_position
        self._newest: dict[str, DataFrame] = {}  # table → the batch's newest change per key, as its MERGE read it

    def write(self, rows: DataFrame, plans: list[TablePlan], ctx: BatchContext, state: BatchState
              ) -> list[TablePlan]:
        """Each table by its own Spark job (tables in parallel); leaves nothing."""
        timed = len(plans) == 1  # the batch's laps (merge, tombstones) are one table's, or none
        self.parallel(lambda plan: self._one(rows, plan, ctx, state, timed), plans)
        return []

    def _one(self, rows: DataFrame, plan: TablePlan, ctx: BatchContext, state: BatchState, timed: bool) -> None:
        try:
            self._write_one(rows, plan, ctx, state, ctx.lap if timed else lambda name: None)
        finally:  # the MERGE's newest changes, kept for the tombstones: released however the batch goes on
            newest = self._newest.pop(plan.table, None)
            if newest is not None:
                newest.unpersist()

    def _write_one(self, rows: DataFrame, plan: TablePlan, ctx: BatchContext, state: BatchState,
                   lap: Callable[[str], None]) -> None:
        cfg = self.cfg
        parsed = self.parse(rows, plan, state)
        policy = cfg.target.policy_for(plan.table)
        good = decode.is_good()
        # On a CDC table a record without a value is a Kafka tombstone (Debezium sends one after each
        # delete, for log compaction): skipped and counted, not a dead letter.
        tomb = F.col(decode.ERROR_CLASS) == F.lit("null_value") if policy.cdc is not None else F.lit(False)
        bad = ~good & ~tomb
        aggs = [F.count_if(bad).alias("bad"), F.count_if(tomb).alias("tombstones"),
                F.max(F.unix_millis("_kafka_timestamp")).alias("ts_max")]
        stats = Observation(f"icetide_{ctx.batch_id}_{uuid.uuid4().hex[:8]}")
        observed = parsed.observe(stats, F.count_if(good).alias("good"), *aggs)
        meta = cfg.target.kafka_metadata_columns
        if policy.cdc is None:
            n = self.ledger.commit(self.q(plan.table), observed.where(good),
                                   lambda d: decode.good_rows(d, plan.schema, meta), ctx.batch_id, ctx.ranges,
                                   ctx.since_ms, stats)
        else:
            settings = policy.cdc
            # the newest change per key is decided by Kafka position too, with or without the columns
            # (and the tombstones take the delete's time from the MERGE's newest changes: not a column either)
            position = [] if meta else ["_kafka_offset", "_kafka_partition", "_kafka_timestamp"]
            n = self.ledger.commit(self.q(plan.table), observed.where(good),
                                   lambda d: decode.good_rows(d, plan.schema, meta, [cdc.OP, cdc.ORDERING, *position]),
                                   ctx.batch_id, ctx.ranges, ctx.since_ms, stats,
                                   apply=lambda changes, pending: self._merge(plan.table, changes, pending, settings,
                                                                              position))
            lap("merge")
        if policy.cdc is not None and policy.cdc.tombstones:
            # Committed on their own, after the MERGE and even when a replay finds the MERGE already
            # in the table: the tombstone table's own watermark decides what it still needs.
            faults.point("between_merge_and_tombstones", plan.table)
            newest = self._newest.get(plan.table)  # the MERGE's, when it read the whole batch
            if newest is None:
                changes = decode.good_rows(parsed.where(good), plan.schema, False, [
                    cdc.OP, cdc.ORDERING, "_kafka_offset", "_kafka_partition", "_kafka_timestamp"])
                newest = cdc.latest_per_key(changes, policy.cdc)
            tomb_table = self.q(f"{plan.table}_tombstones")
            if tomb_table not in self._dated:  # tombstone tables of older icetide versions lack the column
                self._dated[tomb_table] = cdc.DELETED_AT in self._with_position(tomb_table)
            when = [F.col("_kafka_timestamp").alias(cdc.DELETED_AT)] if self._dated[tomb_table] else []
            deletes = newest.where(F.col(cdc.OP) == "delete").select(
                *[F.col(cdc.quote(k)) for k in policy.cdc.primary_key], cdc.ORDERING, cdc.POSITION, *when)
            self.ledger.commit(tomb_table, deletes, lambda d: d, ctx.batch_id, ctx.ranges, ctx.since_ms)
            lap("tombstones")
        if n is None:
            state.skipped.append(plan.table)
            c = parsed.agg(*aggs).first()
            totals = c.asDict() if c is not None else {"bad": 0, "tombstones": 0, "ts_max": None}
        else:
            state.written[plan.table] = n
            totals = stats.get
        if totals.get("ts_max") is not None:
            state.ts_max.append(int(totals["ts_max"]))  # type: ignore[arg-type]
        state.tombstones += int(totals.get("tombstones") or 0)  # type: ignore[call-overload]
        if totals["bad"]:
            state.bad.append(decode.dead_letter_rows(parsed.where(bad), cfg.name, F.lit(plan.table)))

    def _with_position(self, table: str) -> list[str]:
        """The columns of ``table`` (qualified), after adding ``_cdc_position`` to a CDC or tombstone
        table made by an icetide that did not keep positions (a metadata-only change, once)."""
        columns = self.spark.table(table).columns
        if cdc.POSITION not in columns:
            log.info("adding %s to %s (newest change = greatest (ordering, Kafka position))", cdc.POSITION, table)
            self.spark.sql(f"ALTER TABLE {table} ADD COLUMN {cdc.POSITION} "
                           f"{cdc.POSITION_TYPE.simpleString()}")
            self.spark.catalog.refreshTable(table)
            columns = [*columns, cdc.POSITION]
        return columns

    def _merge(self, table: str, changes: DataFrame, pending: Pending, c: CdcSettings, position: list[str]) -> None:
        """One MERGE of the batch's newest change per key not buried by a recorded delete, tagged
        and fenced."""
        tomb = f"{table}_tombstones"
        if table not in self._positioned:
            self._with_position(self.q(table))
            changes.sparkSession.catalog.refreshTable(self.q(table))
            self._positioned.add(table)
        # Read tombstones through the batch's own session, freshly: its catalog cache is the one
        # the tombstone MERGEs update (another session's cache may hold an older version).
        session = changes.sparkSession
        # ``changes`` is a projection of the batch's parsed changes, which are persisted: only the
        # newest change per key (at most a row per key) is kept too, read by every retry of the MERGE
        # and, when the MERGE read the whole batch, by the tombstones
        newest = self._newest[table] = cdc.latest_per_key(changes, c).persist(StorageLevel.MEMORY_AND_DISK_DESER)
        latest = newest.drop(*position)  # position and time: not columns of the table
        try:  # (``newest`` is released by _one, however the batch goes on)
            if c.tombstones and table_exists(session, self.q(tomb)):
                session.catalog.refreshTable(self.q(tomb))
                latest = cdc.not_buried(latest, session.table(self.q(tomb)), c)
            latest = latest.persist(StorageLevel.MEMORY_AND_DISK_DESER)
            cdc.merge_retrying_conflicts(self.spark, pending.tags, latest, self.q(table), c,
                                         fence=self.ledger.merge_fence(pending))
        finally:
            latest.unpersist()
        if pending.keep is not None:  # a partial replay: the tombstones read the whole batch themselves
            self._newest.pop(table).unpersist()
