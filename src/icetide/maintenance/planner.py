"""Health figures → an ordered, explained maintenance plan per table, and priority across tables.

Order within a table: expire snapshots → remove orphans → minor compaction of hot partitions →
full compaction of cold partitions (applying deletes) → rewrite position deletes → rewrite
manifests. Each step only when its threshold fires and it can change something; each step carries
its reason, the figures that fired it and the expected gain.

Hot partitions (written within the quiet time, except time partitions the stream has moved past:
see :mod:`icetide.maintenance.hot`) get tiered minor compaction; a hot partition holds fewer than
``tier_fanout`` files per tier plus the commits since the last cycle. Appends never conflict with it
(a rewrite is validated against deletes). Cold partitions get the full compaction (sorted if set).

Priority across tables: ``(100 - score) + policy.priority_boost + min(20, minutes since icetide
last maintained the table / 30) + min(20, 5·log2(1 + queries))``, highest first, ties by name.
The waiting term means no table starves behind a perpetually degraded neighbour; the last term
comes from query telemetry (``maintenance.telemetry_table``): most queried first.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from icetide.config.policy import MaintenancePolicy, StepName
from icetide.health.model import PartitionHealth, TableHealth
from icetide.maintenance import layout
from icetide.maintenance.hot import closes_at, commits_since, fragmented, hot_partitions, tier_merge
from icetide.maintenance.partitions import PartitionField, where

MAX_PARTITIONS_PER_STEP = 50


@dataclass
class Step:
    table: str
    action: StepName
    reason: str
    figures: dict[str, Any]
    expected: str
    args: dict[str, Any] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)
    partitions: list[str] = field(default_factory=list)
    expected_bytes: int = 0
    hot: bool = False  # on partitions being written: small by construction, outside the rewrite budget


@dataclass
class TablePlan:
    table: str
    score: float
    tier: str
    priority: float
    steps: list[Step]
    skipped: list[str]
    queries: int = 0  # in maintenance.telemetry_window
    revisit_at_ms: int | None = None  # a closing partition settles then: worth planning again (hot.closes_at)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ts(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def demand(queries: int) -> float:
    """Priority from query telemetry: 5·log2(1 + queries in the window), at most 20."""
    return min(20.0, 5.0 * math.log2(1 + max(0, queries)))


def priority(h: TableHealth, policy: MaintenancePolicy, last_maintained_ms: int | None, now_ms: int,
             queries: int = 0) -> float:
    # never maintained counts as having waited the longest
    waited = 20.0 if last_maintained_ms is None else min(20.0, (now_ms - last_maintained_ms) / 60000 / 30)
    return round((100 - h.score) + policy.priority_boost + waited + demand(queries), 3)


def expirable(snapshot_times_ms: list[int], older_than_ms: float, retain_last: int) -> int:
    """How many snapshots ``expire_snapshots(older_than, retain_last)`` would remove."""
    times = sorted(snapshot_times_ms)
    beyond_kept = times[:-retain_last] if len(times) > retain_last else []
    return sum(1 for t in beyond_kept if t < older_than_ms)


def plan_table(h: TableHealth, spec: list[PartitionField], policy: MaintenancePolicy, now_ms: int,
               last_maintained_ms: int | None = None, queries: int = 0,
               layout_input: layout.LayoutInput | None = None, compacted_ms: dict[str, int] | None = None
               ) -> TablePlan:
    steps: list[Step] = []
    skipped: list[str] = []
    t, cap, keep = h.table, policy.snapshot_max_count, policy.snapshot_retain_last
    target = policy.target_file_size_bytes or h.target_file_bytes
    trigger, floor = min(policy.snapshots_trigger, cap or policy.snapshots_trigger), "the age floor"
    hot = hot_partitions(h.partitions, spec, policy, now_ms, h.write_times_ms, compacted_ms or {}, target)

    if StepName.EXPIRE_SNAPSHOTS in policy.steps and h.snapshots > trigger:
        older = now_ms - policy.snapshot_max_age_seconds * 1000
        if cap and h.snapshots > cap:  # down to the newest retain_last; the procedure takes whole seconds
            older, floor = max(older, sorted(h.snapshot_times_ms)[-keep] // 1000 * 1000), f"the newest {keep}"
        n = expirable(h.snapshot_times_ms, older, keep)
        if n == 0:
            skipped.append(f"expire_snapshots: {h.snapshots} snapshots > trigger {trigger}, but "
                           f"none beyond the last {keep} is older than {_ts(older)} UTC")
        else:
            steps.append(Step(
                t, StepName.EXPIRE_SNAPSHOTS, f"{h.snapshots} snapshots > trigger {trigger}; {n} older than {floor}",
                {"snapshots": h.snapshots, "expirable": n},
                f"drop snapshots older than {_ts(older)} UTC, keeping the last {keep}; {n} fewer snapshots "
                f"({'Iceberg ExpireSnapshots in the driver' if policy.snapshot_expiry == 'driver' else 'procedure'})",
                args={"older_than": _ts(older), "retain_last": keep, "via": policy.snapshot_expiry},
            ))

    if StepName.REMOVE_ORPHAN_FILES in policy.steps:
        older = now_ms - policy.orphan_min_age_seconds * 1000
        steps.append(Step(
            t, StepName.REMOVE_ORPHAN_FILES, "orphan cleanup is enabled for this table",
            {"orphan_min_age_seconds": policy.orphan_min_age_seconds},
            f"delete files under the table location older than {_ts(older)} UTC that no snapshot references "
            "(dry run first, every path logged)",
            args={"older_than": _ts(older)},
        ))

    if StepName.REWRITE_HOT_FILES in policy.steps:
        steps += _hot_steps(h, spec, policy, hot, target, skipped)
    if StepName.REWRITE_POSITION_DELETE_FILES in policy.steps:  # after the hot rewrite that left them dangling
        steps += _hot_delete_files_step(h, spec, {p for s in steps for p in s.partitions})

    candidates: list[tuple[PartitionHealth, str]] = []
    for p in sorted(h.partitions, key=lambda p: (p.score, -p.data_files)):
        # Cold and holding more files than its data needs (e.g. what minor compaction left while it
        # was hot): one full compaction brings it to ceil(bytes / target) files.
        needs_compact = p.small_files >= policy.min_input_files or (fragmented(p, target) and p.partition not in hot)
        needs_deletes = _needs_deletes(p, policy)
        if not (needs_compact or needs_deletes):
            continue
        label = p.partition or "(unpartitioned)"
        if p.partition in hot:
            age = (now_ms - (p.last_write_ms or now_ms)) / 1000
            skipped.append(f"{label}: hot (written {age:.0f}s ago, quiet time {policy.hot_partition_quiet_seconds:g}s)")
            continue
        why = []
        if p.last_write_ms is not None and now_ms - p.last_write_ms < policy.hot_partition_quiet_seconds * 1000:
            since = commits_since(h.write_times_ms, p.last_write_ms)
            why.append(f"closed (a newer time partition is being written; none here for "
                       f"{(now_ms - p.last_write_ms) / 1000:.0f}s, {since} commit(s))")
        if p.small_files >= policy.min_input_files:
            why.append(f"{p.small_files} small files (≥ {policy.min_input_files})")
        elif needs_compact:
            why.append(f"{p.small_files} small files in a partition that fits in "
                       f"{max(1, math.ceil(p.data_bytes / target))} file(s)")
        if needs_deletes:
            why.append(f"delete ratio {p.delete_ratio:.3f} / {p.delete_files} delete files")
        candidates.append((p, "; ".join(why)))

    decision = None
    if layout_input is not None and StepName.REWRITE_DATA_FILES in policy.steps:
        decision = layout.decide(layout_input.demand, layout_input.clustering, policy, layout_input.table_columns,
                                 hot)
        if decision is not None and not decision.worth_it:
            skipped.append(decision.why())
            decision = None
    sort_columns = policy.sort_columns or (decision.columns if decision else [])

    if StepName.REWRITE_DATA_FILES in policy.steps and candidates:
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
            args: dict[str, Any] = {"strategy": "binpack"}
            if policy.strategy == "sort" and not sort_columns:
                args = {"strategy": "sort"}  # the table's own sort order
            elif policy.strategy == "sort":
                args = {"strategy": "sort", "sort_order": ", ".join(f"{c} ASC NULLS LAST" for c in sort_columns)}
            elif policy.strategy == "zorder" and sort_columns:
                args = {"strategy": "sort", "sort_order": f"zorder({', '.join(sort_columns)})"}
            elif decision is not None:
                args = layout.sort_args(decision.columns)
            if spec:
                args["where"] = " OR ".join(f"({f})" for f in filters)
            reason = "; ".join(f"{p.partition or '(unpartitioned)'}: {why}" for p, why in chosen)
            if decision is not None and not (policy.strategy in ("sort", "zorder") and policy.sort_columns):
                reason += f"; sorted by {', '.join(decision.columns)} ({decision.why()})"
            steps.append(Step(
                t, StepName.REWRITE_DATA_FILES, reason,
                {"partitions": len(chosen), "small_files": files_in, "bytes": bytes_in,
                 "target_file_size_bytes": target},
                f"~{sum(p.data_files for p, _ in chosen)} → ~{files_out} data files in {len(chosen)} cold "
                f"partition(s), {bytes_in:,} bytes rewritten, deletes applied",
                args=args,
                options=_rewrite_options(policy, target, max(2, min([
                    policy.min_input_files, *(p.small_files for p, _ in chosen if p.small_files >= 2)])), bytes_in),
                partitions=[p.partition for p, _ in chosen],
                expected_bytes=bytes_in,
            ))

    if decision is not None:
        steps += _layout_step(t, spec, decision, target, {p.partition for p, _ in candidates}, skipped)

    pos = [(p, w) for p, w in candidates if p.position_delete_files >= 2]
    if StepName.REWRITE_POSITION_DELETE_FILES in policy.steps and pos:
        filters = [f for p, _ in pos if (f := where(spec, p.partition)) is not None] if spec else []
        if not spec or filters:
            n = sum(p.position_delete_files for p, _ in pos)
            steps.append(Step(
                t, StepName.REWRITE_POSITION_DELETE_FILES,
                f"{n} position delete files in {len(pos)} cold partition(s)",
                {"position_delete_files": n},
                f"~{n} → ~{len(pos)} position delete files, dangling deletes dropped",
                args={"where": " OR ".join(f"({f})" for f in filters)} if spec else {},
                options={"rewrite-all": "true", "partial-progress.enabled": "true"},
                partitions=[p.partition for p, _ in pos],
            ))

    after = max(1, math.ceil(h.manifest_bytes / h.manifest_target_bytes))
    fires = StepName.REWRITE_MANIFESTS in policy.steps and h.manifests > policy.manifests_trigger
    if fires and 2 * after > h.manifests:  # already about the target size: nothing to fold
        skipped.append(f"rewrite_manifests: {h.manifests} manifests > trigger {policy.manifests_trigger}, but they "
                       f"hold {h.manifest_bytes:,} bytes: ~{after} at the table's manifest target size")
    elif fires:
        steps.append(Step(
            t, StepName.REWRITE_MANIFESTS, f"{h.manifests} manifests > trigger {policy.manifests_trigger}",
            {"manifests": h.manifests, "manifest_bytes": h.manifest_bytes},
            f"~{h.manifests} → ~{after} manifests (faster planning)",
        ))

    revisit = closes_at(h.partitions, spec, policy, now_ms, h.write_times_ms, hot, compacted_ms or {}, target)
    if revisit is not None:
        skipped.append(f"a closed time partition settles in ~{(revisit - now_ms) / 1000:.0f}s: planned again then")
    return TablePlan(t, h.score, h.tier, priority(h, policy, last_maintained_ms, now_ms, queries), steps, skipped,
                     queries, revisit)


def _rewrite_options(policy: MaintenancePolicy, target: int, min_input_files: int, expected: int,
                     delete_ratio: float | None = None) -> dict[str, str]:
    """``rewrite_data_files`` options shared by minor and full compaction: deletes applied past the
    policy's thresholds (``delete_ratio`` per file: the policy's unless given), no conflict with new
    appends, and above one file group of input, groups
    committed as they finish (about one commit per ``max_file_group_bytes``, at most 10). Below that,
    one commit without partial progress, which measured 0.1 s slower on a 1.1 s rewrite."""
    commits = min(10, max(1, math.ceil(expected / policy.max_file_group_bytes)))
    progress = {"partial-progress.enabled": "true", "partial-progress.max-commits": str(commits)}
    return {
        "min-input-files": str(min_input_files),
        "target-file-size-bytes": str(target),
        **(progress if commits > 1 else {}),
        "max-file-group-size-bytes": str(policy.max_file_group_bytes),
        "delete-file-threshold": str(policy.delete_files),
        "delete-ratio-threshold": str(policy.delete_ratio if delete_ratio is None else delete_ratio),
        "use-starting-sequence-number": "true",
    }


def _needs_deletes(p: PartitionHealth, policy: MaintenancePolicy) -> bool:
    return p.delete_files > 0 and (p.delete_ratio >= policy.delete_ratio or p.delete_files >= policy.delete_files)


def _hot_needs_deletes(p: PartitionHealth, policy: MaintenancePolicy) -> bool:
    """Deletes worth applying while the stream writes: past ``hot_delete_ratio``, or more delete files
    than data files (Spark writes one file-scoped delete file per data file and replaces it on the next
    delete, so up to one per data file is the steady state, not a pile-up)."""
    return p.delete_files > 0 and (p.delete_ratio >= policy.hot_delete_ratio
                                   or p.delete_files >= max(policy.delete_files, p.data_files + 1))


def _hot_steps(h: TableHealth, spec: list[PartitionField], policy: MaintenancePolicy, hot: set[str], target: int,
               skipped: list[str]) -> list[Step]:
    """Minor compaction of hot partitions: one step per merge threshold (usually one).

    A hot partition is merged when a size tier fills, and its deletes are applied when they cross
    ``hot_delete_ratio`` or outnumber its data files (a CDC table being written is hot all the time);
    a data file is rewritten for its deletes only past ``hot_delete_ratio`` (or ``delete_files``)."""
    by_below: dict[int, list[tuple[PartitionHealth, str, int, int, str | None]]] = {}
    for p in h.partitions:
        if p.partition not in hot:
            continue
        m = tier_merge(p.size_hist, target, policy.tier_fanout)
        tiers = m is not None and m.files >= 2
        deletes = _hot_needs_deletes(p, policy)
        if not tiers and not deletes:
            continue
        label = p.partition or "(unpartitioned)"
        f = where(spec, p.partition) if spec else None
        if spec and f is None:
            skipped.append(f"{label}: cannot be selected safely by a filter; left alone")
            continue
        why = []
        if tiers and m is not None:
            why.append(f"size tier {m.tier} holds {m.tier_files} files (≥ fanout {policy.tier_fanout})")
        if deletes:
            why.append(f"delete ratio {p.delete_ratio:.3f} / {p.delete_files} delete files")
        below = m.below_bytes if tiers and m is not None else 0  # 0: only files with deletes are rewritten
        files = m.files if tiers and m is not None else p.data_files
        approx = m.approx_bytes if tiers and m is not None else p.data_bytes
        by_below.setdefault(below, []).append((p, f"{label}: hot, " + "; ".join(why), files, approx, f))
    steps = []
    for below, chosen in sorted(by_below.items()):
        chosen = chosen[:MAX_PARTITIONS_PER_STEP]
        files = sum(c[2] for c in chosen)
        approx = sum(c[3] for c in chosen)
        args: dict[str, Any] = {"strategy": "binpack"}
        if spec:
            args["where"] = " OR ".join(f"({c[4]})" for c in chosen)
        merged = f"data files below {below:,} bytes merged" if below else "data files with deletes rewritten"
        steps.append(Step(
            h.table, StepName.REWRITE_HOT_FILES, "; ".join(c[1] for c in chosen),
            {"partitions": len(chosen), "files": files, "below_bytes": below, "approx_bytes": approx,
             "fanout": policy.tier_fanout},
            f"~{files} {merged} in {len(chosen)} hot partition(s), deletes applied; the stream keeps writing",
            args=args,
            options={**_rewrite_options(policy, target, 2, approx, policy.hot_delete_ratio),
                     "min-file-size-bytes": str(below)},
            partitions=[c[0].partition for c in chosen],
            expected_bytes=approx,
        ))
    return steps


def _hot_delete_files_step(h: TableHealth, spec: list[PartitionField], rewritten: set[str]) -> list[Step]:
    """After a hot rewrite, drop the position deletes of the data files it replaced: a rewrite with the
    starting sequence number leaves them in place (none dangles by sequence number), and readers keep
    opening them. Reads and writes delete files only."""
    parts = [p for p in h.partitions if p.partition in rewritten and p.position_delete_files >= 1]
    # every partition in ``rewritten`` was selected by a safe filter already (_hot_steps skips the rest)
    filters = [(p, where(spec, p.partition) if spec else None) for p in parts[:MAX_PARTITIONS_PER_STEP]]
    if not filters:
        return []
    n = sum(p.position_delete_files for p, _ in filters)
    return [Step(
        h.table, StepName.REWRITE_POSITION_DELETE_FILES,
        f"{n} position delete files in {len(filters)} hot partition(s) rewritten above",
        {"position_delete_files": n, "partitions": len(filters)},
        f"≤ {n} position delete files: those of the data files replaced above dropped; the stream keeps writing",
        args={"where": " OR ".join(f"({f})" for _, f in filters)} if spec else {},
        options={"rewrite-all": "true", "partial-progress.enabled": "true"},
        partitions=[p.partition for p, _ in filters],
        hot=True,
    )]


def _layout_step(t: str, spec: list[PartitionField], d: layout.Decision, target: int, compacting: set[str],
                 skipped: list[str]) -> list[Step]:
    """Sort the decision's partitions that the compaction step above does not already rewrite."""
    parts = [p for p in d.partitions if p.partition not in compacting][:MAX_PARTITIONS_PER_STEP]
    if not parts:
        return []
    args: dict[str, Any] = layout.sort_args(d.columns)
    if spec:
        filters = []
        for p in parts:
            f = where(spec, p.partition)
            if f is None:
                skipped.append(f"{p.partition}: cannot be selected safely by a filter; left alone")
            else:
                filters.append(f)
        if not filters:
            return []
        args["where"] = " OR ".join(f"({f})" for f in filters)
    return [Step(
        t, StepName.REWRITE_DATA_FILES, d.why(), layout.figures(d),
        f"~{sum(p.files for p in parts)} files in {len(parts)} cold partition(s) rewritten sorted by "
        f"{', '.join(d.columns)}; a filter on {d.columns[0]} reads ~1 file per partition instead of ~{d.depth:.1f}",
        args=args,
        options={"rewrite-all": "true", "target-file-size-bytes": str(target), "partial-progress.enabled": "true",
                 "use-starting-sequence-number": "true"},
        partitions=[p.partition for p in parts],
        expected_bytes=sum(p.bytes for p in parts),
    )]


def order(plans: list[TablePlan]) -> list[TablePlan]:
    """Highest priority first; ties by table name."""
    return sorted(plans, key=lambda p: (-p.priority, p.table))
