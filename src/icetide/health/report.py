"""`icetide report`: one self-contained HTML page with interactive charts from the health history.

Charts are the dashboard's (:mod:`icetide.health.charts`), rendered by Vega's JavaScript inlined in
the page (no network), so the file can be mailed, archived or served as is.
"""

from __future__ import annotations

import html
import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from icetide.config.models import PipelineConfig
from icetide.health import charts
from icetide.identifiers import validate_table
from icetide.lake.meta import MetaReader
from icetide.lake.readers import as_reader
from icetide.secrets import scrub

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_HISTORY_COLUMNS = ["collected_at", "table_name", "level", "score", "tier", "data_files", "avg_file_bytes",
                    "commits_last_hour", "delete_ratio", "commit_latency_ms", "freshness_ms", "small_files",
                    "snapshots", "manifests", "kafka_lag", "reasons"]
_ACTION_COLUMNS = ["started_at", "table_name", "step", "outcome", "files_in", "files_out", "seconds", "reason"]


def history_rows(source: MetaReader | SparkSession, cfg: PipelineConfig, since_hours: float) -> list[dict[str, Any]]:
    """Table-level health collections of the window, oldest first (empty before the first one)."""
    reader = as_reader(cfg, source)
    table = ".".join(validate_table(cfg.health.history_table, "health.history_table"))
    if not reader.exists(table):
        return []
    rows = [r for r in reader.rows(table, _HISTORY_COLUMNS, ("collected_at", _since(since_hours)))
            if r["level"] == "table"]
    return sorted(rows, key=lambda r: r["collected_at"])


def maintenance_rows(source: MetaReader | SparkSession, cfg: PipelineConfig,
                     since_hours: float, limit: int = 200) -> list[dict[str, Any]]:
    """The window's maintenance actions, newest first (empty if none were recorded yet)."""
    reader = as_reader(cfg, source)
    table = ".".join(validate_table(cfg.maintenance.log_table, "maintenance.log_table"))
    if not reader.exists(table):
        return []
    rows = reader.rows(table, _ACTION_COLUMNS, ("started_at", _since(since_hours)))
    return sorted(rows, key=lambda r: r["started_at"], reverse=True)[:limit]


def _since(hours: float) -> int:
    return int((time.time() - float(hours) * 3600) * 1000)


@dataclass
class Report:
    html: str
    collections: int  # health collections recorded in the window (of the table seen most)


def build(source: MetaReader | SparkSession, cfg: PipelineConfig, hours: float) -> Report:
    """The report of the last ``hours``: history, current partitions (heatmap) and maintenance actions."""
    from icetide.health.watch import collect_all

    reader = as_reader(cfg, source)
    rows = history_rows(reader, cfg, hours)
    now = collect_all(reader, cfg, alert=False)
    page = render(rows, maintenance_rows(reader, cfg, hours), partitions=charts.partition_cells(now))
    return Report(scrub(page), max(Counter(r["table_name"] for r in rows).values(), default=0))


def figures(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(figure, Vega-Lite spec) of every series with at least one point."""
    out = []
    for key, title, unit, scale in charts.SERIES:
        points = charts.series_points(rows, key, scale)
        if points:
            out.append((key, charts.timeseries(points, title, unit, charts.table_domain(rows))))
    return out


def render(rows: list[dict[str, Any]], actions: list[dict[str, Any]] | None = None,
           generated_at: datetime | None = None, partitions: list[dict[str, Any]] | None = None) -> str:
    """One self-contained page (Vega's JavaScript inlined; no network needed to open it)."""
    generated_at = generated_at or datetime.now(UTC)
    latest: dict[str, Any] = {}
    for r in rows:
        latest[r["table_name"]] = r
    specs = figures(rows)
    collections = max(Counter(r["table_name"] for r in rows).values(), default=0)
    if partitions:
        specs.insert(0, ("partitions", charts.heatmap(partitions)))
    plots = "".join(f'<figure class="plot" data-metric="{key}"><div id="chart-{key}"></div></figure>'
                    for key, _ in specs)
    embed = "".join(f"vegaEmbed('#chart-{key}', {_json(spec)}, {{actions: false, renderer: 'svg'}});"
                    for key, spec in specs)
    table_rows = "".join(
        f"<tr class='{html.escape(r['tier'])}'><td>{html.escape(charts.short_name(t))}</td>"
        f"<td>{html.escape(r['tier'])}</td><td>{r['score']:.0f}</td><td>{r['data_files']}</td>"
        f"<td>{r['small_files']}</td><td>{(r['avg_file_bytes'] or 0) / 1048576:.2f} MiB</td>"
        f"<td>{r['delete_ratio']:.3f}</td><td>{r['snapshots']}</td><td>{r['manifests']}</td></tr>"
        for t, r in sorted(latest.items(), key=lambda kv: kv[1]["score"])
    )
    action_rows = "".join(
        f"<tr class='{html.escape(a['outcome'])}'><td>{a['started_at']:%Y-%m-%d %H:%M:%S}</td>"
        f"<td>{html.escape(charts.short_name(a['table_name']))}</td><td>{html.escape(a['step'])}</td>"
        f"<td>{html.escape(a['outcome'])}</td><td>{a['files_in'] if a['files_in'] is not None else ''} → "
        f"{a['files_out'] if a['files_out'] is not None else ''}</td><td>{a['seconds'] or 0:.1f}</td>"
        f"<td>{html.escape(a['reason'] or '')[:300]}</td></tr>"
        for a in (actions or [])
    )
    maintenance = (
        "<table class='actions'><tr><th>started</th><th>table</th><th>step</th><th>outcome</th>"
        f"<th>files in → out</th><th>s</th><th>reason</th></tr>{action_rows}</table>"
        if action_rows else "<p>No maintenance actions recorded in this window.</p>"
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>icetide health report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ padding: 4px 10px; border-bottom: 1px solid #ddd; }}
tr.critical td:nth-child(2) {{ color: #b00; font-weight: bold; }} tr.warning td:nth-child(2) {{ color: #b80; }}
tr.healthy td:nth-child(2) {{ color: #080; }}
.plots {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 1em; }}
figure.plot {{ margin: 0; }} figure.plot > div {{ width: 100%; }}
figure.plot[data-metric="partitions"] {{ grid-column: 1 / -1; }}
</style></head><body>
<h1>icetide health report</h1>
<p>Generated {generated_at:%Y-%m-%d %H:%M:%S} UTC; {collections} collection{"" if collections == 1 else "s"} of
{len(latest)} table{"" if len(latest) == 1 else "s"} in this window.
Charts: drag or scroll to zoom, hover for values.</p>
{"" if rows else NO_HISTORY}
<h2>Now (worst first)</h2>
<table><tr><th>table</th><th>tier</th><th>score</th><th>data files</th><th>small</th><th>avg size</th>
<th>delete ratio</th><th>snapshots</th><th>manifests</th></tr>{table_rows}</table>
<h2>Over time</h2><div class="plots">{plots}</div>
<h2>Maintenance actions</h2>
{maintenance}
<script>{charts.vega_bundle()}</script>
<script>{embed}</script>
</body></html>
"""


#: What a report with no history says (the charts over time need recorded collections)
NO_HISTORY = ("<p class='empty'>No health history recorded in this window, so there is nothing to draw over time. "
              "Record some with <code>icetide status --record</code> (once; from cron, say) or "
              "<code>icetide report --collect</code>, then run the report again.</p>")


def _json(spec: dict[str, Any]) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(spec, default=str).replace("</", "<\\/")
