"""Which partitions are being written (hot), and the size-tier rule that compacts them.

A partition is hot while it was written within ``hot_partition_quiet_seconds``, unless it is a
*closed* time partition: its time field (the spec's first ``years``/``months``/``days``/``hours``
field) is older than the newest one written in the same table, and it has not been written for
``closed_partition_settle_seconds`` (or ``closed_partition_settle_commits`` writes to the table,
not compactions, have landed since its last write) and holds at least ``min_input_files`` small
files, or, the first time it closes (no full compaction of it in the action log's last day), at
least two small files in more files than its bytes need. The stream has moved on to a newer hour
or day; only late records still arrive there, so it is compacted fully (one file per target size)
straight away instead of after the quiet time. Late records after that compaction make it hot
again until ``min_input_files`` small files have gathered, so a trickle of late data costs one
rewrite per that many files, not one per file; a partition whose hot merges left fewer small
files than that closes all the same. A record from far in the future only makes partitions
without a write for the settle time count as closed: an earlier compaction, no more.

Hot partitions get tiered minor compaction: data files fall in size tiers a factor ``tier_fanout``
apart, below half the target size; once a tier holds ``tier_fanout`` files, that tier and every
smaller file are merged (binpack). A merged file lands at least one tier up, so each byte is
rewritten at most once per tier while hot.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from datetime import datetime

from icetide.config.policy import MaintenancePolicy
from icetide.health.model import PartitionHealth
from icetide.maintenance.partitions import PartitionField, time_start


def hot_partitions(partitions: list[PartitionHealth], spec: list[PartitionField], policy: MaintenancePolicy,
                   now_ms: int, commit_times_ms: list[int] | None = None,
                   compacted_ms: dict[str, int] | None = None, target_bytes: int | None = None) -> set[str]:
    """The partitions (as their JSON text) that only minor compaction may touch now.

    ``commit_times_ms``: the table's snapshot times, for ``closed_partition_settle_commits``.
    ``compacted_ms``: partition → when icetide last compacted it fully (its action log); with
    ``target_bytes``, a partition closing for the first time needs only two small files."""
    quiet = policy.hot_partition_quiet_seconds * 1000
    recent = [p for p in partitions if p.last_write_ms is not None and now_ms - p.last_write_ms < quiet]
    if not recent:
        return set()
    behind = behind_newest(partitions, spec)
    return {p.partition for p in recent
            if not (p.partition in behind
                    and settled(p.last_write_ms or now_ms, policy, now_ms, commit_times_ms or [])
                    and enough_to_close(p, policy, compacted_ms or {}, target_bytes))}


def behind_newest(partitions: list[PartitionHealth], spec: list[PartitionField]) -> set[str]:
    """Partitions whose time field is older than the newest one in the table: the ones that can close."""
    starts: dict[str, datetime | None] = {p.partition: time_start(spec, p.partition) for p in partitions}
    newest = max((s for s in starts.values() if s is not None), default=None)
    return {k for k, s in starts.items() if newest is not None and s is not None and s < newest}


def enough_to_close(p: PartitionHealth, policy: MaintenancePolicy, compacted_ms: dict[str, int],
                    target_bytes: int | None) -> bool:
    """A settled closed partition is compacted now: ``min_input_files`` small files, or its first close
    with two or more small files in more files than ``ceil(bytes / target)``."""
    if p.small_files >= policy.min_input_files:
        return True
    return target_bytes is not None and first_close(p, compacted_ms) and fragmented(p, target_bytes)


def first_close(p: PartitionHealth, compacted_ms: dict[str, int]) -> bool:
    """No full compaction of the partition in the action log's last day: it has not closed before
    (a late re-open has one; one closed more than a day ago counts as new, at worst one early rewrite)."""
    return p.partition not in compacted_ms


def fragmented(p: PartitionHealth, target_bytes: int) -> bool:
    """Two or more small files, and more files than its bytes need at the target size."""
    return p.small_files >= 2 and p.data_files > max(1, math.ceil(p.data_bytes / target_bytes))


def closes_at(partitions: list[PartitionHealth], spec: list[PartitionField], policy: MaintenancePolicy,
              now_ms: int, commit_times_ms: list[int], hot: set[str], compacted_ms: dict[str, int],
              target_bytes: int) -> int | None:
    """When the first hot partition that will close as it settles is expected to (epoch ms), or None.

    Such a partition is older than the newest time partition and has enough files to close, but had a
    write too recently. It settles ``closed_partition_settle_seconds`` after its last write, or after
    ``closed_partition_settle_commits`` more commits, estimated from the median gap of the table's
    last commits; whichever comes first. The maintenance loop looks again then instead of a whole
    interval later."""
    behind = behind_newest(partitions, spec)
    if not behind:
        return None
    seconds, commits = policy.closed_partition_settle_seconds, policy.closed_partition_settle_commits
    times = sorted(commit_times_ms)[-9:]
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    gap = gaps[len(gaps) // 2] if gaps else None
    due: list[int] = []
    for p in partitions:
        if (p.partition not in hot or p.partition not in behind or p.last_write_ms is None
                or not enough_to_close(p, policy, compacted_ms, target_bytes)):
            continue
        if seconds is not None:
            due.append(p.last_write_ms + int(seconds * 1000))
        if commits is not None and gap is not None and times:
            needed = commits - commits_since(commit_times_ms, p.last_write_ms)
            due.append(max(times[-1], p.last_write_ms) + max(1, needed) * gap)
    return max(now_ms, min(due)) if due else None


def settled(last_write_ms: int, policy: MaintenancePolicy, now_ms: int, commit_times_ms: list[int]) -> bool:
    """No write for the settle time, or the settle count of commits since the last one."""
    seconds, commits = policy.closed_partition_settle_seconds, policy.closed_partition_settle_commits
    return ((seconds is not None and now_ms - last_write_ms >= seconds * 1000)
            or (commits is not None and commits_since(commit_times_ms, last_write_ms) >= commits))


def commits_since(commit_times_ms: list[int], last_write_ms: int) -> int:
    """Commits to the table after a partition's last write."""
    return sum(1 for t in commit_times_ms if t > last_write_ms)


@dataclass(frozen=True)
class TierMerge:
    """A minor compaction of one partition: every data file below ``below_bytes`` is merged."""
    tier: int  # 1 = the tier just below half the target size; higher = smaller files
    tier_files: int  # files in the tier that fired
    files: int  # files selected (that tier and every smaller one)
    below_bytes: int  # Iceberg's min-file-size-bytes for the rewrite
    approx_bytes: int  # selected bytes, estimated from the size buckets


def tier_of(bucket: int, target_bytes: int, fanout: int) -> int:
    """Tier of a file in size bucket ``bucket`` (2**bucket <= size < 2**(bucket+1)); 0 = not merged."""
    top = int(math.log2(target_bytes)) - 1  # files >= 2**top (half the target, or more) are left alone
    bits = int(math.log2(fanout))
    return 0 if bucket >= top else 1 + (top - 1 - bucket) // bits


def tier_merge(size_hist: dict[int, int], target_bytes: int, fanout: int) -> TierMerge | None:
    """The minor compaction a hot partition needs now, or None while no tier holds ``fanout`` files."""
    tiers: dict[int, int] = {}
    for b, n in size_hist.items():
        t = tier_of(b, target_bytes, fanout)
        if t:
            tiers[t] = tiers.get(t, 0) + n
    firing = sorted(t for t, n in tiers.items() if n >= fanout)
    if not firing:
        return None
    t = firing[0]  # the tier of the largest files that fills; smaller tiers ride along
    top, bits = int(math.log2(target_bytes)) - 1, int(math.log2(fanout))
    below = 2 ** (top - (t - 1) * bits)
    files = sum(n for u, n in tiers.items() if u >= t)
    approx = sum(int(n * 1.5 * 2**b) for b, n in size_hist.items() if 2**b < below)
    return TierMerge(t, tiers[t], files, below, approx)
