"""`icetide report`: one self-contained HTML page with plots over time from the health history.

Plots are matplotlib SVGs inlined in the page (no network, no JavaScript), so the file can be
mailed, archived or served as is.
"""

from __future__ import annotations

import html
import io
from datetime import datetime
from typing import TYPE_CHECKING, Any

from icetide.identifiers import validate_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PLOTS: list[tuple[str, str, str]] = [
    ("data_files", "Data files", "files"),
    ("avg_file_bytes", "Average data file size", "MiB"),
    ("commits_last_hour", "Commits in the last hour", "commits/h"),
    ("delete_ratio", "Delete ratio (deleted rows / data rows)", "ratio"),
    ("freshness_ms", "Freshness (newest Kafka timestamp → commit)", "s"),
    ("commit_latency_ms", "Commit latency (commit − batch planned)", "s"),
    ("score", "Health score", "0-100"),
]
_SCALE = {"avg_file_bytes": 1 / (1024 * 1024), "commit_latency_ms": 1 / 1000, "freshness_ms": 1 / 1000}


def history_rows(spark: SparkSession, catalog: str, history_table: str, since_hours: float) -> list[Any]:
    ns, name = validate_table(history_table, "health.history_table")
    return spark.sql(
        f"SELECT collected_at, table_name, score, tier, data_files, avg_file_bytes, commits_last_hour, "
        f"delete_ratio, commit_latency_ms, freshness_ms, small_files, snapshots, manifests, reasons "
        f"FROM {catalog}.{ns}.{name} WHERE level = 'table' "
        f"AND collected_at >= current_timestamp() - make_dt_interval(0, 0, 0, {float(since_hours) * 3600}) "
        f"ORDER BY collected_at"
    ).collect()


def maintenance_rows(spark: SparkSession, catalog: str, log_table: str, since_hours: float) -> list[Any]:
    """Recent maintenance actions (empty if none were recorded yet)."""
    from icetide.lake.tables import table_exists

    ns, name = validate_table(log_table, "maintenance.log_table")
    fq = f"{catalog}.{ns}.{name}"
    if not table_exists(spark, fq):
        return []
    return spark.sql(
        f"SELECT started_at, table_name, step, outcome, files_in, files_out, seconds, reason FROM {fq} "
        f"WHERE started_at >= current_timestamp() - make_dt_interval(0, 0, 0, {float(since_hours) * 3600}) "
        f"ORDER BY started_at DESC LIMIT 200"
    ).collect()


def _svg(series: dict[str, list[tuple[datetime, float]]], title: str, unit: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 2.8))
    for table, points in sorted(series.items()):
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.4, label=table)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M"))
    ax.grid(alpha=0.3)
    if len(series) <= 8:
        ax.legend(fontsize=7, loc="best")
    fig.autofmt_xdate()
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def render(rows: list[Any], actions: list[Any] | None = None, generated_at: datetime | None = None) -> str:
    generated_at = generated_at or datetime.now()
    latest: dict[str, Any] = {}
    for r in rows:
        latest[r["table_name"]] = r
    plots = []
    for key, title, unit in PLOTS:
        series: dict[str, list[tuple[datetime, float]]] = {}
        for r in rows:
            if r[key] is not None:
                series.setdefault(r["table_name"], []).append((r["collected_at"], float(r[key]) * _SCALE.get(key, 1)))
        if series:
            plots.append(f'<figure class="plot" data-metric="{key}">{_svg(series, title, unit)}</figure>')
    table_rows = "".join(
        f"<tr class='{html.escape(r['tier'])}'><td>{html.escape(t)}</td><td>{html.escape(r['tier'])}</td>"
        f"<td>{r['score']:.0f}</td><td>{r['data_files']}</td><td>{r['small_files']}</td>"
        f"<td>{(r['avg_file_bytes'] or 0) / 1048576:.2f} MiB</td><td>{r['delete_ratio']:.3f}</td>"
        f"<td>{r['snapshots']}</td><td>{r['manifests']}</td></tr>"
        for t, r in sorted(latest.items(), key=lambda kv: kv[1]["score"])
    )
    action_rows = "".join(
        f"<tr class='{html.escape(a['outcome'])}'><td>{a['started_at']:%Y-%m-%d %H:%M:%S}</td>"
        f"<td>{html.escape(a['table_name'])}</td><td>{html.escape(a['step'])}</td>"
        f"<td>{html.escape(a['outcome'])}</td><td>{a['files_in'] if a['files_in'] is not None else ''} → "
        f"{a['files_out'] if a['files_out'] is not None else ''}</td><td>{a['seconds']:.1f}</td>"
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
.plots {{ display: flex; flex-wrap: wrap; gap: 1em; }} figure.plot {{ margin: 0; }}
</style></head><body>
<h1>icetide health report</h1>
<p>Generated {generated_at:%Y-%m-%d %H:%M:%S}; {len(rows)} collections of {len(latest)} tables.</p>
<h2>Now (worst first)</h2>
<table><tr><th>table</th><th>tier</th><th>score</th><th>data files</th><th>small</th><th>avg size</th>
<th>delete ratio</th><th>snapshots</th><th>manifests</th></tr>{table_rows}</table>
<h2>Over time</h2><div class="plots">{"".join(plots)}</div>
<h2>Maintenance actions</h2>
{maintenance}
</body></html>
"""
