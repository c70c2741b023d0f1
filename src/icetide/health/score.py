"""One explainable number per table and per partition (0-100) and a tier.

score = 100 - sum(weight_i * pressure_i), each pressure in [0, 1]:

| figure | table weight | partition weight | pressure |
|---|---|---|---|
| data files in the fullest partition | 40 | 50 | (files - w/5) / (c - w/5), w/c = partition_files_warning/critical |
| small-file ratio | 20 | 25 | small/data files, scaled down below 10 files |
| delete ratio (deleted rows / data rows) | 20 | 25 | ratio / delete_ratio_critical |
| snapshots kept | 10 | - | snapshots / snapshots_critical |
| manifests in the current snapshot | 10 | - | manifests / manifests_critical |

Tier: ``critical`` if any figure reaches its critical threshold or score < 50; ``warning`` if any
reaches its warning threshold, the freshness SLA is missed, or score < 80; else ``healthy``.
Every contribution and every crossed threshold is listed in ``reasons``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from icetide.config.thresholds import HealthThresholds

if TYPE_CHECKING:
    from icetide.health.model import PartitionHealth, TableHealth

TIERS = ("healthy", "warning", "critical")


@dataclass
class Scored:
    score: float = 100.0
    tier: str = "healthy"
    reasons: list[str] = field(default_factory=list)

    def penalise(self, weight: float, pressure: float, why: str) -> None:
        p = min(1.0, max(0.0, pressure))
        if weight * p >= 0.05:  # shown with one decimal: nothing that rounds to -0.0
            self.score -= weight * p
            self.reasons.append(f"-{weight * p:.1f}: {why}")

    def at_least(self, tier: str, why: str) -> None:
        if TIERS.index(tier) > TIERS.index(self.tier):
            self.tier = tier
        self.reasons.append(f"{tier}: {why}")

    def finish(self) -> Scored:
        self.score = round(max(0.0, self.score), 1)
        if self.score < 50:
            self.at_least("critical", f"score {self.score} < 50")
        elif self.score < 80:
            self.at_least("warning", f"score {self.score} < 80")
        return self


def _files_pressure(files: int, th: HealthThresholds) -> float:
    floor = th.partition_files_warning / 5
    return (files - floor) / max(1.0, th.partition_files_critical - floor)


def _small_pressure(small: int, files: int) -> float:
    return (small / files) * min(1.0, files / 10) if files else 0.0


def _threshold(s: Scored, value: float, warning: float, critical: float, what: str) -> None:
    if value >= critical:
        s.at_least("critical", f"{what} = {value:g} (critical at {critical:g})")
    elif value >= warning:
        s.at_least("warning", f"{what} = {value:g} (warning at {warning:g})")


def score_partition(p: PartitionHealth, th: HealthThresholds) -> Scored:
    s = Scored()
    s.penalise(50, _files_pressure(p.data_files, th), f"{p.data_files} data files")
    s.penalise(25, _small_pressure(p.small_files, p.data_files), f"{p.small_files}/{p.data_files} small files")
    s.penalise(25, p.delete_ratio / th.delete_ratio_critical, f"delete ratio {p.delete_ratio:.3f}")
    _threshold(s, p.data_files, th.partition_files_warning, th.partition_files_critical, "data files")
    _threshold(s, p.delete_ratio, th.delete_ratio_warning, th.delete_ratio_critical, "delete ratio")
    return s.finish()


def score_table(t: TableHealth, th: HealthThresholds, now_ms: int) -> Scored:
    s = Scored()
    worst = max(t.partitions, key=lambda p: p.data_files, default=None)
    where = f" in partition {worst.partition or '(unpartitioned)'}" if worst is not None else ""
    s.penalise(40, _files_pressure(t.max_partition_files, th), f"{t.max_partition_files} data files{where}")
    s.penalise(20, _small_pressure(t.small_files, t.data_files), f"{t.small_files}/{t.data_files} small files")
    s.penalise(20, t.delete_ratio / th.delete_ratio_critical, f"delete ratio {t.delete_ratio:.3f}")
    s.penalise(10, t.snapshots / th.snapshots_critical, f"{t.snapshots} snapshots")
    s.penalise(10, t.manifests / th.manifests_critical, f"{t.manifests} manifests")
    _threshold(s, t.max_partition_files, th.partition_files_warning, th.partition_files_critical,
               f"data files{where}")
    _threshold(s, t.delete_ratio, th.delete_ratio_warning, th.delete_ratio_critical, "delete ratio")
    _threshold(s, t.snapshots, th.snapshots_warning, th.snapshots_critical, "snapshots")
    _threshold(s, t.manifests, th.manifests_warning, th.manifests_critical, "manifests")
    if th.freshness_sla_seconds and t.last_commit_ms is not None:
        age = (now_ms - t.last_commit_ms) / 1000
        if age > th.freshness_sla_seconds:
            s.at_least("warning", f"no commit for {age:.0f}s (freshness SLA {th.freshness_sla_seconds:g}s)")
    if th.freshness_sla_seconds and t.freshness_ms is not None and t.freshness_ms / 1000 > th.freshness_sla_seconds:
        s.at_least("warning", f"freshness {t.freshness_ms / 1000:.0f}s (SLA {th.freshness_sla_seconds:g}s)")
    return s.finish()
