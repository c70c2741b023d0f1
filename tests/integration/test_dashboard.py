"""The dashboard and the HTML report in a real headless browser (Debian's Chromium, driven by
Playwright): charts render, the demo-like tables show, and the dashboard updates after a new batch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.config import load_config
from icetide.health.charts import SERIES
from icetide.health.report import build
from icetide.health.watch import collect_all
from tests.fixtures.stack import free_port_pair, pipeline_dict, unique


def _rgb(fill: str) -> tuple[int, int, int]:
    """An SVG fill (``#1e8449`` or ``rgb(30, 132, 73)``) as (r, g, b)."""
    if fill.startswith("#") and len(fill) == 7:
        return int(fill[1:3], 16), int(fill[3:5], 16), int(fill[5:7], 16)
    r, g, b = (int(float(x)) for x in fill[fill.index("(") + 1:fill.index(")")].split(",")[:3])
    return r, g, b


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Chromium is required for this test: apt-get install chromium (scripts/test.sh does)"
    return path


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def watched(spark, kafka, lake, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Two tables in a fresh namespace, three recorded health collections; (config path, tables)."""
    ns = unique("ui")
    tables = [f"{ns}.events", f"{ns}.flat"]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS icetide.{ns}")
    spark.sql(f"CREATE TABLE icetide.{tables[0]} (id BIGINT, p STRING) USING iceberg PARTITIONED BY (p)")
    spark.sql(f"CREATE TABLE icetide.{tables[1]} (id BIGINT) USING iceberg")
    path = tmp_path / "ui.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict(kafka, lake, tmp_path, "unused", tables[0],
                                                 health={"namespaces": [ns], "history_table": f"{ns}.health"})))
    cfg = load_config(path)
    for i in range(3):  # three collections with the tables growing in between
        spark.sql(f"INSERT INTO icetide.{tables[0]} VALUES ({i}, 'a'), ({i + 10}, 'b')")
        spark.sql(f"INSERT INTO icetide.{tables[1]} VALUES ({i})")
        collect_all(spark, cfg, tables, record=True)
    return path, tables


def test_report_renders_interactive_charts(spark, watched, browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, tables = watched
    report = build(spark, load_config(path), 24)
    assert report.collections == 3
    page = tmp_path / "report.html"
    page.write_text(report.html)
    assert "<script src=" not in report.html and "http" not in report.html.split("<script>")[0]  # self-contained
    tab = browser.new_page(viewport={"width": 1400, "height": 1800})
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.goto(page.as_uri())
    tab.wait_for_selector("figure.plot svg", timeout=30_000)
    tab.wait_for_timeout(500)
    drawn = tab.eval_on_selector_all("figure.plot", "fs => fs.filter(f => f.querySelector('svg'))"
                                     ".map(f => f.dataset.metric)")
    # no icetide commits here: no freshness, commit latency or Kafka lag series
    assert drawn == ["partitions", *[k for k, *_ in SERIES if k not in ("commit_latency_ms", "freshness_ms",
                                                                         "kafka_lag")]], drawn
    assert not errors, errors
    assert "No maintenance actions recorded in this window." in tab.content()
    assert tables[0] in tab.inner_text("table")


def test_dashboard_shows_tables_and_updates_after_a_batch(spark, watched, browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, tables = watched
    port = free_port_pair()
    log = (tmp_path / "ui.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "icetide.cli.main", "ui", "-c", str(path), "--port", str(port),
                             "--interval", "1", "--for", "300"], stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "ui.log").read_text()
                time.sleep(0.5)
        tab = browser.new_page(viewport={"width": 1400, "height": 2000})
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(url)
        row = f'#tables tbody tr[data-table="{tables[0]}"]'
        tab.wait_for_selector(row, timeout=30_000)
        shown = tab.eval_on_selector_all("#tables tbody tr", "rs => rs.map(r => r.dataset.table)")
        assert set(shown) >= set(tables), shown
        assert tab.get_attribute(row, "data-files") == "6"
        tab.wait_for_selector("#heatmap svg", timeout=30_000)
        tab.wait_for_selector('#series [data-figure="data_files"] svg', timeout=30_000)

        spark.sql(f"INSERT INTO icetide.{tables[0]} VALUES (100, 'c'), (101, 'a')")  # a new batch
        tab.wait_for_selector(f'{row}[data-files="8"]', timeout=30_000)
        # the heatmap redrew too: partition c of the table, new in that batch, has its cell
        tab.wait_for_selector(f'#heatmap path[aria-label^="partition: c; table: {tables[0]};"]', timeout=30_000)
        # the heatmap's colour is health on a fixed scale: these healthy partitions are green, not "the reddest"
        fill = tab.get_attribute(f'#heatmap path[aria-label^="partition: a; table: {tables[0]};"]', "fill") or ""
        r, g, b = _rgb(fill)
        assert g > r and g > b, fill

        # freshness is the age of the newest record now: with nothing new landing, it grows
        newest = int(time.time() * 1000) - 60_000
        mark = json.dumps({"watermark": {}, "run": "r1", "batch": 0, "committed_at_ms": newest + 1000,
                           "kafka_ts_max": newest})
        spark.sql(f"ALTER TABLE icetide.{tables[0]} SET TBLPROPERTIES ('icetide.watermark.ui-test' = '{mark}')")
        tab.wait_for_function(f"() => Number(document.querySelector('{row}').dataset.freshness) >= 60000",
                              timeout=30_000)
        first = int(tab.get_attribute(row, "data-freshness") or 0)
        tab.wait_for_function(f"() => Number(document.querySelector('{row}').dataset.freshness) >= {first + 2000}",
                              timeout=30_000)
        assert not errors, errors
        if os.environ.get("ICETIDE_SCREENSHOTS"):  # docs/img/dashboard.png, refreshed on request
            tab.wait_for_timeout(1500)
            tab.screenshot(path=os.environ["ICETIDE_SCREENSHOTS"] + "/dashboard.png", full_page=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert proc.returncode == 0, (tmp_path / "ui.log").read_text()[-3000:]
