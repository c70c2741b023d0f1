"""The HTML report opens in a real headless browser (Debian's Chromium) and its plots render."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml
from PIL import Image

from icetide.config import load_config
from icetide.health.report import PLOTS, history_rows, render
from icetide.health.watch import collect_all
from tests.fixtures.stack import pipeline_dict, unique

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Chromium is required for this test: apt-get install chromium (scripts/test.sh does)"
    return path


def test_report_renders_in_chromium(spark, kafka, lake, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ns = "rp"
    table = f"{ns}.{unique('events')}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS icetide.{ns}")
    spark.sql(f"CREATE TABLE icetide.{table} (id BIGINT, p STRING) USING iceberg PARTITIONED BY (p)")
    history = f"{ns}.{unique('history')}"
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict(kafka, lake, tmp_path, "unused", table,
                                                 health={"history_table": history})))
    cfg = load_config(path)
    for i in range(3):  # three collections with the table growing in between
        spark.sql(f"INSERT INTO icetide.{table} VALUES ({i}, 'a'), ({i + 10}, 'b')")
        collect_all(spark, cfg, [table], record=True)
    rows = history_rows(spark, "icetide", history, 24)
    assert [r["data_files"] for r in rows] == [2, 4, 6]
    page = tmp_path / "report.html"
    page.write_text(render(rows))

    dom = subprocess.run([chromium(), *CHROMIUM_FLAGS, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    figures = re.findall(r'<figure class="plot" data-metric="(\w+)"><svg', dom.stdout)
    # no icetide commits on this table: no freshness or commit latency series
    assert figures == [k for k, _, _ in PLOTS if k not in ("commit_latency_ms", "freshness_ms")]
    assert "No maintenance actions recorded in this window." in dom.stdout
    assert table in dom.stdout

    shot = tmp_path / "report.png"
    res = subprocess.run([chromium(), *CHROMIUM_FLAGS, "--hide-scrollbars", "--window-size=1400,1800",
                          f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    colours = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # plots drew lines, text, grid: not a blank page
