"""The ``foreachBatch`` writer: route, evolve, decode, dedupe against each table's watermark, commit.

One micro-batch commits each table at most once, tagged with the pipeline, run, batch and offsets
(see :mod:`icetide.lake.offsets`). A replayed batch is filtered per table against the watermark
the table already holds, so it can never land twice, including after a crash between two tables'
commits. Per batch:

1. route every record (:mod:`icetide.ingest.routing`); admit the distinct tables;
2. infer the records' schema per table in one pass, create or evolve tables (:mod:`.evolution`);
3. parse each table's records against its schema and append them (tables in parallel);
4. append what could not be written to the dead-letter table, with the reason; the batch's figures
   to ``stream.batch_log_table``. What Kafka's retention took is told (:mod:`.recheck`).

The batch is cached once (memory, spilling to disk), so Kafka is read once per batch. A batch whose
tables exist and whose record shapes are known (most batches of a running stream, routed or into
one table) is first written in one pass with no cache (:mod:`icetide.ingest.one_pass`); steps 1–4
then run only on what that pass left.
This module orchestrates; the stages live beside it (:mod:`.prepare`, :mod:`.strategies`, :mod:`.ledger`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark import StorageLevel
from pyspark.sql import functions as F

from icetide import faults
from icetide.config.base import STREAMING_TABLE_DEFAULTS
from icetide.config.models import PipelineConfig
from icetide.errors import BATCH_MARKER, BatchFailedError, DataLossError, FencedError, IcetideError, is_fenced
from icetide.ingest import decode, evolution, multi_write, one_pass, recreated, retention, routing, shapes, source
from icetide.ingest.batch_log import BatchLog, BatchResult, Laps, PipelineCounters, schema_mismatches
from icetide.ingest.formats import ID
from icetide.ingest.ledger import Ledger
from icetide.ingest.one_pass import OnePass
from icetide.ingest.one_pass_frames import shape_of_id
from icetide.ingest.prepare import CONFIG_ROOTED, Preparer
from icetide.ingest.recheck import Recheck
from icetide.ingest.strategies import BatchContext, BatchState, MultiTable, PerTable
from icetide.lake import checkpoint
from icetide.lake.offsets import BatchRanges, Watermark
from icetide.lake.tables import ensure_table
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
#: What Spark's Kafka reader says when failOnDataLoss is on and an offset is gone.
SPARK_DATA_LOSS = "Some data may have been lost"
#: A batch's dead letters: target table (None: no table) → error class → records
DeadByTable = dict[str | None, dict[str, int]]
T = TypeVar("T")
R = TypeVar("R")


class BatchWriter:
    """Callable passed to ``DataStreamWriter.foreachBatch``."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, run_id: str,
                 on_commit: Callable[[str, Watermark], None] | None = None,
                 on_gap: Callable[[int, dict[str, list[int]]], None] | None = None,
                 on_registry_outage: Callable[[str], None] | None = None,
                 on_config_mistake: Callable[[int, dict[str, str]], None] | None = None) -> None:
        """``on_gap(batch, {"topic[p]" or "topic[p] for ns.table": [from, to)})``: records Kafka deleted unread;
        ``on_registry_outage(why)``: the schema registry stopped answering (once per outage)."""
        self.on_gap = on_gap
        #: ``on_config_mistake(batch, {table: message})``: a table's records were all dead-lettered for a
        #: reason in the config (once per table)
        self.on_config_mistake = on_config_mistake
        self._told: dict[str, str] = {}
        self.spark, self.cfg, self.run_id = spark, cfg, run_id
        self.catalog = cfg.catalog.name
        self.dead_letter_table = self.q(cfg.dead_letter.table)
        self.topics = recreated.Topics(cfg.source, cfg.name)  # recreated topics (#41), armed by the runner
        self.ledger = Ledger(spark, cfg, run_id, on_commit, self.topics)
        self.preparer = Preparer(spark, cfg, self.ledger, self._parallel)
        for client in self.preparer.formats.clients():
            client.on_outage = on_registry_outage
        parts = (spark, cfg, self.ledger, self.preparer, self._parallel)
        self.one_pass, self.multi_table, self.per_table = OnePass(*parts), MultiTable(*parts), PerTable(*parts)
        self._retention = retention.RetentionProbe(cfg.source)
        self._lost: source.Lost = {}
        self._lost_raw: source.Lost = {}  # the batch's probe, before what the tables hold is taken out
        self._written: list[str] = []  # the tables the batch's one pass committed (its stop message names them)
        self._lost_tables: retention.TableLost = {}  # a partial batch's replay: what only some tables lost
        self._raced: set[int] = set()  # batches a retention race replayed once (next time: reported wide)
        #: the partitions the query had a position in before the batch (None: unknown, all count)
        self._read_before: set[tuple[str, int]] | None = None
        self._batch_log = BatchLog(spark, cfg, run_id)
        self._multi: bool | None = None
        self._dead_letters_ready = False
        self.counters = PipelineCounters()
        #: when the batch being written started (epoch ms; None between batches): orphan cleanup spares younger files
        self.in_flight_since_ms: int | None = None

    def q(self, table: str) -> str:
        return f"{self.catalog}.{table}"

    def tables(self) -> list[str]:
        """Tables written by this pipeline so far, plus the dead-letter table (namespace.table)."""
        return sorted(self.preparer.known_tables() | {self.cfg.dead_letter.table})

    def watermark(self, table: str) -> Watermark | None:
        return self.ledger.watermark(table)

    def forget_watermarks(self) -> None:
        """Re-read watermarks and schemas from the tables on next use (after a failed commit)."""
        self.ledger.forget()
        self.preparer.forget()

    def flush_mirrors(self) -> None:
        """On shutdown: mirror the watermarks not yet copied, flush the batch log, close the retention probe."""
        self._retention.close()
        self.ledger.flush_mirrors()
        self._batch_log.flush()

    # -- the batch --------------------------------------------------------------------------
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        self.in_flight_since_ms = int(time.time() * 1000)
        try:
            result = self._process(df, batch_id, started)
            if isinstance(self.ledger.before_commit, Recheck):  # a batch that committed nothing is asked now
                self.ledger.before_commit.finish()
        except DataLossError:
            self.forget_watermarks()
            raise
        except IcetideError as e:
            self.forget_watermarks()
            if e.terminal or isinstance(e, FencedError):
                raise
            raise BatchFailedError(f"{BATCH_MARKER} batch {batch_id}: {error_line(e, 2000)}") from e
        except Exception as e:
            # Not a configuration mistake (those are ConfigError): never terminal, whatever Spark says
            self.forget_watermarks()
            if is_fenced(e):
                raise
            if SPARK_DATA_LOSS in str(e):  # retention deleted records while this batch read them
                what = retention.describe_lost(self._lost_raw) if self._lost_raw else error_line(e, 300)
                raise DataLossError(retention.data_loss_message(  # a replay: tables may hold what is gone
                    self.cfg.name, what, self._lost_tables, replay=bool(self._lost_raw),
                    written=self._written)) from e
            raise BatchFailedError(f"{BATCH_MARKER} batch {batch_id}: {error_line(e, 2000)}") from e
        except BaseException:
            self.forget_watermarks()
            raise
        finally:
            self._raced |= {batch_id} if getattr(self.ledger.before_commit, "raced", False) else set()
            self.in_flight_since_ms, self.ledger.before_commit = None, None
        self._raced.discard(batch_id)  # done: a new checkpoint numbers its batches from 0 again
        if result is not None:
            result.lost = retention.gap_keys(self._lost, self._lost_tables)
            self.counters.add(result)  # the alerts went out when each gap was found (``_gap``)
            new = {t: m for t, m in result.config_refused.items() if t not in self._told}
            if new and self.on_config_mistake is not None:
                self._told.update(new)
                self.on_config_mistake(batch_id, new)
            log.info(json.dumps(result.as_event(self.cfg.name)))
            self._batch_log.append(result)
        faults.point("after_batch_before_checkpoint", str(batch_id))

    def _process(self, df: DataFrame, batch_id: int, started: float) -> BatchResult | None:
        cfg = self.cfg
        self._lost_raw, self._lost, self._lost_tables = {}, {}, {}  # this batch's, never an earlier one's
        self._written = []
        rows = decode.with_kafka_columns(df)
        ranges = self._ranges(batch_id, rows)
        if not ranges.ranges:
            return None
        asked, before = self._retention.ask(ranges, self._read_before), self.nexts()  # None: Kafka not asked
        lost = asked or {}
        # what the tables hold of the range was never lost (a replay of a batch some tables committed)
        self._lost_raw, (self._lost, self._lost_tables) = lost, retention.split_lost(lost, before)
        ctx = BatchContext(batch_id, ranges, self.in_flight_since_ms, Laps())
        recheck = Recheck(self._retention, ranges, self._read_before, self._lost, before, batch_id not in self._raced,
                          self._lost_tables, read_over=lambda: ctx.read_over, known=lost, answered=asked is not None,
                          report=lambda c, t: self._gap(batch_id, c, t), forward=not cfg.source.min_partitions,
                          dead_letters=cfg.dead_letter.table, asks=cfg.source.on_data_loss == "continue")
        if cfg.source.on_data_loss == "continue":  # and before each commit, what retention deleted meanwhile
            self.ledger.before_commit = recheck
        if self._lost and cfg.source.on_data_loss == "stop":  # a table's part may be no loss: it never stops
            raise DataLossError(retention.stop_message(self.cfg.name, self._lost, self._lost_tables))
        # the gap is told once the cached batch is read (Recheck.read_done): no one pass, which has no cache
        ctx.read_done, ctx.probed = recheck.read_done, bool(self._lost or self._lost_tables)
        tasks = source.batch_tasks(cfg.source, ranges, self.spark.sparkContext.defaultParallelism)
        if tasks is not None:  # fewer, larger files: the Kafka read and every write run in ``tasks`` tasks
            rows = rows.coalesce(tasks)
        formats, raw = self.preparer.formats, None
        done = None if ctx.probed else self._declared_one_pass(rows, ctx)  # Avro: before the ids are listed
        self._written = sorted(done.committed) if done is not None else []
        if done is not None and not done.rest:
            return self._one_pass_result(batch_id, done, started, ctx)
        tried = done is not None
        cached: DataFrame | None = None  # what this batch persisted: released however the batch ends
        try:
            waited = 0.0
            if formats.clients():  # the raw batch is cached first: the schema ids come from it
                raw = cached = formats.with_ids(rows).persist(StorageLevel.MEMORY_AND_DISK_DESER)
                waited = formats.registry_waited_s()
                formats.resolve(self.spark, raw)
                waited, rows = formats.registry_waited_s() - waited, raw
                self.counters.registry_wait_s += waited
            plain = None  # JSON: the one pass reads each value once in its write task, checks and shape included
            if formats.json_only and cfg.stream.one_pass_write and cfg.stream.decode_in_task:
                plain = routing.with_route(rows, cfg.target, self.preparer.reserved, cfg.source.max_value_bytes)
            rows = self.preparer.routed(rows)  # JSON: checks and shape, one read
            if waited:  # seconds this batch waited for the schema registry (an outage, see formats/registry.py)
                ctx.lap.timings["registry_wait"] = round(waited, 3)
            if not tried and not ctx.probed and cfg.stream.one_pass_write and self._multi_table_write():
                done = self.one_pass.write(rows, ctx, plain)
                self._written = sorted(done.committed) if done is not None else []
            if done is not None and not done.rest:
                return self._one_pass_result(batch_id, done, started, ctx)
            if raw is None:
                if cfg.target.route is not None:
                    # Clustered by table, each table's scan of the cache skips the column batches of the
                    # others (in-memory partition pruning on the batch min/max of the table column).
                    rows = rows.sortWithinPartitions(routing.TABLE)
                # DESER: PySpark's MEMORY_AND_DISK is the *serialized* level; every scan of the cache (one
                # per table) would Java-deserialize the whole batch again.
                rows = cached = self.per_table.pre_parse(rows).persist(StorageLevel.MEMORY_AND_DISK_DESER)
            # else (Avro): the raw batch is cached; routing it again per scan costs a few expressions
            return self._process_cached(rows, ctx, started, done)
        finally:
            if cached is not None:
                cached.unpersist()

    def _gap(self, batch_id: int, common: source.Lost, tables: retention.TableLost) -> None:
        """The alert for a gap, as soon as it is found: before the commits it concerns (a crash after
        them cannot lose it: the replay finds the tables holding the batch and reports nothing); one the
        usual path's read finds may follow the one pass's commits. A replayed batch may alert again."""
        if self.on_gap is not None:
            self.on_gap(batch_id, retention.gap_keys(common, tables))

    def nexts(self) -> retention.Nexts:
        """Per table (namespace.table) holding the pipeline's offsets (CDC tombstone tables too), the
        next offset it needs of each partition. A table the pipeline never committed to (dead
        letters never written) is left out: its part of every gap would be noise."""
        names = set(self.tables())
        names |= {f"{t}_tombstones" for t in list(names)
                  if (p := self.cfg.target.policy_for(t).cdc) is not None and p.tombstones}
        return {t: wm.offsets for t in sorted(names) if (wm := self.ledger.watermark(self.q(t))) is not None}

    def _declared_one_pass(self, rows: DataFrame, ctx: BatchContext) -> one_pass.Result | None:
        """Avro once schema ids are learned: the one pass straight over the Kafka batch, before the
        batch is cached and its ids listed (a table that meets an id not learned yet is left to the
        usual path, which learns it); None when it does not apply."""
        formats = self.preparer.formats
        if not (formats.declared_one_pass and self.cfg.stream.one_pass_write and self._multi_table_write()) or (
                not formats.expect_known() and not (self.one_pass.learn_first(ctx.lap) and formats.expect_known())):
            return None
        routed = self.preparer.routed(formats.with_ids(rows))
        return self.one_pass.write(routed.withColumn(shapes.SHAPE, shape_of_id(F.col(ID))), ctx)

    def _one_pass_result(self, batch_id: int, done: one_pass.Result, started: float, ctx: BatchContext
                         ) -> BatchResult:
        return BatchResult(batch_id, sum(done.committed.values()), done.committed, 0, [],
                           time.monotonic() - started, max(done.ts_max) if done.ts_max else None,
                           created=done.created, timings=ctx.lap.timings, inferred=done.inferred)

    def _process_cached(self, batch: DataFrame, ctx: BatchContext, started: float,
                        done: one_pass.Result | None) -> BatchResult:
        cfg, lap = self.cfg, ctx.lap
        table_col = F.col(routing.TABLE)
        # What the one pass committed is done, except for its records that failed (dead letters).
        rows = batch
        if done is not None and done.committed:
            rows = batch.where(table_col.isNull() | ~table_col.isin(sorted(done.committed)))

        admission, route_errors, overflow = self.preparer.admit(rows)
        ctx.read_over = True  # admission scanned the whole cached batch: no later write reads Kafka
        ctx.read_done(batch, done.committed if done is not None else ())  # before any commit (chaos seed 1301)
        if done is not None:  # a single target table the one pass committed has nothing left
            admission.accepted = [x for x in admission.accepted if x not in done.committed]
        lap("admit")
        prepared = self.preparer.prepare(rows, admission.accepted)
        lap("prepare")
        rejected = {**dict(admission.rejected), **prepared.refused}
        flags = routing.flags(cfg.target.route, [p.table for p in prepared.plans], rejected)

        state = BatchState()
        try:  # the CDC rows a batch cached are released however it ends (a fence, a replay)
            alone = prepared.plans
            appends = [p for p in alone if cfg.target.policy_for(p.table).cdc is None]
            if appends and self._multi_table_write():  # icetide's JVM writer: fenced commits, one job
                merges = [p for p in alone if cfg.target.policy_for(p.table).cdc is not None]
                alone = merges + self.multi_table.write(rows, appends, ctx, state)
                lap("together_commit")
            self.per_table.write(rows, alone, ctx, state)
            lap("write")
            if done is not None:
                state.written.update(done.committed)
                state.ts_max.extend(done.ts_max)
                formats = self.preparer.formats
                for x in done.with_bad:  # Avro: decoded first (with_decoded), as every parse of it
                    parsed = formats.without_decoded(decode.parse(
                        formats.with_decoded(batch.where(table_col == F.lit(x))),
                        formats.parse_columns(self.spark, self.preparer.schema(x), cfg.source.max_value_bytes)))
                    state.bad.append(decode.dead_letter_rows(parsed.where(~decode.is_good()), cfg.name, F.lit(x)))
            if route_errors > 0 or rejected or overflow:
                route_error, route_message = flags
                flagged = rows.withColumn("_e", route_error).withColumn("_m", route_message).where(
                    F.col("_e").isNotNull())
                state.bad.append(decode.dead_letter_rows(flagged, cfg.name, table_col, "_e", "_m"))
            dead, by_table = 0, DeadByTable()
            if state.bad:
                d = self._dead_letters(state.bad, ctx, state)
                if d is None:
                    state.skipped.append(self.cfg.dead_letter.table)
                else:
                    dead, by_table = d
            classes: dict[str, int] = {}
            for c, k in ((c, k) for counts in by_table.values() for c, k in counts.items()):
                classes[c] = classes.get(c, 0) + k
            lap("dead_letters")
        finally:
            for frame in state.release:
                frame.unpersist()
        records = sum(state.written.values()) + dead + state.tombstones
        result = BatchResult(ctx.batch_id, records, state.written, dead, state.skipped, time.monotonic() - started,
                             max(state.ts_max) if state.ts_max else None, classes,
                             {p.table: p.evolved for p in prepared.plans if p.evolved},
                             [*(done.created if done is not None else []), *prepared.created],
                             lap.timings, sorted({*self.preparer.inferred, *(done.inferred if done else [])}),
                             state.tombstones)
        result.config_refused = {t: msg for t, (cls, msg) in prepared.refused.items()
                                 if cls == "table_policy" and CONFIG_ROOTED.match(msg)}
        result.config_refused.update(schema_mismatches(cfg.target, ctx.batch_id, state.written, by_table))
        return result

    def _multi_table_write(self) -> bool:
        """Whether routed appends share one Spark job (config, and icetide's JVM classes present)."""
        if self._multi is None:
            self._multi = self.cfg.stream.multi_table_write and multi_write.available(self.spark)
            if self.cfg.stream.multi_table_write and not self._multi:
                log.warning("icetide's JVM classes are not on the classpath (run `icetide setup`, or add "
                            "%s to spark.jars): each table is written by its own Spark job",
                            "$ICETIDE_HOME/jars/icetide/icetide-jvm.jar")
        return self._multi

    def _parallel(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``fn`` over ``items``, ``stream.table_write_parallelism`` at a time; results in order."""
        workers = min(self.cfg.stream.table_write_parallelism, len(items))
        if workers <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(workers, thread_name_prefix="icetide-table") as pool:
            return list(pool.map(fn, items))

    def _dead_letters(self, frames: list[DataFrame], ctx: BatchContext,
                      state: BatchState) -> tuple[int, DeadByTable] | None:
        """Write the batch's dead letters (tombstones to skip: counted in ``state``); count, counts per table, class."""
        allrows = reduce(lambda a, b: a.unionByName(b), frames).withColumn("_tomb", decode.skipped_tombstone(
            self.cfg.target))
        # Counted before the write: the dead letters go through icetide's fenced writer, whose job
        # does not report Spark observations. They are few, and read from the cached batch.
        by_table, tombstones = decode.dead_letter_counts(allrows)
        state.tombstones += tombstones
        if not by_table:
            return 0, by_table
        self._ensure_dead_letter_table()
        n = self.ledger.commit(self.dead_letter_table, allrows.where(~F.col("_tomb")).drop("_tomb"), lambda d: d,
                               ctx.batch_id, ctx.ranges, ctx.since_ms)
        return None if n is None else (n, by_table)

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
        bounds = checkpoint.batch_bounds(self.spark, location, batch_id)
        # partitions with a position, and partitions added to read topics (from 0); a new topic: its oldest
        self._read_before = None if bounds is None else (
            {tp for tp, o in bounds[0].items() if o >= 0}
            | {tp for tp in bounds[1] if tp[0] in {t for (t, _), o in bounds[0].items() if o >= 0}})
        if bounds is None:
            self.topics.unreadable(batch_id)  # a topic the start could not check: this batch writes nothing
            log.warning("offset log of batch %s not readable in %s; scanning the batch", batch_id, location)
            return source.scan_ranges(parsed)
        self.topics.check_batch(self.spark, location, batch_id, *bounds)  # a topic recreated meanwhile?
        planned = checkpoint.batch_time_ms(self.spark, location, batch_id)
        return BatchRanges(checkpoint.ranges_of(*bounds), planned_at_ms=planned)
