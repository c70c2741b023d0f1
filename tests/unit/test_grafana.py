"""The Grafana dashboard in the repo is current, valid JSON, and every query names a metric icetide exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from icetide.health.grafana import dashboard
from icetide.health.metrics import HealthCollector
from icetide.health.model import PartitionHealth, TableHealth

pytestmark = pytest.mark.unit
SHIPPED = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "icetide.json"
PROMQL_WORDS = {"count", "sum", "min", "max", "topk", "time", "by", "without", "avg", "rate"}


def exported() -> set[str]:
    """Every metric name the Prometheus collector serves (it emits each family even for one table)."""
    c = HealthCollector()
    c.update([TableHealth("icetide.ns.t", 0, 1, 1, [PartitionHealth('{"p":"a"}', data_files=1)])])
    return {m.name for m in c.collect()}


def test_the_shipped_dashboard_is_current_json() -> None:
    assert json.loads(SHIPPED.read_text()) == dashboard(), \
        "docs/grafana/icetide.json is stale: python -m icetide.health.grafana > docs/grafana/icetide.json"


def test_every_query_names_an_exported_metric() -> None:
    names = exported()
    assert "icetide_table_score" in names and "icetide_partition_small_files" in names
    exprs = [t["expr"] for p in json.loads(SHIPPED.read_text())["panels"] for t in p["targets"]]
    assert len(exprs) >= 15
    for expr in exprs:
        metrics = {m for m in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*[{)]|\s*$|\s*\))", expr)
                   if m.startswith("icetide_")}
        assert metrics, f"no icetide metric in {expr!r}"
        unknown = metrics - names
        assert not unknown, f"{expr!r} names {unknown}, which icetide does not export"
