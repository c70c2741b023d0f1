"""Collect health figures of an Iceberg table from metadata only (no data file is opened).

Sources: the ``files`` metadata table grouped by partition (manifests only), ``partitions`` (last
write per partition), ``snapshots``, ``manifests`` and ``metadata_log_entries`` (plus one file-size
lookup of the current metadata JSON). Works on any Iceberg table, whoever wrote it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from icetide.health.score import Scored, score_partition, score_table
from icetide.health.thresholds import HealthThresholds
from icetide.ingest import checkpoint
from icetide.ingest.offsets import K_PIPELINE, K_PLANNED_AT, PROPERTY_PREFIX, Watermark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_TARGET = 512 * 1024 * 1024  # Iceberg's write.target-file-size-bytes default


@dataclass
class PartitionHealth:
    partition: str
    data_files: int = 0
    data_bytes: int = 0
    records: int = 0
    small_files: int = 0
    position_delete_files: int = 0
    position_delete_records: int = 0
    equality_delete_files: int = 0
    equality_delete_records: int = 0
    last_write_ms: int | None = None
    hot: bool = False
    score: float = 100.0
    tier: str = "healthy"
    reasons: list[str] = field(default_factory=list)

    @property
    def avg_file_bytes(self) -> float:
        return self.data_bytes / self.data_files if self.data_files else 0.0

    @property
    def small_file_ratio(self) -> float:
        return self.small_files / self.data_files if self.data_files else 0.0

    @property
    def delete_files(self) -> int:
        return self.position_delete_files + self.equality_delete_files

    @property
    def delete_ratio(self) -> float:
        deleted = self.position_delete_records + self.equality_delete_records
        return deleted / self.records if self.records else (1.0 if deleted else 0.0)


@dataclass
class TableHealth:
    table: str
    collected_at_ms: int
    target_file_bytes: int
    small_file_bytes: int
    partitions: list[PartitionHealth]
    snapshots: int = 0
    commits_last_hour: int = 0
    commits_per_hour_24h: float = 0.0
    last_commit_ms: int | None = None
    manifests: int = 0
    manifest_bytes: int = 0
    delete_manifests: int = 0
    metadata_file_bytes: int | None = None
    icetide_pipelines: list[str] = field(default_factory=list)
    commit_latency_ms: int | None = None
    freshness_ms: int | None = None
    kafka_lag: int | None = None
    seconds_to_collect: float = 0.0
    score: float = 100.0
    tier: str = "healthy"
    reasons: list[str] = field(default_factory=list)

    def total(self, attr: str) -> int:
        return sum(int(getattr(p, attr)) for p in self.partitions)

    @property
    def data_files(self) -> int:
        return self.total("data_files")

    @property
    def data_bytes(self) -> int:
        return self.total("data_bytes")

    @property
    def records(self) -> int:
        return self.total("records")

    @property
    def small_files(self) -> int:
        return self.total("small_files")

    @property
    def delete_files(self) -> int:
        return self.total("position_delete_files") + self.total("equality_delete_files")

    @property
    def deleted_records(self) -> int:
        return self.total("position_delete_records") + self.total("equality_delete_records")

    @property
    def delete_ratio(self) -> float:
        return self.deleted_records / self.records if self.records else (1.0 if self.deleted_records else 0.0)

    @property
    def avg_file_bytes(self) -> float:
        return self.data_bytes / self.data_files if self.data_files else 0.0

    @property
    def max_partition_files(self) -> int:
        return max((p.data_files for p in self.partitions), default=0)

    def summary(self) -> dict[str, Any]:
        """Table-level figures (no partition list) for JSON output, history and metrics."""
        d = {k: v for k, v in asdict(self).items() if k != "partitions"}
        d.update(data_files=self.data_files, data_bytes=self.data_bytes, records=self.records,
                 small_files=self.small_files, delete_files=self.delete_files,
                 deleted_records=self.deleted_records, delete_ratio=round(self.delete_ratio, 6),
                 avg_file_bytes=round(self.avg_file_bytes, 1), partition_count=len(self.partitions),
                 max_partition_files=self.max_partition_files,
                 hot_partitions=sum(1 for p in self.partitions if p.hot))
        return d

    def partition_rows(self) -> list[dict[str, Any]]:
        out = []
        for p in self.partitions:
            d = asdict(p)
            d.update(avg_file_bytes=round(p.avg_file_bytes, 1), small_file_ratio=round(p.small_file_ratio, 6),
                     delete_ratio=round(p.delete_ratio, 6))
            out.append(d)
        return out


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
        SELECT {part_expr} AS p, content, count(*) AS files, sum(file_size_in_bytes) AS bytes,
               sum(record_count) AS records,
               sum(CASE WHEN content = 0 AND file_size_in_bytes < {small} THEN 1 ELSE 0 END) AS small
        FROM {table}.files GROUP BY 1, 2
    """).collect():
        ph = parts.setdefault(r["p"], PartitionHealth(r["p"]))
        files, size, recs = int(r["files"]), int(r["bytes"] or 0), int(r["records"] or 0)
        if r["content"] == 0:
            ph.data_files, ph.data_bytes, ph.records, ph.small_files = files, size, recs, int(r["small"])
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
        snapshots=len(snaps),
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
