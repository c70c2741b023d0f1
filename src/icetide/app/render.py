"""Terminal renderings shared by the CLI and the demo: health tables, plans, maintenance actions."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table

from icetide.app.output import console
from icetide.health.charts import partition_label, short_name

if TYPE_CHECKING:
    from icetide.health.model import PartitionHealth, TableHealth
    from icetide.maintenance.executor import ActionRecord
    from icetide.maintenance.planner import TablePlan

TIER_STYLE = {"healthy": "green", "warning": "yellow", "critical": "bold red"}


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


#: status columns, most important first: (header, cell, minimum width); narrow terminals drop from the end
STATUS_COLUMNS: list[tuple[str, Callable[[TableHealth], str], int]] = [
    ("tier", lambda h: f"[{TIER_STYLE[h.tier]}]{h.tier}[/]", 8),
    ("score", lambda h: f"{h.score:.0f}", 5),
    ("lag", lambda h: "unreachable" if h.kafka_unreachable else "–" if h.kafka_lag is None else f"{h.kafka_lag:,}",
     11),
    ("files", lambda h: str(h.data_files), 5),
    ("small", lambda h: str(h.small_files), 5),
    ("avg size", lambda h: human_bytes(h.avg_file_bytes), 9),
    ("deletes", lambda h: f"{h.delete_files} ({h.delete_ratio:.0%})", 8),
    ("max/part", lambda h: str(h.max_partition_files), 8),
    ("commits/h", lambda h: str(h.commits_last_hour), 9),
    ("snapshots", lambda h: str(h.snapshots), 9),
    ("manifests", lambda h: str(h.manifests), 9),
]


def fitting(columns: Sequence[tuple[str, Any, int]], first_width: int, width: int) -> list[tuple[str, Any, int]]:
    """The leading columns that fit ``width`` next to a first column of ``first_width`` (3 per border)."""
    used, out = first_width + 4, []
    for col in columns:
        need = max(col[2], len(col[0])) + 3
        if used + need > width:
            break
        used += need
        out.append(col)
    return out


def health_table(healths: Sequence[TableHealth], title: str = "icetide status (worst first)") -> None:
    """One row per table, worst first, then the reasons of every table that is not healthy.

    Names are shown in full (without the catalog); columns that do not fit the terminal are left out,
    least important first, and the caption says how many."""
    if not healths:
        console.print("no tables in the watched namespaces yet (health.namespaces, else the target's; "
                      "-n NAMESPACE for another)")
        return
    names = [short_name(h.table) for h in healths]
    catalog = healths[0].table.split(".")[0]
    first = max([len("table"), *map(len, names)])
    cols = fitting(STATUS_COLUMNS, first, console.width)
    dropped = len(STATUS_COLUMNS) - len(cols)
    caption = f"{len(healths)} table{'' if len(healths) == 1 else 's'} in catalog {catalog}" + (
        f"; {dropped} columns hidden for width (-o json has all)" if dropped else "")
    tbl = Table(title=title, caption=caption)
    tbl.add_column("table", no_wrap=True, min_width=first)
    for header, _, _w in cols:
        tbl.add_column(header, justify="left" if header == "tier" else "right", no_wrap=True, min_width=len(header))
    for h, name in zip(healths, names, strict=True):
        tbl.add_row(name, *[cell(h) for _, cell, _ in cols])
    console.print(tbl)
    for h, name in zip(healths, names, strict=True):
        if h.tier != "healthy":
            console.print(f"[{TIER_STYLE[h.tier]}]{name}[/]: " + "; ".join(h.reasons), soft_wrap=False)


def print_plans(plans: Sequence[TablePlan]) -> None:
    """Each table's plan in priority order: steps with reason, figures and expected gain; what was left alone."""
    if not plans:
        console.print("no tables")
    for i, p in enumerate(plans, 1):
        queried = f", {p.queries} queries in the telemetry window" if p.queries else ""
        console.print(f"[bold]{i}. {short_name(p.table)}[/]  priority {p.priority:g}  "
                      f"({p.tier}, score {p.score:.1f}{queried})")
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


def _counted(files_in: int | None, files_out: int | None) -> str:
    """``in → out`` with unknown counts left blank, as the dashboard and the HTML report show them."""
    return "" if files_in is None and files_out is None else \
        f"{'' if files_in is None else files_in} → {'' if files_out is None else files_out}"


def print_actions(records: Sequence[ActionRecord], title: str = "actions") -> None:
    tbl = Table("table", "step", "outcome", "files in → out", "bytes in", "s", "attempts", title=title)
    for r in records:
        tbl.add_row(short_name(r.table), r.step, r.outcome, _counted(r.files_in, r.files_out), str(r.bytes_in or ""),
                    f"{r.seconds:.1f}", str(r.attempts))
    console.print(tbl)


#: per-partition columns of ``icetide health``, most important first (see :func:`fitting`)
PARTITION_COLUMNS: list[tuple[str, Callable[[PartitionHealth], str], int]] = [
    ("tier", lambda p: f"[{TIER_STYLE[p.tier]}]{p.tier}[/]", 8),
    ("files", lambda p: str(p.data_files), 5),
    ("small", lambda p: str(p.small_files), 5),
    ("avg size", lambda p: human_bytes(p.avg_file_bytes), 9),
    ("hot", lambda p: "hot" if p.hot else "", 3),
    ("deletes", lambda p: f"{p.delete_files} ({p.delete_ratio:.0%})", 8),
    ("rows", lambda p: str(p.records), 8),
    ("score", lambda p: f"{p.score:.0f}", 5),
]


def partition_table(h: TableHealth) -> None:
    """``icetide health``: every partition, worst first, named by its values."""
    parts = sorted(h.partitions, key=lambda p: (p.score, p.partition))
    names = [partition_label(p.partition) for p in parts]
    first = max([len("partition"), *map(len, names)])
    cols = fitting(PARTITION_COLUMNS, first, console.width)
    dropped = len(PARTITION_COLUMNS) - len(cols)
    tbl = Table(caption=f"{len(parts)} partitions" + (f"; {dropped} columns hidden for width (-o json has all)"
                                                      if dropped else ""))
    tbl.add_column("partition", no_wrap=True, min_width=first)
    for header, _, _w in cols:
        tbl.add_column(header, justify="left" if header in ("tier", "hot") else "right", no_wrap=True)
    for p, name in zip(parts, names, strict=True):
        tbl.add_row(name, *[cell(p) for _, cell, _ in cols])
    console.print(tbl)
