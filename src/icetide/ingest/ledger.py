"""Commit with the ledger: the exactly-once bookkeeping of one run's tables.

Invariants: a table's watermark is read from the table once and then kept current by every commit
of this run (:meth:`Ledger.forget` drops it after a failure); :meth:`Ledger.begin` returns None
when the table already holds the whole batch, else the commit's tags and, for a partial replay,
the filter that keeps only rows at or above the watermark; every write is inside an in-flight
marker (:mod:`icetide.lake.inflight`) so orphan cleanup in any process leaves its files alone; the
watermark is mirrored into a table property (at most once an interval, never over a newer run's).

Fencing: every append is committed with icetide's JVM ``LedgerFence``, which Iceberg runs inside
the commit against the table's refreshed metadata: the commit lands only if the newest snapshot of
this pipeline among the table's ancestors is still the one this run's watermark came from. A second
run of the pipeline (any checkpoint folder, any host) or a zombie that wakes up therefore cannot land
a batch twice; its commit fails with :class:`~icetide.errors.FencedError` and commits nothing.
Writes Spark must commit itself (MERGEs; appends to tables that ask for a write ordering or
distribution, or to the rows of a partial replay) are staged on a branch and land on main through
the same fence (:func:`~icetide.lake.fence.fenced_write`): no commit path is unfenced.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import Column, Observation
from pyspark.sql import functions as F

from icetide import faults
from icetide.config.base import interval_seconds
from icetide.config.models import PipelineConfig
from icetide.errors import FENCE_MARKER, FencedError, TopicRecreatedError, is_commit_conflict, is_fenced
from icetide.ingest import cdc, multi_write
from icetide.ingest.recreated import Recreated, Topics, confirm_stale, ids_to_record, stop_message
from icetide.lake import inflight
from icetide.lake.fence import FENCE_CLASS, Fence, drop_stale_branches, fenced_append, fenced_write
from icetide.lake.offsets import BatchRanges, Watermark, commit_properties, read_watermark, set_property, set_restarted
from icetide.lake.table_io import TableIO
from icetide.lake.tables import table_exists
from icetide.secrets import error_line
from icetide.spark.session import has_class

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass
class Pending:
    """A table's commit for one batch: the watermark it will hold, its snapshot tags, and (when a
    replay finds part of the batch already in the table) the filter keeping only the new rows."""

    table: str  # catalog.namespace.table
    watermark: Watermark
    tags: dict[str, str]
    keep: Column | None
    base: tuple[str | None, int] = (None, -1)  # the fence: newest tagged (run, batch) it expects



class Ledger:
    def __init__(self, spark: SparkSession, cfg: PipelineConfig, run_id: str,
                 on_commit: Callable[[str, Watermark], None] | None = None, topics: Topics | None = None) -> None:
        self.spark = spark
        self.cfg = cfg
        self.run_id = run_id
        self.on_commit = on_commit
        #: called right before each commit of a batch lands (after its data was read and written);
        #: raising lands nothing of it. The sink's retention recheck (:class:`~icetide.ingest.recheck.Recheck`).
        self.before_commit: Callable[[], None] | None = None
        #: the topics' incarnations (#41): offsets of a deleted topic are set aside when a table is read
        self.topics = topics or Topics(cfg.source, cfg.name)
        self._watermarks: dict[str, Watermark | None] = {}
        self._recent: dict[str, int] = {}  # catalog.namespace.table → the last batch committed to it
        self._ios: dict[str, TableIO] = {}
        self._mirror_every = interval_seconds(cfg.stream.watermark_mirror_interval)
        self._mirrored_at: dict[str, float] = {}
        self._unmirrored: dict[str, Watermark] = {}
        self._swept: set[str] = set()  # tables whose other-run markers this run swept since its last failure
        self._fence_ok: bool | None = None
        self._jobs_ok: bool | None = None

    # -- watermarks -------------------------------------------------------------------------
    def watermark(self, table: str) -> Watermark | None:
        if table not in self._watermarks:
            wm = read_watermark(self.spark, table, self.cfg.name) if table_exists(self.spark, table) else None
            wm = self._adopted(table, wm)
            self._watermarks[table] = self._renewed(table, wm) if wm is not None else None
        return self._watermarks[table]

    def _renewed(self, table: str, wm: Watermark) -> Watermark:
        """``wm`` (a fresh read) with the offsets of topics deleted and created again since set aside,
        in the table too (its property), so that no later read brings them back; with
        ``source.on_topic_recreated: stop``, :class:`TopicRecreatedError` instead."""
        stale = self.topics.stale(table, wm)
        if not stale:
            return wm
        found = {t: self.topics.restarted.get(t) or Recreated(t, wm.topic_ids.get(t), now) for t, now in stale.items()}
        if self.cfg.source.on_topic_recreated == "stop":
            raise TopicRecreatedError(stop_message(self.cfg.name, found, f"Nothing more was written to {table}."))
        confirm_stale(self.cfg.source, wm, stale)
        new = wm.restarted(stale)
        set_restarted(self.spark, table, self.cfg.name, new, stale, self.run_id)
        self.topics.voided |= {(table, t) for t in stale}
        for t, r in found.items():
            were = [f"{a}[{b}] {o}" for (a, b), o in sorted(wm.offsets.items()) if a == t]
            log.warning("%s: the offsets of topic %s (%s) belong to the deleted topic (%s): set aside, the new topic "
                        "is written from its start (source.on_topic_recreated: restart)", table, t,
                        ", ".join(were[:5]) + (f", … {len(were) - 5} more" if len(were) > 5 else ""), r.describe())
        return new

    def _adopted(self, table: str, own: Watermark | None) -> Watermark | None:
        """``own`` folded with the offsets of ``source.adopt_offsets_from`` (a renamed pipeline
        resumes where its old name stopped). The fence still expects this pipeline's own newest
        commit: the old name's commits are not this pipeline's."""
        old = self.cfg.source.adopt_offsets_from
        if old is None or (own is not None and own.source == "snapshot" and own.run == self.run_id):
            return own
        theirs = read_watermark(self.spark, table, old) if table_exists(self.spark, table) else None
        if theirs is None:
            return own
        if own is None:
            return Watermark(offsets=dict(theirs.offsets), batch=theirs.batch, batch_ranges=theirs.batch_ranges,
                             committed_at_ms=theirs.committed_at_ms, kafka_ts_max=theirs.kafka_ts_max,
                             source="property", topic_ids=dict(theirs.topic_ids))
        theirs = theirs.without(set(own.restarts))  # topics this pipeline read again from a new start
        own.fold(theirs.offsets)
        own.topic_ids = {**theirs.topic_ids, **own.topic_ids}
        return own

    def created(self, table: str) -> None:
        """``table`` was just created: it is empty, nothing to read."""
        self._watermarks[table] = None

    def forget(self) -> None:
        """Re-read watermarks from the tables on next use (after a failed commit). Watermarks not yet
        mirrored are dropped too: after a failure (a fence above all) they may be older than what
        another run has committed since, and the snapshot summaries still hold them."""
        self._watermarks.clear()
        self._unmirrored.clear()
        self._swept.clear()

    def recent(self, table: str) -> int | None:
        """The last batch this run committed to ``table``."""
        return self._recent.get(table)

    # -- one commit -------------------------------------------------------------------------
    def begin(self, table: str, batch_id: int, ranges: BatchRanges) -> Pending | None:
        """The commit ``table`` gets from this batch; None if the table already holds the whole batch."""
        wm = self.watermark(table)
        if wm is not None and wm.covers(ranges):
            log.info("batch %s already in %s (watermark %s); skipped", batch_id, table, wm.encode())
            return None
        ids = ids_to_record(wm, ranges, self.topics.ids)
        new = Watermark(offsets=(wm or Watermark()).advanced(ranges), run=self.run_id, batch=batch_id,
                        batch_ranges=ranges, committed_at_ms=int(time.time() * 1000),
                        topic_ids={**(wm.topic_ids if wm is not None else {}), **ids},
                        restarts=dict(wm.restarts) if wm is not None else {})
        marks = {t: m for t, m in new.restarts.items() if any(tp[0] == t for tp in ranges.ranges)}
        return Pending(table, new, commit_properties(self.cfg.name, self.run_id, batch_id, ranges, ids, marks),
                       not_below(wm, ranges) if wm is not None else None, wm.fence() if wm is not None else (None, -1))

    # -- fencing ----------------------------------------------------------------------------
    def fencing(self) -> bool:
        """Whether commits can be fenced (icetide's Iceberg-side JVM classes are loaded)."""
        if self._fence_ok is None:
            self._fence_ok = has_class(self.spark, FENCE_CLASS)
            if not self._fence_ok:
                log.warning("icetide's Iceberg classes are not loaded (run `icetide setup`, or add "
                            "icetide-iceberg.jar to spark.jars): commits are checked against a fresh read "
                            "of the ledger, not fenced atomically")
        return self._fence_ok

    def jobs(self) -> bool:
        """Whether icetide's JVM writer is loaded (looked up once: commits are a hot path)."""
        if self._jobs_ok is None:
            self._jobs_ok = multi_write.available(self.spark)
        return self._jobs_ok

    def commit_written(self, p: Pending, job: multi_write.MultiTableWrite, name: str) -> None:
        """Commit the files ``job`` wrote for ``name`` (namespace.table), fenced against ``p.base``."""
        faults.point("before_table_commit", name)
        if self.before_commit is not None:
            self.before_commit()
        if not self.fencing():
            self.check_fresh(p)
            job.commit(name)
        else:
            refused = fenced_append(self.spark, p.table, job.take_files(name), p.tags, self.cfg.name, *p.base)
            if refused is not None:
                job.discard(name)
                self._watermarks.pop(p.table, None)
                raise FencedError(refused)
        faults.point("after_table_commit", name)

    def merge_fence(self, p: Pending) -> Fence | None:
        """The fence of a write Spark commits itself (a MERGE, an append) into ``p.table`` (None when
        icetide's Iceberg classes are missing: the ledger is re-read just before instead)."""
        if not self.fencing():
            self.check_fresh(p)
            return None
        run, batch = p.base
        return Fence(self.cfg.name, run, batch, f"icetide_{self.run_id}", self.before_commit)

    def check_fresh(self, p: Pending) -> None:
        """Fail with :class:`FencedError` if another process of the pipeline committed to the table
        since this run read its ledger (for commits that cannot be fenced atomically)."""
        fresh = read_watermark(self.spark, p.table, self.cfg.name) if table_exists(self.spark, p.table) else None
        seen = (fresh.run, fresh.batch) if fresh is not None else (None, -1)
        if seen != p.base and not (fresh is not None and fresh.source == "property" and p.base == (None, -1)):
            self._watermarks.pop(p.table, None)
            raise FencedError(f"{FENCE_MARKER} pipeline {self.cfg.name} expected its newest commit to {p.table} "
                              f"to be {p.base}, found {seen}: another process of the pipeline committed to it")

    def finish(self, p: Pending, ts_max: int | None) -> None:
        """After ``p`` committed: remember, mirror and report its watermark."""
        new = p.watermark
        new.committed_at_ms = int(time.time() * 1000)
        new.kafka_ts_max = ts_max
        self._watermarks[p.table] = new
        self._recent[p.table] = new.batch
        if p.table not in self._swept:  # once per table per run, and again after any failure
            self._swept.add(p.table)
            try:  # and the branches of other runs' writes that never landed (they pin files)
                gone = inflight.sweep(self.table_io(p.table), self.cfg.name, self.run_id, (self.run_id, new.batch))
                dropped = drop_stale_branches(self.spark, p.table, self.cfg.name, self.run_id)
                if gone or dropped:
                    log.info("removed the in-flight markers of runs %s and branches %s on %s: their commits can no "
                             "longer land", gone, dropped, p.table)
            except Exception as e:  # markers only ever hold cleanup back; never fail a committed batch
                log.warning("could not sweep in-flight markers of %s: %s", p.table, error_line(e, 200))
        self._mirror(p.table, new)
        if self.on_commit is not None:
            self.on_commit(p.table, new)

    def mark(self, tables: list[str], since_ms: int) -> None:
        """In-flight markers for writes about to start (qualified names), each with the base its
        fenced commit expects (what :meth:`finish` of another run sweeps by)."""
        for t in tables:
            wm = self._watermarks.get(t)
            inflight.mark(self.table_io(t), self.cfg.name, self.run_id, since_ms,
                          wm.fence() if wm is not None else (None, -1))

    def clear(self, tables: list[str]) -> None:
        for t in tables:
            inflight.clear(self.table_io(t), self.cfg.name, self.run_id)

    def commit(self, table: str, rows: DataFrame, project: Callable[[DataFrame], DataFrame], batch_id: int,
               ranges: BatchRanges, since_ms: int | None, stats: Observation | None = None,
               apply: Callable[[DataFrame, Pending], None] | None = None) -> int | None:
        """Write the rows not yet in ``table`` (append, or ``apply`` e.g. a MERGE, which commits
        with the pending commit's tags, fenced by :meth:`merge_fence`) tagged with the batch's
        offsets; the rows written, or None if the table already holds the whole batch."""
        p = self.begin(table, batch_id, ranges)
        if p is None:
            return None
        if p.keep is not None:
            rows = rows.where(p.keep)
        if apply is None and stats is None and self.jobs():
            n = self._append_job(p, project(rows), since_ms)
            if n is not None:
                return n
        counted = Observation(f"icetide_{batch_id}_{uuid.uuid4().hex[:8]}")
        log.info("committing batch %s to %s", batch_id, table)
        out = project(rows).observe(counted, F.count(F.lit(1)).alias("n"))
        self.mark([table], since_ms or p.watermark.committed_at_ms)
        try:
            if apply is not None:
                try:
                    apply(out, p)
                except FencedError:
                    self._watermarks.pop(p.table, None)
                    raise
            else:
                fence = self.merge_fence(p)

                def append(target: str) -> None:
                    faults.point("before_table_commit", table)
                    writer = out.writeTo(target)
                    for k, v in p.tags.items():
                        writer = writer.option(f"snapshot-property.{k}", v)
                    writer.append()

                try:
                    if fence is None:
                        append(table)
                    else:  # every commit is fenced: on a branch, then onto main
                        self._retrying(table, lambda: fenced_write(self.spark, table, fence, append))
                except FencedError:
                    self._watermarks.pop(p.table, None)
                    raise
        finally:
            self.clear([table])
        faults.point("after_table_commit", table)
        ts = stats.get.get("ts_max") if stats is not None else None  # filled in by the write that just finished
        self.finish(p, int(ts) if ts is not None else None)
        return int(counted.get["n"])

    @staticmethod
    def _retrying(table: str, write: Callable[[], None], retries: int = 5) -> None:
        """``write`` again on a commit conflict (a commit raced the branch's stage or publish; a failed
        attempt lands nothing), as Spark's own append retries its commit; a fence's refusal is final."""
        for attempt in range(retries + 1):
            try:
                write()
                return
            except Exception as e:
                if attempt == retries or is_fenced(e) or not is_commit_conflict(e):
                    raise
                log.warning("append to %s conflicted with a concurrent commit (%s); retry %d", table,
                            (str(e).strip().splitlines() or [type(e).__name__])[0][:300], attempt + 1)
                time.sleep(0.5 * 2**attempt)

    def _append_job(self, p: Pending, out: DataFrame, since_ms: int | None) -> int | None:
        """Append ``out`` through icetide's JVM writer with a fenced commit; None if it refuses the table."""
        catalog, name = p.table.split(".", 1)
        job = multi_write.MultiTableWrite(self.spark)
        schema = out.sparkSession.table(p.table).schema
        columns = {c: F.col(cdc.quote(c)) for c in out.columns}  # a name with a dot is one column
        frame = multi_write.frame(out, F.lit(True), F.lit(None).cast("long"), columns, schema)
        if job.add(catalog, name, frame, p.tags) is not None:
            return None
        log.info("committing batch %s to %s", p.watermark.batch, p.table)
        self.mark([p.table], since_ms or p.watermark.committed_at_ms)
        try:
            job.run()
            self.commit_written(p, job, name)
        except BaseException:
            job.abort(name)
            raise
        finally:
            self.clear([p.table])
        self.finish(p, None)
        return job.written(name).good

    def table_io(self, table: str) -> TableIO:
        """The table's FileIO (loaded once per run; markers go through it)."""
        if table not in self._ios:
            self._ios[table] = TableIO.of(self.spark, table)
        return self._ios[table]

    # -- mirroring --------------------------------------------------------------------------
    def _mirror(self, table: str, wm: Watermark, force: bool = False) -> None:
        """Copy the watermark into a table property so it outlives snapshot expiry: a commit, so at most
        every ``stream.watermark_mirror_interval`` per table, a run's first too (the snapshot summary
        holds it; maintenance mirrors before it expires snapshots). ``force``: now, errors raised."""
        now = time.monotonic()
        if not force and now - self._mirrored_at.setdefault(table, now) < self._mirror_every:
            self._unmirrored[table] = wm
            return
        try:
            if force or self._still_newest(table, wm):  # never back over a newer run's commit
                set_property(self.spark, table, self.cfg.name, wm)
                self._unmirrored.pop(table, None)
            self._mirrored_at[table] = now
        except Exception as e:  # the summary holds it: a committed batch never fails for its copy
            if force:
                raise
            log.warning("could not mirror the watermark of %s: %s", table, error_line(e, 200))
            self._unmirrored[table] = wm

    def flush_mirrors(self) -> None:
        """Mirror every watermark not yet copied (on shutdown), each only while this run's commit is
        still the table's newest of the pipeline (:meth:`_still_newest`)."""
        for table, wm in list(self._unmirrored.items()):
            try:
                if self._still_newest(table, wm):
                    self._mirror(table, wm, force=True)
            except Exception as e:  # the snapshot summaries still hold it
                log.warning("could not mirror the watermark of %s: %s", table, error_line(e, 200))

    def _still_newest(self, table: str, wm: Watermark) -> bool:
        """The guard of every mirror, periodic or on shutdown (#41, 8): whether this run's commit
        ``wm`` is still the pipeline's newest on ``table``. A run paused or stopped after its commit,
        while another run of the pipeline committed more, never moves the mirror back."""
        fresh = read_watermark(self.spark, table, self.cfg.name)
        if fresh is not None and (fresh.run, fresh.batch) == (wm.run, wm.batch):
            return True
        log.info("not mirroring %s: its newest commit of the pipeline is %s, not this run's batch %s", table,
                 (fresh.run, fresh.batch) if fresh is not None else None, wm.batch)
        self._unmirrored.pop(table, None)
        return False


def not_below(wm: Watermark, ranges: BatchRanges) -> Column | None:
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
