"""Collect health figures of an Iceberg table from metadata only (no data file is opened).

Sources: the ``files`` metadata table grouped by partition (manifests only), ``partitions`` (last
write per partition), ``snapshots``, ``manifests`` and ``metadata_log_entries`` (plus one file-size
lookup of the current metadata JSON). Works on any Iceberg table, whoever wrote it.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from icetide.config.thresholds import HealthThresholds
from icetide.health.model import PartitionHealth, TableHealth
from icetide.health.score import Scored, score_partition, score_table
from icetide.lake import checkpoint
from icetide.lake.offsets import K_PIPELINE, K_PLANNED_AT, PROPERTY_PREFIX, Watermark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_TARGET = 512 * 1024 * 1024  # Iceberg's write.target-file-size-bytes default


def _has_column(spark: SparkSession, table: str, column: str) -> bool:
    return column in spark.table(table).columns


def table_properties(spark: SparkSession, table: str) -> dict[str, str]:
    return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}


def collect(spark: SparkSession, table: str, thresholds: HealthThresholds | None = None,
            now_ms: int | None = None) -> TableHealth:
    """Figures of ``table`` (a validated, fully qualified identifier)."""
    th = thresholds or HealthThresholds()
    started = time.monotonic()
    now_ms = now_ms or int(time.time() * 1000)
    props = table_properties(spark, table)
    target = int(props.get("write.target-file-size-bytes", DEFAULT_TARGET))
    small = int(target * th.small_file_ratio)
    partitioned = _has_column(spark, f"{table}.files", "partition")
    part_expr = "to_json(partition)" if partitioned else "''"

    parts: dict[str, PartitionHealth] = {}
    for r in spark.sql(f"""
        SELECT {part_expr} AS p, content,
               CASE WHEN content = 0 THEN CAST(floor(log2(greatest(file_size_in_bytes, 1))) AS INT) END AS b,
               count(*) AS files, sum(file_size_in_bytes) AS bytes, sum(record_count) AS records,
               sum(CASE WHEN content = 0 AND file_size_in_bytes < {small} THEN 1 ELSE 0 END) AS small
        FROM {table}.files GROUP BY 1, 2, 3
    """).collect():
        ph = parts.setdefault(r["p"], PartitionHealth(r["p"]))
        files, size, recs = int(r["files"]), int(r["bytes"] or 0), int(r["records"] or 0)
        if r["content"] == 0:
            ph.data_files += files
            ph.data_bytes += size
            ph.records += recs
            ph.small_files += int(r["small"])
            ph.size_hist[int(r["b"])] = files
        elif r["content"] == 1:
            ph.position_delete_files, ph.position_delete_records = files, recs
        else:
            ph.equality_delete_files, ph.equality_delete_records = files, recs
    if partitioned:
        for r in spark.sql(f"""
            SELECT to_json(partition) AS p, CAST(unix_millis(last_updated_at) AS BIGINT) AS ts
            FROM {table}.partitions
        """).collect():
            if r["p"] in parts and r["ts"] is not None:
                parts[r["p"]].last_write_ms = int(r["ts"])

    snaps = spark.sql(f"""
        SELECT CAST(unix_millis(committed_at) AS BIGINT) AS ts, summary FROM {table}.snapshots
    """).collect()
    commit_times = sorted(int(s["ts"]) for s in snaps)
    last_commit = commit_times[-1] if commit_times else None
    pipelines = sorted({s["summary"][K_PIPELINE] for s in snaps if s["summary"] and K_PIPELINE in s["summary"]})
    pipelines = sorted(set(pipelines) | {k[len(PROPERTY_PREFIX):] for k in props if k.startswith(PROPERTY_PREFIX)})
    latency = _commit_latency(snaps)
    freshness = _freshness(props)
    if not partitioned:
        for p in parts.values():
            p.last_write_ms = last_commit
    for p in parts.values():
        p.hot = p.last_write_ms is not None and now_ms - p.last_write_ms < th.hot_partition_seconds * 1000

    m = spark.sql(f"""
        SELECT count(*) AS n, coalesce(sum(length), 0) AS bytes,
               coalesce(sum(CASE WHEN content = 1 THEN 1 ELSE 0 END), 0) AS dm
        FROM {table}.manifests
    """).first()
    health = TableHealth(
        table=table, collected_at_ms=now_ms, target_file_bytes=target, small_file_bytes=small,
        partitions=sorted(parts.values(), key=lambda p: p.partition),
        snapshots=len(snaps), snapshot_times_ms=commit_times,
        commits_last_hour=sum(1 for t in commit_times if now_ms - t <= 3_600_000),
        commits_per_hour_24h=round(sum(1 for t in commit_times if now_ms - t <= 86_400_000) / 24, 3),
        last_commit_ms=last_commit,
        manifests=int(m["n"]) if m else 0, manifest_bytes=int(m["bytes"]) if m else 0,
        delete_manifests=int(m["dm"]) if m else 0,
        metadata_file_bytes=_metadata_file_bytes(spark, table),
        icetide_pipelines=pipelines, commit_latency_ms=latency, freshness_ms=freshness,
    )
    for p in health.partitions:
        _apply(p, score_partition(p, th))
    _apply(health, score_table(health, th, now_ms))
    health.seconds_to_collect = round(time.monotonic() - started, 3)
    return health


def _apply(target: PartitionHealth | TableHealth, s: Scored) -> None:
    target.score, target.tier, target.reasons = s.score, s.tier, s.reasons


def _commit_latency(snaps: list[Any]) -> int | None:
    """Newest icetide commit: commit time minus when Spark planned its batch."""
    tagged = [(int(s["ts"]), int(s["summary"][K_PLANNED_AT])) for s in snaps
              if s["summary"] and K_PLANNED_AT in s["summary"]]
    if not tagged:
        return None
    ts, planned = max(tagged)
    return max(0, ts - planned)


def _freshness(props: dict[str, str]) -> int | None:
    """Newest icetide commit: its commit time minus the newest Kafka timestamp it held."""
    best: tuple[int, int] | None = None
    for key, value in props.items():
        if key.startswith(PROPERTY_PREFIX):
            wm = Watermark.from_property(value)
            if wm.kafka_ts_max is not None and (best is None or wm.committed_at_ms > best[0]):
                best = (wm.committed_at_ms, int(wm.kafka_ts_max))
    return None if best is None else max(0, best[0] - best[1])


def watermarks(props: dict[str, str]) -> dict[str, Watermark]:
    return {k[len(PROPERTY_PREFIX):]: Watermark.from_property(v) for k, v in props.items()
            if k.startswith(PROPERTY_PREFIX)}


def _metadata_file_bytes(spark: SparkSession, table: str) -> int | None:
    row = spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()
    if row is None:
        return None
    fs, p = checkpoint._fs_path(spark, row["file"])
    return int(fs.getFileStatus(p).getLen()) if fs.exists(p) else None


def to_json(h: TableHealth, partitions: bool = True) -> str:
    d = h.summary()
    if partitions:
        d["partitions"] = h.partition_rows()
    return json.dumps(d, sort_keys=True)
