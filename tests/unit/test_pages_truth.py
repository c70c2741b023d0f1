"""What the dashboard and report show means what it says: freshness ages, the heatmap's colours are
health on a fixed scale, a table keeps one colour, few points are visible, no history is explained."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from icetide.health import charts
from icetide.health.collector import freshness
from icetide.health.report import NO_HISTORY, render
from icetide.lake.offsets import PROPERTY_PREFIX


def _props(*kafka_ts: int | None) -> dict[str, str]:
    return {f"{PROPERTY_PREFIX}p{i}": json.dumps({"watermark": {}, "run": "r", "batch": 1, "committed_at_ms": 5,
                                                   "kafka_ts_max": ts})
            for i, ts in enumerate(kafka_ts)}


def test_freshness_is_the_age_of_the_newest_record_and_grows_while_nothing_lands() -> None:
    props = _props(1_000_000, 1_060_000, None)  # two pipelines; the newest record is at 1,060,000
    assert freshness(props, 1_070_000) == 10_000
    assert freshness(props, 1_670_000) == 610_000  # ten minutes later, nothing new: ten minutes older
    assert freshness(props, 1_000_000) == 0  # a producer clock ahead of ours is not a negative age
    assert freshness({}, 1_070_000) is None and freshness(_props(None), 1_070_000) is None


def test_heatmap_colours_health_on_a_fixed_scale() -> None:
    spec = charts.heatmap([{"table": "ns.a", "partition": "x", "score": 100.0}])
    color = spec["encoding"]["color"]
    assert color["field"] == "score" and color["scale"]["domain"] == [0, 50, 100] and color["scale"]["clamp"]
    healthy, critical = color["scale"]["range"][-1], color["scale"]["range"][0]
    assert int(healthy[3:5], 16) > int(healthy[1:3], 16)  # the healthy end is green
    assert int(critical[1:3], 16) > int(critical[3:5], 16)  # the critical end is red
    assert "domainMid" not in color["scale"] and "scheme" not in color["scale"]  # not relative to the data shown


def test_every_chart_gives_a_table_the_same_colour_and_few_points_are_visible() -> None:
    rows = [{"table": "cat.ns.b", "collected_at_ms": 1, "data_files": 3, "score": 90},
            {"table": "cat.ns.a", "collected_at_ms": 1, "data_files": 1}]
    domain = charts.table_domain(rows)
    assert domain == ["ns.a", "ns.b"]
    files = charts.timeseries(charts.series_points(rows, "data_files", 1.0), "f", "files", domain)
    score = charts.timeseries(charts.series_points(rows, "score", 1.0), "s", "0-100", domain)
    assert files["encoding"]["color"]["scale"]["domain"] == score["encoding"]["color"]["scale"]["domain"] == domain
    assert files["mark"]["point"]["size"] >= 60  # one point per table: dots, not an invisible line
    many = [{"table": "cat.ns.a", "collected_at_ms": i, "data_files": i} for i in range(5)]
    assert charts.timeseries(charts.series_points(many, "data_files", 1.0), "f", "files")["mark"]["point"]["size"] < 60
    assert files["encoding"]["x"]["axis"]["format"] == charts.TIME_FORMAT


def test_a_report_without_history_says_how_to_record_some() -> None:
    page = render([], [], datetime(2026, 11, 28, tzinfo=UTC))
    assert NO_HISTORY in page and "0 collections of\n0 tables" in page
    row = {"table_name": "cat.ns.a", "tier": "healthy", "score": 100.0, "data_files": 1, "small_files": 0,
           "avg_file_bytes": 1.0, "delete_ratio": 0.0, "snapshots": 1, "manifests": 1,
           "collected_at": datetime(2026, 11, 28, tzinfo=UTC)}
    page = render([row, {**row, "table_name": "cat.ns.b"}, row], [], datetime(2026, 11, 28, tzinfo=UTC))
    assert NO_HISTORY not in page and "2 collections of\n2 tables" in page
