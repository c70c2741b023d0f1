"""Which pipelines hold offsets in which tables, read from metadata only (``icetide offsets``, the
check that refuses a renamed pipeline)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icetide.lake.offsets import K_PIPELINE, PROPERTY_PREFIX, Watermark, watermark_from

if TYPE_CHECKING:
    from icetide.config.models import PipelineConfig
    from icetide.lake.meta import MetaReader, Snapshot


def pipeline_watermarks(reader: MetaReader, cfg: PipelineConfig) -> dict[str, Watermark]:
    """Every table of the pipeline holding its offsets (its target or routed tables, dead letters),
    by ``catalog.namespace.table``; what ``icetide offsets`` shows. Reads metadata only."""
    t = cfg.target
    names = ({t.table} if t.table is not None else
             {n for ns in t.namespaces() for n in reader.list_tables(ns)} - cfg.own_tables())
    out = {}
    for name in sorted(names | {cfg.dead_letter.table}):
        if reader.exists(name):
            wm = watermark_from(reader.properties(name), reader.snapshots(name), cfg.name)
            if wm is not None:
                out[f"{reader.catalog}.{name}"] = wm
    return out


def pipelines_on(props: dict[str, str], snapshots: list[Snapshot]) -> dict[str, Watermark]:
    """Every pipeline that holds offsets in a table (its mirror or tagged ancestors), by name."""
    names = {k[len(PROPERTY_PREFIX):] for k in props if k.startswith(PROPERTY_PREFIX)}
    names |= {s.summary[K_PIPELINE] for s in snapshots if K_PIPELINE in s.summary and s.ancestry is not None}
    out = {}
    for p in sorted(names):
        try:
            wm = watermark_from(props, snapshots, p)
        except Exception:
            continue
        if wm is not None:
            out[p] = wm
    return out
