"""Retention of icetide's own append-only tables: the batch log, health history, the maintenance
action log, query telemetry (``maintenance.own_table_retention``, default 30 days) and, only when
asked, dead letters (``dead_letter.retention``).

Each is partitioned by day of its time column, so the cut is rounded down to a day boundary and
the DELETE drops whole partitions (Iceberg commits it as metadata only: no data file is
rewritten, and it never conflicts with the appends of today's partition). Nothing is deleted, and
no snapshot made, when no row is old enough. The batch log and dead letters are maintained like any
other table's (they are in the watched namespaces); the three tables a cycle appends to itself
(health history, action log, telemetry) are left out of plans, so they are kept here: their small
files are compacted (binpack, once a partition holds the policy's ``min_input_files``; a cycle that
appends once a minute leaves 1,440 files a day, and every plan reads the last day of the action log),
then their snapshots are expired in the driver, by their policy's age and ``snapshot_retain_last``:
without it every append would carry every earlier snapshot in the metadata, and the rows past
retention would stay on storage.
CDC tombstone tables are trimmed only when the
table's ``cdc.tombstone_horizon`` is set (a tombstone is what keeps an older change from
resurrecting a deleted row: past the horizon, a late change can), by the delete's Kafka timestamp,
measured in the stream's own time, never the wall clock: the horizon counts back from the newest
Kafka timestamp the pipeline has applied to the table (the newest delete it recorded, or the
table's mirrored Kafka-timestamp watermark, whichever is later). A pipeline catching up on a
backlog older than the horizon therefore keeps its tombstones until the stream itself has moved on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from icetide.config.base import interval_seconds
from icetide.config.models import PipelineConfig
from icetide.config.policy import MaintenancePolicy, StepName
from icetide.health.watch import namespaces
from icetide.ingest.cdc import DELETED_AT, POSITION
from icetide.lake.tables import expire_in_driver, list_tables, table_exists
from icetide.maintenance.executor import ActionRecord
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def targets(cfg: PipelineConfig) -> list[tuple[str, str, float]]:
    """(namespace.table, day-partitioned time column, seconds kept) of every table with retention."""
    out: list[tuple[str, str, float]] = []
    keep = cfg.maintenance.own_table_retention
    if keep is not None:
        logs = ((cfg.stream.batch_log_table, "logged_at"), (cfg.health.history_table, "collected_at"),
                (cfg.maintenance.log_table, "started_at"), (cfg.maintenance.telemetry_table, "queried_at"))
        out += [(t, col, interval_seconds(keep)) for t, col in logs if t]
    if cfg.dead_letter.retention is not None:
        out.append((cfg.dead_letter.table, "_kafka_timestamp", interval_seconds(cfg.dead_letter.retention)))
    return out


def tombstone_targets(spark: SparkSession, cfg: PipelineConfig) -> list[tuple[str, str, float]]:
    """CDC tombstone tables (``<table>_tombstones`` in the watched namespaces) whose table's policy
    sets ``cdc.tombstone_horizon``, with the column it trims by."""
    out = []
    for ns in namespaces(cfg):
        for t in list_tables(spark, cfg.catalog.name, ns):
            if not t.endswith("_tombstones"):
                continue
            c = cfg.target.policy_for(t.removesuffix("_tombstones")).cdc
            if c is None or c.tombstone_horizon is None:
                continue
            if DELETED_AT in spark.table(f"{cfg.catalog.name}.{t}").columns:
                out.append((t, DELETED_AT, interval_seconds(c.tombstone_horizon)))
    return out


def stream_times_ms(spark: SparkSession, cfg: PipelineConfig, tombstone_table: str) -> dict[int | None, int]:
    """The stream's own "now" for a tombstone table (qualified), per Kafka partition its deletes came
    from: the newest delete of that partition. Each partition's tombstones are trimmed by its own
    progress, so a caught-up partition never trims a lagging one's (#41, 8). When the CDC table reads
    one partition, its mirrored Kafka-timestamp watermark counts too (it is that partition's).
    Tombstones with no position (an older icetide, or a table without the column) share the earliest
    time of all. A partition's time is at most its true stream time; the position names no topic, so
    partitions of one number in several topics share one (docs/guarantees.md). Empty: none held."""
    from icetide.lake.offsets import PROPERTY_PREFIX, Watermark, table_property

    part = f"{POSITION}.partition" if POSITION in spark.table(tombstone_table).columns else "CAST(NULL AS INT)"
    rows = spark.sql(f"SELECT {part}, CAST(unix_millis(max({DELETED_AT})) AS BIGINT) FROM {tombstone_table} "
                     "GROUP BY 1").collect()
    times: dict[int | None, int] = {r[0]: int(r[1]) for r in rows if r[1] is not None}
    cdc_table = tombstone_table.removesuffix("_tombstones")
    if times and table_exists(spark, cdc_table):
        prop = table_property(spark, cdc_table, PROPERTY_PREFIX + cfg.name)
        wm = Watermark.from_property(prop) if prop else None
        if wm is not None and wm.kafka_ts_max is not None and len(wm.offsets) == 1:
            only = next(iter(wm.offsets))[1]
            for p in (only, None):
                if p in times:
                    times[p] = max(times[p], int(wm.kafka_ts_max))
    if None in times:
        times[None] = min(times.values())
    return times


def _at(t: datetime) -> str:
    """A timestamp literal (formatted here from a datetime: nothing else reaches SQL)."""
    return f"TIMESTAMP '{t.strftime('%Y-%m-%d %H:%M:%S')}'"


def tombstone_predicate(times: dict[int | None, int], column: str, wall_ms: int, keep: float) -> tuple[str, str]:
    """The rows of a tombstone table past the horizon (:func:`stream_times_ms`): each partition's
    older than its own stream time (never past the wall clock) minus ``keep``; tombstones with no
    position by the earliest. Returns (predicate, the latest cutoff, for the log)."""

    cuts = {p: _at(cutoff(min(wall_ms, ms), keep)) for p, ms in times.items()}
    parts = [f"({POSITION}.partition {'IS NULL' if p is None else f'= {int(p)}'} AND {column} < {at})"
             for p, at in sorted(cuts.items(), key=lambda x: -1 if x[0] is None else x[0])]
    if list(cuts) == [None]:  # one time for every row (also a table without the position column)
        parts = [f"{column} < {cuts[None]}"]
    return " OR ".join(parts), max(cuts.values())


def cutoff(now_ms: int, keep_seconds: float) -> datetime:
    """The first instant kept: ``now - keep``, rounded down to midnight UTC (whole partitions)."""
    t = datetime.fromtimestamp(now_ms / 1000, UTC) - timedelta(seconds=keep_seconds)
    return t.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)


def expire_rows(spark: SparkSession, cfg: PipelineConfig, now_ms: int | None = None) -> list[ActionRecord]:
    """Delete the rows past retention from each retained table, then expire old snapshots of the three
    tables a cycle appends to; one record per table that had any."""
    wall_ms = now_ms or int(time.time() * 1000)
    records = []
    tombstones = tombstone_targets(spark, cfg)
    for table, column, keep in [*targets(cfg), *tombstones]:
        q = f"{cfg.catalog.name}.{table}"
        if not table_exists(spark, q):
            continue
        before = _at(cutoff(wall_ms, keep))
        where = f"{column} < {before}"
        if (table, column, keep) in tombstones:  # by each partition's own stream time, never the wall clock
            times = stream_times_ms(spark, cfg, q)
            if not times:
                continue
            where, before = tombstone_predicate(times, column, wall_ms, keep)

        def delete(q: str = q, where: str = where, before: str = before) -> list[dict[str, Any]] | None:
            old = spark.sql(f"SELECT count(*) FROM {q} WHERE {where}").first()
            n = int(old[0]) if old is not None else 0
            if n == 0:
                return None
            spark.sql(f"DELETE FROM {q} WHERE {where}")
            log.info("maintenance: %s: deleted %d rows before %s (retention)", q, n, before)
            return [{"deleted_rows": n, "before": before}]

        records += _housekeeping(q, StepName.EXPIRE_ROWS, "retention", delete)
    for own in (cfg.health.history_table, cfg.maintenance.log_table, cfg.maintenance.telemetry_table):
        q = f"{cfg.catalog.name}.{own}"
        if not own or not table_exists(spark, q):
            continue
        policy = cfg.maintenance.policy_for(own)
        if StepName.REWRITE_DATA_FILES in policy.steps:
            def compact(q: str = q, n: int = policy.min_input_files) -> list[dict[str, Any]] | None:
                return _compact(spark, cfg.catalog.name, q, n)

            records += _housekeeping(q, StepName.REWRITE_DATA_FILES, "compacting", compact)

        def expire(q: str = q, policy: MaintenancePolicy = policy) -> list[dict[str, Any]] | None:
            n = expire_in_driver(spark, q, int(wall_ms - policy.snapshot_max_age_seconds * 1000),
                                 policy.snapshot_retain_last)
            return [{"expired_snapshots": n}] if n else None

        records += _housekeeping(q, StepName.EXPIRE_SNAPSHOTS, "expiring snapshots", expire)
    return records


def _compact(spark: SparkSession, catalog: str, table: str, min_input_files: int) -> list[dict[str, Any]] | None:
    """Binpack the partitions of ``table`` holding ``min_input_files`` files or more; None: nothing to do."""
    # the table comes from validated config; the count is an int
    row = spark.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{table}', "
                    f"options => map('min-input-files', '{max(2, int(min_input_files))}'))").first()
    done = row.asDict() if row is not None else {}
    if not done.get("rewritten_data_files_count"):
        return None
    log.info("maintenance: %s: compacted %s files into %s", table, done.get("rewritten_data_files_count"),
             done.get("added_data_files_count"))
    return [done]


def _housekeeping(table: str, step: StepName, what: str,
                  work: Callable[[], list[dict[str, Any]] | None]) -> list[ActionRecord]:
    """Run one housekeeping action on ``table``: its record, none when ``work`` had nothing to do
    (returned None), ``failed`` when it raised. Housekeeping never stops the cycle."""
    rec = ActionRecord(table, step, "ok", int(time.time() * 1000))
    started = time.monotonic()
    try:
        result = work()
        if result is None:
            return []
        rec.result = result
    except Exception as e:
        rec.outcome, rec.error = "failed", error_line(e)
        log.error("maintenance: %s of %s failed: %s", what, table, rec.error)
    rec.seconds = round(time.monotonic() - started, 3)
    return [rec]
