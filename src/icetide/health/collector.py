"""Collect health figures of an Iceberg table from metadata only (no data file is opened).

Facts come from a :class:`~icetide.lake.meta.MetaReader` (Spark's metadata tables or PyIceberg, the
same answers): live files (manifests only), last write per partition, snapshots, manifests and the size
of the current metadata JSON. The figures are computed here, once, whichever reader supplied them.
Works on any Iceberg table, whoever wrote it.
"""

from __future__ import annotations

import json
import time

from icetide.config.thresholds import HealthThresholds
from icetide.health.model import PartitionHealth, TableHealth
from icetide.health.score import Scored, score_partition, score_table
from icetide.lake.meta import MetaReader, Snapshot
from icetide.lake.offsets import K_PIPELINE, K_PLANNED_AT, PROPERTY_PREFIX, RESTARTS_PREFIX, Watermark, fold_watermark
from icetide.lake.restart_marks import Restarts

DEFAULT_TARGET = 512 * 1024 * 1024  # Iceberg's write.target-file-size-bytes default


def collect(reader: MetaReader, table: str, thresholds: HealthThresholds | None = None,
            now_ms: int | None = None) -> TableHealth:
    """Figures of ``table`` (``namespace.table``), named ``<catalog>.<namespace>.<table>``."""
    th = thresholds or HealthThresholds()
    started = time.monotonic()
    now_ms = now_ms or int(time.time() * 1000)
    props = reader.properties(table)
    target = int(props.get("write.target-file-size-bytes", DEFAULT_TARGET))
    small = int(target * th.small_file_ratio)
    parts = _partitions(reader, table, small)
    for key, ts in reader.partition_writes(table).items():
        if key in parts:
            parts[key].last_write_ms = ts

    snaps = reader.snapshots(table)
    commit_times = sorted(s.committed_at_ms for s in snaps)
    last_commit = commit_times[-1] if commit_times else None
    pipelines = {s.summary[K_PIPELINE] for s in snaps if K_PIPELINE in s.summary}
    pipelines |= {k[len(PROPERTY_PREFIX):] for k in props if k.startswith(PROPERTY_PREFIX)}
    if not reader.partitioned(table):
        for p in parts.values():
            p.last_write_ms = last_commit
    for p in parts.values():
        p.hot = p.last_write_ms is not None and now_ms - p.last_write_ms < th.hot_partition_seconds * 1000

    m = reader.manifests(table)
    health = TableHealth(
        table=f"{reader.catalog}.{table}", collected_at_ms=now_ms, target_file_bytes=target, small_file_bytes=small,
        partitions=sorted(parts.values(), key=lambda p: p.partition),
        snapshots=len(snaps), snapshot_times_ms=commit_times,
        write_times_ms=sorted(s.committed_at_ms for s in snaps if s.writes),
        commits_last_hour=sum(1 for t in commit_times if now_ms - t <= 3_600_000),
        commits_per_hour_24h=round(sum(1 for t in commit_times if now_ms - t <= 86_400_000) / 24, 3),
        last_commit_ms=last_commit,
        manifests=m.count, manifest_bytes=m.bytes, delete_manifests=m.delete_manifests,
        manifest_target_bytes=int(props.get("commit.manifest.target-size-bytes", 8 * 1024 * 1024)),
        metadata_file_bytes=reader.metadata_file_bytes(table),
        icetide_pipelines=sorted(pipelines), commit_latency_ms=_commit_latency(snaps),
        freshness_ms=freshness(props, now_ms),
    )
    for p in health.partitions:
        _apply(p, score_partition(p, th))
    _apply(health, score_table(health, th, now_ms))
    health.seconds_to_collect = round(time.monotonic() - started, 3)
    return health


def _partitions(reader: MetaReader, table: str, small: int) -> dict[str, PartitionHealth]:
    """Per partition: data files, bytes, rows, small files and the size histogram; delete files by kind."""
    import pyarrow as pa
    import pyarrow.compute as pc

    f = reader.files(table)
    size = f.column("file_size_in_bytes")
    f = f.append_column("b", pc.cast(pc.floor(pc.log2(pc.max_element_wise(size, 1))), pa.int32()))
    f = f.append_column("small", pc.cast(pc.less(size, small), pa.int64()))
    grouped = f.group_by(["partition", "content", "b"]).aggregate(
        [("file_size_in_bytes", "count"), ("file_size_in_bytes", "sum"), ("record_count", "sum"), ("small", "sum")])
    parts: dict[str, PartitionHealth] = {}
    for r in grouped.to_pylist():
        ph = parts.setdefault(r["partition"], PartitionHealth(r["partition"]))
        files, nbytes, recs = int(r["file_size_in_bytes_count"]), int(r["file_size_in_bytes_sum"] or 0), \
            int(r["record_count_sum"] or 0)
        if r["content"] == 0:
            ph.data_files += files
            ph.data_bytes += nbytes
            ph.records += recs
            ph.small_files += int(r["small_sum"] or 0)
            ph.size_hist[int(r["b"])] = files
        elif r["content"] == 1:
            ph.position_delete_files += files
            ph.position_delete_records += recs
        else:
            ph.equality_delete_files += files
            ph.equality_delete_records += recs
    return parts


def _apply(target: PartitionHealth | TableHealth, s: Scored) -> None:
    target.score, target.tier, target.reasons = s.score, s.tier, s.reasons


def _commit_latency(snaps: list[Snapshot]) -> int | None:
    """Newest icetide commit: commit time minus when Spark planned its batch."""
    tagged = [(s.committed_at_ms, int(s.summary[K_PLANNED_AT])) for s in snaps if K_PLANNED_AT in s.summary]
    if not tagged:
        return None
    ts, planned = max(tagged)
    return max(0, ts - planned)


def freshness(props: dict[str, str], now_ms: int) -> int | None:
    """Age of the newest record in the table now: ``now_ms`` minus the newest Kafka timestamp any
    pipeline committed (None if no pipeline has). It grows while nothing new lands, whatever the
    cause; the commit's own delay is ``commit_latency_ms``."""
    newest = [int(wm.kafka_ts_max) for k, v in props.items() if k.startswith(PROPERTY_PREFIX)
              if (wm := Watermark.from_property(v)).kafka_ts_max is not None]
    return max(0, now_ms - max(newest)) if newest else None


def watermarks(props: dict[str, str]) -> dict[str, Watermark]:
    """Each pipeline's watermark property, with its restart marks applied (a mirror that does not
    carry a recreated topic's mark gives that topic nothing: its offsets were the deleted topic's)."""
    out = {}
    for k, v in props.items():
        if k.startswith(PROPERTY_PREFIX):
            p = k[len(PROPERTY_PREFIX):]
            out[p] = fold_watermark(Watermark.from_property(v), [], Restarts.parse(props.get(RESTARTS_PREFIX + p))) \
                or Watermark.from_property(v)
    return out


def to_json(h: TableHealth, partitions: bool = True) -> str:
    d = h.summary()
    if partitions:
        d["partitions"] = h.partition_rows()
    return json.dumps(d, sort_keys=True)
