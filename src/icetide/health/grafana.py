"""The Grafana dashboard for ``icetide metrics``, generated from the exported gauges.

``python -m icetide.health.grafana > docs/grafana/icetide.json`` regenerates the committed file
(tests/unit/test_grafana.py checks it is current and that every query names an exported metric).
Import it in Grafana (Dashboards → Import) and pick the Prometheus data source that scrapes icetide.
"""

from __future__ import annotations

import json
from typing import Any

#: (title, PromQL, unit) per time-series panel; ``$table`` is the dashboard's table selector
PANELS: list[tuple[str, str, str]] = [
    ("Health score (0-100)", 'icetide_table_score{table=~"$table"}', "none"),
    ("Data files", 'icetide_table_data_files{table=~"$table"}', "none"),
    ("Small data files", 'icetide_table_small_files{table=~"$table"}', "none"),
    ("Average data file size", 'icetide_table_avg_file_bytes{table=~"$table"}', "bytes"),
    ("Data files in the fullest partition", 'icetide_table_max_partition_files{table=~"$table"}', "none"),
    ("Delete ratio", 'icetide_table_delete_ratio{table=~"$table"}', "percentunit"),
    ("Commits in the last hour", 'icetide_table_commits_last_hour{table=~"$table"}', "none"),
    ("Freshness (age of the newest record)", 'icetide_table_freshness_ms{table=~"$table"}', "ms"),
    ("Commit latency (commit − batch planned)", 'icetide_table_commit_latency_ms{table=~"$table"}', "ms"),
    ("Kafka lag (records)", 'icetide_table_kafka_lag{table=~"$table"}', "none"),
    ("Snapshots", 'icetide_table_snapshots{table=~"$table"}', "none"),
    ("Manifests", 'icetide_table_manifests{table=~"$table"}', "none"),
    ("Metadata JSON size", 'icetide_table_metadata_file_bytes{table=~"$table"}', "bytes"),
    ("Worst partitions: small files", 'topk(20, icetide_partition_small_files{table=~"$table"})', "none"),
]
#: (title, PromQL, unit) of the stat row on top
STATS: list[tuple[str, str, str]] = [
    ("Tables", "count(icetide_table_score)", "none"),
    ("Critical tables", 'sum(icetide_table_tier{tier="critical"})', "none"),
    ("Warning tables", 'sum(icetide_table_tier{tier="warning"})', "none"),
    ("Lowest score", "min(icetide_table_score)", "none"),
    ("Oldest newest commit", "time() * 1000 - min(icetide_table_last_commit_timestamp_ms)", "ms"),
]
_DS = {"type": "prometheus", "uid": "${datasource}"}


def _target(expr: str) -> dict[str, Any]:
    return {"datasource": _DS, "expr": expr, "legendFormat": "{{table}} {{partition}}".strip(), "refId": "A"}


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    for i, (title, expr, unit) in enumerate(STATS):
        panels.append({"id": len(panels) + 1, "type": "stat", "title": title, "datasource": _DS,
                       "gridPos": {"h": 4, "w": 24 // len(STATS), "x": i * (24 // len(STATS)), "y": 0},
                       "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                       "options": {"reduceOptions": {"calcs": ["lastNotNull"]}}, "targets": [_target(expr)]})
    for i, (title, expr, unit) in enumerate(PANELS):
        panels.append({"id": len(panels) + 1, "type": "timeseries", "title": title, "datasource": _DS,
                       "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": 4 + (i // 2) * 8},
                       "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                       "options": {"legend": {"displayMode": "table", "placement": "bottom"}},
                       "targets": [_target(expr)]})
    return {
        "title": "icetide: Iceberg table health", "uid": "icetide-health", "schemaVersion": 39,
        "tags": ["icetide", "iceberg"], "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "table", "type": "query", "datasource": _DS, "label": "table", "multi": True,
             "includeAll": True, "current": {"text": "All", "value": "$__all"}, "allValue": ".*",
             "query": {"query": "label_values(icetide_table_score, table)", "refId": "tables"}, "refresh": 2},
        ]},
        "panels": panels,
    }


def main() -> None:
    print(json.dumps(dashboard(), indent=2))


if __name__ == "__main__":
    main()
