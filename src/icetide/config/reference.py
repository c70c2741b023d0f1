"""Render the config reference (docs/config.md) from the pydantic models, so it cannot drift.

    python -m icetide.config.reference > docs/config.md
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from icetide.config.catalog import JdbcCatalog, RestCatalog
from icetide.config.health import HealthSettings
from icetide.config.maintenance import MaintenanceSettings
from icetide.config.models import PipelineConfig
from icetide.config.policy import MaintenancePolicy
from icetide.config.source import KafkaSource
from icetide.config.stream import DeadLetter, SparkSettings, StreamSettings
from icetide.config.target import CdcSettings, RouteSettings, TargetTable
from icetide.config.thresholds import HealthThresholds

SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("(top level)", PipelineConfig),
    ("source", KafkaSource),
    ("catalog (type: jdbc, the default)", JdbcCatalog),
    ("catalog (type: rest)", RestCatalog),
    ("target", TargetTable),
    ("target.route", RouteSettings),
    ("target.cdc (and target.tables.<glob>.cdc)", CdcSettings),
    ("dead_letter", DeadLetter),
    ("stream", StreamSettings),
    ("health", HealthSettings),
    ("health.thresholds", HealthThresholds),
    ("maintenance", MaintenanceSettings),
    ("maintenance.policy", MaintenancePolicy),
    ("spark", SparkSettings),
]


def _default(field: Any) -> str:
    if field.default is not PydanticUndefined:
        return "" if field.default is None else json.dumps(field.default, default=str)
    if field.default_factory is not None:
        value = field.default_factory()
        return "" if isinstance(value, BaseModel) else json.dumps(value, default=str)
    return "**required**"


def render() -> str:
    out = [
        "# Pipeline configuration reference",
        "",
        "Generated from `src/icetide/config/models.py` by `python -m icetide.config.reference`.",
        "Unknown keys are errors. Any value can be overridden by an environment variable",
        "`ICETIDE__<SECTION>__<KEY>` (e.g. `ICETIDE__SOURCE__BOOTSTRAP_SERVERS`), and any string may use",
        "`${VAR}` or `${VAR:-default}`. Relative paths resolve against the config file's folder.",
        "",
    ]
    for title, model in SECTIONS:
        out += [f"## {title}", "", (model.__doc__ or "").strip(), "", "| key | default | meaning |",
                "|---|---|---|"]
        for name, f in model.model_fields.items():
            if name == "base_dir" or (isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)):
                continue
            if name in ("source", "catalog", "target", "dead_letter", "stream", "spark", "health",
                        "maintenance") \
                    and model is PipelineConfig:
                continue
            desc = (f.description or "").replace("|", "\\|")
            default = _default(f)
            shown = default if default in ("", "**required**") else f"`{default}`"
            out.append(f"| `{f.alias or name}` | {shown} | {desc} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render())
