"""A pipeline started under a new name: refused while its tables hold another pipeline's offsets for
its topics, unless ``source.adopt_offsets_from`` names that pipeline, and then adopted only once it
has stopped committing.

Invariant: a run never starts (with no checkpoint) ingesting its topics into tables that hold
another pipeline's offsets for them unless told to adopt them, and never adopts the offsets of a
pipeline that committed to those tables within ``stream.takeover_after``: two pipelines of
different names do not fence each other, so both would land the same records (#41, 8).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from icetide.config.base import interval_seconds
from icetide.config.models import PipelineConfig
from icetide.errors import ConfigError, StoppedBeforeStart

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.ingest.sink import BatchWriter
    from icetide.lake.offsets import Watermark

log = logging.getLogger(__name__)


def foreign_offsets(spark: SparkSession, cfg: PipelineConfig, writer: BatchWriter) -> dict[str, dict[str, Watermark]]:
    """Other pipelines holding offsets of this pipeline's topics in its tables: pipeline → table →
    its watermark there. Empty when a table holds this pipeline's own offsets (not a rename). The
    dead-letter table is shared by pipelines by default and is not looked at."""
    from icetide.lake.meta_spark import SparkMeta
    from icetide.lake.pipelines import pipelines_on

    meta = SparkMeta(spark, cfg.catalog.name)
    mine = set(cfg.source.topics or [])
    pattern = None if cfg.source.topics is not None else re.compile(cfg.source.topic_pattern or "")
    found: dict[str, dict[str, Watermark]] = {}
    for table in writer.tables():
        if table == cfg.dead_letter.table or not meta.exists(table):
            continue
        held = pipelines_on(meta.properties(table), meta.snapshots(table))
        if cfg.name in held:
            continue
        for other, wm in held.items():
            topics = {t for t, _ in wm.offsets}
            if topics & mine or (pattern is not None and any(pattern.fullmatch(t) for t in topics)):
                found.setdefault(other, {})[table] = wm
    return found


def refuse_foreign_offsets(spark: SparkSession, cfg: PipelineConfig, writer: BatchWriter,
                           sleep: Callable[[float], bool | None] = time.sleep) -> None:
    """A pipeline starting without a checkpoint whose tables hold another pipeline's offsets for its
    topics, and none of its own, is most likely that pipeline renamed: it would ingest the topics
    into them again. Refused (naming both names and the fix) unless ``source.adopt_offsets_from``
    names it. A routed pipeline's namespaces can hold other pipelines' tables of the same topics
    (routed elsewhere by design), so there a match is a warning, not a refusal. The pipeline adopted
    must have stopped: while it committed within ``stream.takeover_after``, the start waits that
    long once, then refuses. A heuristic: a pipeline still running but idle that long (no records,
    an outage) is not told apart from one stopped. ``sleep``: the wait (True: a stop was asked)."""
    found = foreign_offsets(spark, cfg, writer)
    adopt = cfg.source.adopt_offsets_from
    strangers = {p: ts for p, ts in found.items() if p != adopt}
    if strangers and cfg.target.route is not None:
        for p, tables in sorted(strangers.items()):
            log.warning("tables %s hold offsets of pipeline '%s' for this pipeline's topics; if this pipeline "
                        "is '%s' renamed, stop it and set source.adopt_offsets_from: %s, or it ingests them again",
                        sorted(tables)[:5], p, p, p)
    elif strangers:
        p, tables = sorted(strangers.items())[0]
        raise ConfigError(
            f"source.adopt_offsets_from: table(s) {', '.join(sorted(tables)[:5])} hold offsets of pipeline '{p}' for "
            f"this pipeline's topics and none of '{cfg.name}': started under a new name, it would ingest those "
            f"records again. If this pipeline replaces '{p}', set source.adopt_offsets_from: {p} (it resumes "
            "exactly where that one stopped); otherwise give it other tables")
    if adopt is None or adopt not in found:
        return
    quiet_s = interval_seconds(cfg.stream.takeover_after)
    for attempt in (0, 1):
        if attempt:  # read again: the snapshots it committed since
            found = foreign_offsets(spark, cfg, writer)
        newest = max((wm.committed_at_ms for wm in found.get(adopt, {}).values()), default=0)
        ago = max(0.0, time.time() - newest / 1000)  # a commit stamped ahead of this clock: just now
        if ago >= quiet_s:
            break
        if attempt:
            raise ConfigError(
                f"source.adopt_offsets_from: pipeline '{adopt}' committed to {', '.join(sorted(found[adopt])[:5])} "
                f"{ago:.0f} s ago: it is still running. Two pipelines of different names do not fence each other, "
                f"so both would land the same records: stop '{adopt}', then start '{cfg.name}' once it has not "
                f"committed for stream.takeover_after ({quiet_s:.0f} s)")
        log.warning("pipeline %s adopts the offsets of pipeline %s, which committed %.0f s ago: waiting until it has "
                    "not committed for %.0f s (stream.takeover_after)", cfg.name, adopt, ago, quiet_s)
        if sleep(quiet_s - ago + 1):
            raise StoppedBeforeStart(f"stopped by a signal while waiting for pipeline '{adopt}' to stop: nothing ran")
    log.warning("pipeline %s adopts the offsets of pipeline %s in %s", cfg.name, adopt,
                sorted(found.get(adopt, {})))
