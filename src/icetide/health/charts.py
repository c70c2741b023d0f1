"""Interactive charts (Vega-Lite specs) shared by the HTML report and the live dashboard.

Specs are plain dicts built from health figures; the page renders them with Vega-Embed, whose
JavaScript comes from the ``vl-convert-python`` wheel (:func:`vega_bundle`), so pages work offline and
the report stays one self-contained file. Every chart zooms and pans (drag, wheel) and shows values
on hover.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from icetide import paths

#: (figure, title, unit, scale applied to the stored value): the series over time
SERIES: list[tuple[str, str, str, float]] = [
    ("data_files", "Data files", "files", 1.0),
    ("avg_file_bytes", "Average data file size", "MiB", 1 / (1024 * 1024)),
    ("commits_last_hour", "Commits in the last hour", "commits/h", 1.0),
    ("delete_ratio", "Delete ratio (deleted rows / data rows)", "ratio", 1.0),
    ("freshness_ms", "Freshness (age of the newest record in the table)", "s", 1 / 1000),
    ("commit_latency_ms", "Commit latency (commit − batch planned)", "s", 1 / 1000),
    ("kafka_lag", "Kafka lag", "records", 1.0),
    ("score", "Health score", "0-100", 1.0),
]
_SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"


def short_name(table: str) -> str:
    """``namespace.table`` of ``catalog.namespace.table`` (the catalog is the same for every table shown)."""
    return ".".join(table.split(".")[-2:])


def series_points(rows: Iterable[Mapping[str, Any]], figure: str, scale: float) -> list[dict[str, Any]]:
    """Points of one figure over time from history rows or live summaries (``collected_at`` or ``_ms``)."""
    out = []
    for r in rows:
        value = r.get(figure)
        if value is None:
            continue
        at = r.get("collected_at")
        ms = int(at.timestamp() * 1000) if isinstance(at, datetime) else r.get("collected_at_ms")
        out.append({"t": ms, "table": short_name(str(r["table_name"] if "table_name" in r else r["table"])),
                    "value": round(float(value) * scale, 6)})
    return out


def table_domain(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every table of ``rows`` in a fixed order: given to every chart, a table keeps one colour in all."""
    return sorted({short_name(str(r["table_name"] if "table_name" in r else r["table"])) for r in rows})


#: Time axes: month, day and time, readable at any zoom
TIME_FORMAT = "%b %d %H:%M"


def timeseries(points: list[dict[str, Any]], title: str, unit: str,
               tables: list[str] | None = None) -> dict[str, Any]:
    """Lines per table over time; drag or scroll to zoom, hover for values. ``tables``: the colour
    domain shared by every chart (:func:`table_domain`). A table with one or two points shows them as
    dots large enough to see (a line needs more)."""
    per_table: dict[str, int] = {}
    for p in points:
        per_table[p["table"]] = per_table.get(p["table"], 0) + 1
    few = min(per_table.values(), default=0) <= 2
    color: dict[str, Any] = {"field": "table", "type": "nominal", "legend": {"orient": "bottom", "title": None}}
    if tables:
        color["scale"] = {"domain": tables}
    return {
        "$schema": _SCHEMA, "title": title, "width": "container", "height": 180,
        "data": {"values": points},
        "mark": {"type": "line", "point": {"size": 80 if few else 18, "filled": True}, "tooltip": True},
        "params": [{"name": "zoom", "select": "interval", "bind": "scales"}],
        "encoding": {
            "x": {"field": "t", "type": "temporal", "title": None,
                  "axis": {"labelOverlap": True, "format": TIME_FORMAT, "labelAngle": 0}},
            "y": {"field": "value", "type": "quantitative", "title": unit},
            "color": color,
            "tooltip": [{"field": "table"}, {"field": "t", "type": "temporal", "format": "%Y-%m-%d %H:%M:%S"},
                        {"field": "value", "type": "quantitative", "title": unit}],
        },
    }


#: Health score colours on a fixed scale: 0 red (critical), 50 yellow, 100 green (healthy)
SCORE_COLOURS = {"domain": [0, 50, 100], "range": ["#c0392b", "#f1c40f", "#1e8449"]}


def heatmap(partitions: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell per (table, partition), coloured by its health score on a fixed scale (green healthy,
    red critical, whatever the other cells: a healthy partition is never the reddest cell); hot
    (being written) partitions outlined."""
    return {
        "$schema": _SCHEMA,
        "title": "Partitions by health score (green healthy, red critical; outlined: being written)",
        "width": "container", "height": {"step": 22}, "autosize": {"type": "fit-x", "contains": "padding"},
        "data": {"values": partitions},
        "mark": {"type": "rect", "tooltip": True, "strokeWidth": 2},
        "encoding": {
            "x": {"field": "partition", "type": "ordinal", "title": None, "sort": "ascending",
                  "axis": {"labelAngle": -40, "labelLimit": 120, "labelOverlap": True}},
            "y": {"field": "table", "type": "nominal", "title": None},
            "color": {"field": "score", "type": "quantitative", "title": "score",
                      "scale": {**SCORE_COLOURS, "clamp": True}},
            "stroke": {"condition": {"test": "datum.hot", "value": "#1f5fbf"}, "value": None},
            "tooltip": [{"field": "table"}, {"field": "partition"}, {"field": "score"}, {"field": "data_files"},
                        {"field": "small_files"}, {"field": "avg_mib", "title": "avg MiB"},
                        {"field": "delete_ratio", "format": ".1%"}, {"field": "hot"}],
        },
    }


def partition_cells(healths: Iterable[Any]) -> list[dict[str, Any]]:
    """Heatmap cells of :class:`~icetide.health.model.TableHealth` objects."""
    return [{"table": short_name(h.table), "partition": partition_label(p.partition), "data_files": p.data_files,
             "small_files": p.small_files, "avg_mib": round(p.avg_file_bytes / 1048576, 2),
             "delete_ratio": round(p.delete_ratio, 4), "score": round(p.score, 1), "hot": p.hot}
            for h in healths for p in h.partitions]


def partition_label(partition: str) -> str:
    """``{"event_time_day":"2026-11-27"}`` → ``2026-11-27``; several fields joined by ``/``."""
    if not partition:
        return "(unpartitioned)"
    try:
        values = json.loads(partition)
    except ValueError:
        return partition
    return "/".join(str(v) for v in values.values()) if isinstance(values, dict) and values else partition


@lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed as one script defining ``window.vegaEmbed`` (cached on disk)."""
    from importlib.metadata import version

    import vl_convert as vlc

    cache = paths.home() / "cache" / f"vega-embed-{version('vl-convert-python')}.js"
    if cache.exists():
        return cache.read_text()
    text = vlc.javascript_bundle("window.vegaEmbed = vegaEmbed;")
    _write(cache, text)
    return text


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    except OSError:
        pass  # a read-only home only costs the bundling time next run
