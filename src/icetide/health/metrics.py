"""Prometheus endpoint with the same figures as `icetide status`, labelled by table (and by
partition for the worst N partitions of each table, so the label set stays bounded)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from icetide.config.models import PipelineConfig
from icetide.health.model import TableHealth
from icetide.health.score import TIERS
from icetide.lake.meta import MetaReader
from icetide.lake.readers import as_reader
from icetide.loops import LoopService

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TABLE_GAUGES: list[tuple[str, str, str]] = [
    ("score", "score", "Health score 0-100 (higher is healthier)"),
    ("data_files", "data_files", "Data files in the current snapshot"),
    ("data_bytes", "data_bytes", "Bytes of data files"),
    ("records", "records", "Rows in data files"),
    ("small_files", "small_files", "Data files below the small-file bound"),
    ("avg_file_bytes", "avg_file_bytes", "Average data file size"),
    ("delete_files", "delete_files", "Position and equality delete files"),
    ("delete_ratio", "delete_ratio", "Deleted rows / data rows"),
    ("snapshots", "snapshots", "Snapshots kept in metadata"),
    ("commits_last_hour", "commits_last_hour", "Commits in the last hour"),
    ("manifests", "manifests", "Manifests of the current snapshot"),
    ("manifest_bytes", "manifest_bytes", "Bytes of those manifests"),
    ("metadata_file_bytes", "metadata_file_bytes", "Size of the current metadata JSON"),
    ("partitions", "partition_count", "Partitions with live files"),
    ("max_partition_files", "max_partition_files", "Data files in the fullest partition"),
    ("commit_latency_ms", "commit_latency_ms", "icetide: commit time - batch planned time, newest commit"),
    ("freshness_ms", "freshness_ms", "icetide: age of the newest record in the table (now - its Kafka timestamp)"),
    ("kafka_lag", "kafka_lag", "icetide: records in Kafka not yet in the table"),
    ("kafka_deleted_unread", "kafka_deleted_unread",
     "icetide: records Kafka deleted (retention) before the pipeline read them"),
    ("last_commit_timestamp_ms", "last_commit_ms", "Time of the newest snapshot"),
]
PARTITION_GAUGES = [("data_files", "Data files"), ("small_files", "Small data files"),
                    ("delete_files", "Delete files"), ("delete_ratio", "Deleted rows / data rows"),
                    ("score", "Health score 0-100")]


class HealthCollector(Collector):
    """Serves the latest collected figures; `update` swaps them in atomically."""

    def __init__(self, max_partitions: int = 20) -> None:
        self._lock = threading.Lock()
        self._healths: list[TableHealth] = []
        self.max_partitions = max_partitions

    def update(self, healths: list[TableHealth]) -> None:
        with self._lock:
            self._healths = list(healths)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            healths = list(self._healths)
        for name, key, doc in TABLE_GAUGES:
            g = GaugeMetricFamily(f"icetide_table_{name}", doc, labels=["table"])
            for h in healths:
                value = h.summary().get(key)
                if value is not None:
                    g.add_metric([h.table], float(value))
            yield g
        tier = GaugeMetricFamily("icetide_table_tier", "1 for the table's current tier", labels=["table", "tier"])
        for h in healths:
            for t in TIERS:
                tier.add_metric([h.table, t], 1.0 if h.tier == t else 0.0)
        yield tier
        for name, doc in PARTITION_GAUGES:
            g = GaugeMetricFamily(f"icetide_partition_{name}", f"{doc} (worst partitions only)",
                                  labels=["table", "partition"])
            for h in healths:
                worst = sorted(h.partitions, key=lambda p: (p.score, -p.data_files))[: self.max_partitions]
                for p in worst:
                    g.add_metric([h.table, p.partition or "(unpartitioned)"], float(getattr(p, name)))
            yield g


class MetricsLoop(LoopService):
    """Collects every watched table's figures into a :class:`HealthCollector` every interval."""

    name = "metrics"

    def __init__(self, source: MetaReader | SparkSession, cfg: PipelineConfig, collector: HealthCollector,
                 every: float) -> None:
        super().__init__(every)
        self.reader, self.cfg, self.collector = as_reader(cfg, source), cfg, collector

    def tick(self) -> None:
        from icetide.health.watch import collect_all

        self.reader = self.reader.fresh()
        self.collector.update(collect_all(self.reader, self.cfg))
