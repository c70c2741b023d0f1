"""Health figures → an ordered, explained maintenance plan per table, and priority across tables.

Order within a table: expire snapshots → remove orphans → compact data (applying deletes) →
rewrite position deletes → rewrite manifests. Each step only when its threshold fires; each step
carries its reason, the figures that fired it and the expected gain. Partitions written within the
quiet time are never rewritten.

Priority across tables: ``(100 - score) + policy.priority_boost + min(20, minutes since icetide
last maintained the table / 30) + min(20, 5·log2(1 + queries))``, highest first, ties by name.
The waiting term means no table starves behind a perpetually degraded neighbour; the last term
comes from query telemetry (``maintenance.telemetry_table``): most queried first.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from icetide.health.collector import PartitionHealth, TableHealth
from icetide.maintenance.partitions import PartitionField, where
from icetide.maintenance.policy import MaintenancePolicy

MAX_PARTITIONS_PER_STEP = 50


@dataclass
class Step:
    table: str
    action: str
    reason: str
    figures: dict[str, Any]
    expected: str
    args: dict[str, Any] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)
    partitions: list[str] = field(default_factory=list)
    expected_bytes: int = 0


@dataclass
class TablePlan:
    table: str
    score: float
    tier: str
    priority: float
    steps: list[Step]
    skipped: list[str]
    queries: int = 0  # in maintenance.telemetry_window

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ts(ms: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def demand(queries: int) -> float:
    """Priority from query telemetry: 5·log2(1 + queries in the window), at most 20."""
    return min(20.0, 5.0 * math.log2(1 + max(0, queries)))


def priority(h: TableHealth, policy: MaintenancePolicy, last_maintained_ms: int | None, now_ms: int,
             queries: int = 0) -> float:
    # never maintained counts as having waited the longest
    waited = 20.0 if last_maintained_ms is None else min(20.0, (now_ms - last_maintained_ms) / 60000 / 30)
    return round((100 - h.score) + policy.priority_boost + waited + demand(queries), 3)


def _hot(p: PartitionHealth, policy: MaintenancePolicy, now_ms: int) -> bool:
    return p.last_write_ms is not None and now_ms - p.last_write_ms < policy.hot_partition_quiet_seconds * 1000


def plan_table(h: TableHealth, spec: list[PartitionField], policy: MaintenancePolicy, now_ms: int,
               last_maintained_ms: int | None = None, queries: int = 0) -> TablePlan:
    steps: list[Step] = []
    skipped: list[str] = []
    t = h.table
    target = policy.target_file_size_bytes or h.target_file_bytes

    if "expire_snapshots" in policy.steps and h.snapshots > policy.snapshots_trigger:
        older = now_ms - policy.snapshot_max_age_seconds * 1000
        steps.append(Step(
            t, "expire_snapshots",
            f"{h.snapshots} snapshots > trigger {policy.snapshots_trigger}",
            {"snapshots": h.snapshots},
            f"drop snapshots older than {_ts(older)} UTC, keeping the last {policy.snapshot_retain_last}; "
            f"up to {h.snapshots - policy.snapshot_retain_last} fewer snapshots",
            args={"older_than": _ts(older), "retain_last": policy.snapshot_retain_last},
        ))

    if "remove_orphan_files" in policy.steps:
        older = now_ms - policy.orphan_min_age_seconds * 1000
        steps.append(Step(
            t, "remove_orphan_files", "orphan cleanup is enabled for this table",
            {"orphan_min_age_seconds": policy.orphan_min_age_seconds},
            f"delete files under the table location older than {_ts(older)} UTC that no snapshot references "
            "(dry run first, every path logged)",
            args={"older_than": _ts(older)},
        ))

    candidates: list[tuple[PartitionHealth, str]] = []
    for p in sorted(h.partitions, key=lambda p: (p.score, -p.data_files)):
        needs_compact = p.small_files >= policy.min_input_files
        needs_deletes = p.delete_files > 0 and (p.delete_ratio >= policy.delete_ratio
                                                 or p.delete_files >= policy.delete_files)
        if not (needs_compact or needs_deletes):
            continue
        label = p.partition or "(unpartitioned)"
        if _hot(p, policy, now_ms):
            age = (now_ms - (p.last_write_ms or now_ms)) / 1000
            skipped.append(f"{label}: hot (written {age:.0f}s ago, quiet time {policy.hot_partition_quiet_seconds:g}s)")
            continue
        why = []
        if needs_compact:
            why.append(f"{p.small_files} small files (≥ {policy.min_input_files})")
        if needs_deletes:
            why.append(f"delete ratio {p.delete_ratio:.3f} / {p.delete_files} delete files")
        candidates.append((p, "; ".join(why)))

    if "rewrite_data_files" in policy.steps and candidates:
        chosen = candidates[:MAX_PARTITIONS_PER_STEP]
        filters = []
        if spec:
            for p, _ in chosen:
                f = where(spec, p.partition)
                if f is None:
                    skipped.append(f"{p.partition}: cannot be selected safely by a filter; left alone")
                else:
                    filters.append(f)
        files_in = sum(p.small_files for p, _ in chosen)
        bytes_in = sum(p.data_bytes for p, _ in chosen)
        files_out = sum(max(1, math.ceil(p.data_bytes / target)) for p, _ in chosen)
        if not spec or filters:
            args: dict[str, Any] = {"strategy": policy.strategy}
            if spec:
                args["where"] = " OR ".join(f"({f})" for f in filters)
            if policy.strategy == "sort" and policy.sort_columns:
                args["sort_order"] = ", ".join(f"{c} ASC NULLS LAST" for c in policy.sort_columns)
            elif policy.strategy == "zorder" and policy.sort_columns:
                args["sort_order"] = f"zorder({', '.join(policy.sort_columns)})"
            steps.append(Step(
                t, "rewrite_data_files",
                "; ".join(f"{p.partition or '(unpartitioned)'}: {why}" for p, why in chosen),
                {"partitions": len(chosen), "small_files": files_in, "bytes": bytes_in,
                 "target_file_size_bytes": target},
                f"~{sum(p.data_files for p, _ in chosen)} → ~{files_out} data files in {len(chosen)} cold "
                f"partition(s), {bytes_in:,} bytes rewritten, deletes applied",
                args=args,
                options={
                    "min-input-files": str(policy.min_input_files),
                    "target-file-size-bytes": str(target),
                    "partial-progress.enabled": "true",
                    "partial-progress.max-commits": "10",
                    "max-file-group-size-bytes": str(policy.max_file_group_bytes),
                    "delete-file-threshold": str(policy.delete_files),
                    "delete-ratio-threshold": str(policy.delete_ratio),
                    "use-starting-sequence-number": "true",
                },
                partitions=[p.partition for p, _ in chosen],
                expected_bytes=bytes_in,
            ))

    pos = [(p, w) for p, w in candidates if p.position_delete_files >= 2]
    if "rewrite_position_delete_files" in policy.steps and pos:
        filters = [f for p, _ in pos if (f := where(spec, p.partition)) is not None] if spec else []
        if not spec or filters:
            n = sum(p.position_delete_files for p, _ in pos)
            steps.append(Step(
                t, "rewrite_position_delete_files",
                f"{n} position delete files in {len(pos)} cold partition(s)",
                {"position_delete_files": n},
                f"~{n} → ~{len(pos)} position delete files, dangling deletes dropped",
                args={"where": " OR ".join(f"({f})" for f in filters)} if spec else {},
                options={"rewrite-all": "true", "partial-progress.enabled": "true"},
                partitions=[p.partition for p, _ in pos],
            ))

    if "rewrite_manifests" in policy.steps and h.manifests > policy.manifests_trigger:
        after = max(1, math.ceil(h.manifest_bytes / (8 * 1024 * 1024)))
        steps.append(Step(
            t, "rewrite_manifests", f"{h.manifests} manifests > trigger {policy.manifests_trigger}",
            {"manifests": h.manifests, "manifest_bytes": h.manifest_bytes},
            f"~{h.manifests} → ~{after} manifests (faster planning)",
        ))

    return TablePlan(t, h.score, h.tier, priority(h, policy, last_maintained_ms, now_ms, queries), steps, skipped,
                     queries)


def order(plans: list[TablePlan]) -> list[TablePlan]:
    """Highest priority first; ties by table name."""
    return sorted(plans, key=lambda p: (-p.priority, p.table))
