"""Terminal renderings shared by the CLI and the demo: health tables, plans, maintenance actions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from icetide.app.output import console

if TYPE_CHECKING:
    from icetide.health.model import TableHealth
    from icetide.maintenance.executor import ActionRecord
    from icetide.maintenance.planner import TablePlan

TIER_STYLE = {"healthy": "green", "warning": "yellow", "critical": "bold red"}


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def health_table(healths: Sequence[TableHealth], title: str = "icetide status (worst first)") -> None:
    """One row per table, worst first, then the reasons of every table that is not healthy."""
    tbl = Table("table", "tier", "score", "files", "small", "avg size", "max/partition", "deletes",
                "snapshots", "manifests", "commits/h", title=title)
    for h in healths:
        tbl.add_row(h.table, f"[{TIER_STYLE[h.tier]}]{h.tier}[/]", f"{h.score:.1f}", str(h.data_files),
                    str(h.small_files), human_bytes(h.avg_file_bytes), str(h.max_partition_files),
                    f"{h.delete_files} ({h.delete_ratio:.1%})", str(h.snapshots), str(h.manifests),
                    str(h.commits_last_hour))
    console.print(tbl)
    for h in healths:
        if h.tier != "healthy":
            console.print(f"[{TIER_STYLE[h.tier]}]{h.table}[/]: " + "; ".join(h.reasons))


def print_plans(plans: Sequence[TablePlan]) -> None:
    """Each table's plan in priority order: steps with reason, figures and expected gain; what was left alone."""
    if not plans:
        console.print("no tables")
    for i, p in enumerate(plans, 1):
        queried = f", {p.queries} queries in the telemetry window" if p.queries else ""
        console.print(f"[bold]{i}. {p.table}[/]  priority {p.priority:g}  ({p.tier}, score {p.score:.1f}{queried})")
        if not p.steps:
            console.print("   nothing to do")
        for s in p.steps:
            console.print(f"   [cyan]{s.action}[/]: {s.reason}")
            console.print(f"      figures: {json.dumps(s.figures)}")
            console.print(f"      expected: {s.expected}")
            if s.args.get("where"):
                console.print(f"      where: {s.args['where']}")
        for skip in p.skipped:
            console.print(f"   [yellow]left alone[/]: {skip}")


def print_actions(records: Sequence[ActionRecord], title: str = "actions") -> None:
    tbl = Table("table", "step", "outcome", "files in → out", "bytes in", "s", "attempts", title=title)
    for r in records:
        tbl.add_row(r.table, r.step, r.outcome, f"{r.files_in} → {r.files_out}", str(r.bytes_in or ""),
                    f"{r.seconds:.1f}", str(r.attempts))
    console.print(tbl)
