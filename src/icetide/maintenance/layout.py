"""Layout from query telemetry: sort (or z-order) cold partitions by the columns queries filter on,
when the reads it saves outweigh the rewrite.

The figure that says whether sorting helps is the **clustering depth** of a partition on a column:
the average number of the partition's data files whose ``[lower, upper]`` bounds on the column
overlap a given file's (from the ``files`` metadata table; no data file is opened). A filter on a
column with depth ``d`` reads about ``d`` files where a sorted partition reads about one.

Decision, per table (pure: :func:`decide`): the columns filtered on in at least
``layout_min_scans`` scans of the telemetry window, ranked by the data files those scans still
read; partitions that are cold, hold ≥ 2 files and have depth > ``layout_depth_trigger`` on the
first column are candidates. Expected gain over one window = the bytes the filtering scans read ×
(1 − 1 / depth); cost = the bytes of the candidate partitions. Sort only when gain ≥
``layout_gain_ratio`` × cost; either way the plan says why.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any

from icetide.config.policy import MaintenancePolicy
from icetide.lake.meta import FileBounds, MetaReader
from icetide.maintenance.telemetry import ColumnDemand


@dataclass(frozen=True)
class Clustering:
    """One partition's data files and their clustering depth on a column."""

    partition: str
    files: int
    bytes: int
    depth: float


@dataclass(frozen=True)
class LayoutInput:
    """What the planner needs to decide a table's layout: telemetry demand and partition clustering."""

    demand: list[ColumnDemand]
    clustering: list[Clustering]
    table_columns: list[str]


@dataclass(frozen=True)
class Decision:
    columns: list[str]
    partitions: list[Clustering]
    gain_bytes: int
    cost_bytes: int
    demand: ColumnDemand
    worth_it: bool

    @property
    def depth(self) -> float:
        total = sum(p.bytes for p in self.partitions)
        return sum(p.depth * p.bytes for p in self.partitions) / total if total else 1.0

    def why(self) -> str:
        d = self.demand
        head = (f"layout: {d.scans} scans filtered on {d.column} and still read {d.data_files_read} data files; "
                f"clustering depth {self.depth:.1f} in {len(self.partitions)} cold partition(s)")
        if self.worth_it:
            return (f"{head}: sorting by {', '.join(self.columns)} saves ~{self.gain_bytes:,} bytes read per "
                    f"telemetry window for {self.cost_bytes:,} bytes rewritten")
        return (f"{head}: sorting would save ~{self.gain_bytes:,} bytes read per window but rewrite "
                f"{self.cost_bytes:,}; not worth it yet")


def depth(bounds: list[tuple[Any, Any]]) -> float:
    """Average number of intervals overlapping each interval (itself included); 0 for none."""
    if not bounds:
        return 0.0
    los = sorted(lo for lo, _ in bounds)
    his = sorted(hi for _, hi in bounds)
    total = 0
    for lo, hi in bounds:
        total += bisect.bisect_right(los, hi) - bisect.bisect_left(his, lo)
    return total / len(bounds)


def clustering(reader: MetaReader, table: str, column: str) -> list[Clustering]:
    """Per partition of ``table`` (``namespace.table``): files, bytes and depth on top-level ``column``."""
    by: dict[str, list[FileBounds]] = {}
    for f in reader.file_bounds(table, column):
        by.setdefault(f.partition, []).append(f)
    out = []
    for p, files in sorted(by.items()):
        known = [(f.lower, f.upper) for f in files if f.lower is not None and f.upper is not None]
        out.append(Clustering(p, len(files), sum(f.size for f in files), round(depth(known), 3)))
    return out


def decide(demand: list[ColumnDemand], parts: list[Clustering], policy: MaintenancePolicy,
           table_columns: list[str], hot: set[str]) -> Decision | None:
    """The layout change to make now, one not worth making yet (``worth_it`` False), or None."""
    if policy.sort_columns or not policy.layout_from_telemetry:
        return None  # an explicit sort order wins
    wanted = [d for d in demand if d.scans >= policy.layout_min_scans and d.column in table_columns]
    if not wanted:
        return None
    columns = [d.column for d in wanted[: policy.layout_max_columns]]
    first = wanted[0]
    candidates = [p for p in parts if p.partition not in hot and p.files >= 2
                  and p.depth > policy.layout_depth_trigger]
    if not candidates:
        return None
    cost = sum(p.bytes for p in candidates)
    avg_depth = sum(p.depth * p.bytes for p in candidates) / cost if cost else 1.0
    gain = int(first.bytes_read * (1 - 1 / avg_depth))
    return Decision(columns, candidates, gain, cost, first, gain >= policy.layout_gain_ratio * cost)


def sort_args(columns: list[str]) -> dict[str, str]:
    """Procedure arguments for a sort (one column) or z-order (several) rewrite."""
    if len(columns) == 1:
        return {"strategy": "sort", "sort_order": f"{columns[0]} ASC NULLS LAST"}
    return {"strategy": "sort", "sort_order": f"zorder({', '.join(columns)})"}


def figures(d: Decision) -> dict[str, Any]:
    return {"columns": d.columns, "scans": d.demand.scans, "data_files_read": d.demand.data_files_read,
            "bytes_read": d.demand.bytes_read, "depth": round(d.depth, 2), "partitions": len(d.partitions),
            "gain_bytes": d.gain_bytes, "cost_bytes": d.cost_bytes}


def describe(d: Decision) -> str:
    return json.dumps(figures(d), sort_keys=True)
