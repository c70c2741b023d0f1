"""Health figures of a table and its partitions: plain data, filled by the collector, read by
scoring, history, alerts, metrics, the report and the maintenance planner."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    # data files per size bucket: {b: files with 2**b <= size < 2**(b+1)}; minor compaction's tiers
    size_hist: dict[int, int] = field(default_factory=dict)

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
    manifest_target_bytes: int = 8 * 1024 * 1024  # commit.manifest.target-size-bytes
    metadata_file_bytes: int | None = None
    icetide_pipelines: list[str] = field(default_factory=list)
    commit_latency_ms: int | None = None
    freshness_ms: int | None = None
    kafka_lag: int | None = None
    #: the table's pipeline reads a Kafka that did not answer, so kafka_lag is unknown
    kafka_unreachable: bool = False
    #: records Kafka deleted (retention) before the pipeline read them: lost on its next batch
    kafka_deleted_unread: int | None = None
    seconds_to_collect: float = 0.0
    score: float = 100.0
    tier: str = "healthy"
    reasons: list[str] = field(default_factory=list)
    # commit time of every snapshot still in the metadata, oldest first (not in summaries)
    snapshot_times_ms: list[int] = field(default_factory=list, repr=False)
    # the same for snapshots that wrote data or deletes (not compactions): the stream's commits
    write_times_ms: list[int] = field(default_factory=list, repr=False)

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
        d = {k: v for k, v in asdict(self).items() if k not in ("partitions", "snapshot_times_ms", "write_times_ms")}
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
