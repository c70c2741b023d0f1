"""The checks ``icetide check`` and ``icetide run`` both make before anything expensive starts:
the catalog and Kafka are reached, and with Avro the schema registry answers (its subjects for the
pipeline's topics, their latest versions and compatibility levels)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from icetide.catalog import check_reachable
from icetide.config.models import PipelineConfig
from icetide.ingest import source
from icetide.ingest.formats import registry

log = logging.getLogger(__name__)


@dataclass
class Preflight:
    topics: dict[str, int]  # topic → partitions
    subjects: list[dict[str, Any]] = field(default_factory=list)  # the registry's subjects of the topics
    warnings: list[str] = field(default_factory=list)


def preflight(cfg: PipelineConfig) -> Preflight:
    """Raise (naming the key) when a service is unreachable; warnings for what will still run."""
    check_reachable(cfg)
    parts = source.list_partitions(cfg.source)
    out = Preflight({t: len(p) for t, p in parts.items()})
    reg = cfg.source.schema_registry
    if reg is not None and "avro" in cfg.source.formats():
        named = parts or dict.fromkeys(cfg.source.topics or [])
        topics = sorted(t for t in named if cfg.source.format_of(t) == "avro")
        out.subjects, out.warnings = registry.preflight(reg, topics)
    for w in out.warnings:
        log.warning("%s", w)
    return out
