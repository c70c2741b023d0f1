"""A routed batch's tables, found from the head of each Kafka partition, so the batch takes one pass.

The one pass (:mod:`icetide.ingest.one_pass`) writes only tables it knows the batch goes to: those
this run wrote lately. A routed pipeline's first batch (and the first after a restart or a long
idle) has none, and would take the usual two passes with a cache (admit, infer, create, write).
Instead, the first ``stream.discovery_records`` records of each Kafka partition of the batch are
read (a bounded Kafka read, cached: a few thousand records), routed and admitted as the usual path
would (:meth:`Preparer.admit`), and the new tables among them are created from ``target.schema``
or from inference over that sample (:meth:`Preparer.prepare`). The one pass then writes the whole
batch to every table found.

Invariants:
- Discovery writes no record and no dead letter; it only creates tables (as the usual path would
  on this batch) and names the ones the one pass may write. What the sample missed (a table whose
  records start deeper in a partition, a shape the sample did not show) is routed nowhere by the
  one pass, or settled by its kept values, and else takes the usual path: nothing is lost or
  written twice, it only costs that path.
- A new table's types are decided by the sample (as the usual path decides them by the whole
  batch): a field whose kinds are mixed takes the kind most of the sample's values have.
- CDC tables are neither created nor named here (the one pass does not write them).
- A failure to read the sample leaves the batch to the usual path; a configuration mistake
  (:class:`~icetide.errors.IcetideError`) is raised as the usual path would raise it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark import StorageLevel

from icetide.config.models import PipelineConfig
from icetide.errors import IcetideError, is_fenced
from icetide.ingest import decode, source
from icetide.ingest.prepare import Preparer
from icetide.lake.offsets import BatchRanges
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass
class Found:
    """What discovery found: the tables the batch's sample routes to, and which of them it created."""

    tables: list[str] = field(default_factory=list)  # namespace.table, admitted, not CDC
    created: list[str] = field(default_factory=list)
    inferred: list[str] = field(default_factory=list)


def head_offsets(ranges: BatchRanges, records: int) -> tuple[str, str, str] | None:
    """Spark's ``assign``, ``startingOffsets`` and ``endingOffsets`` for the first ``records`` of
    each partition's range; None when the batch has no record. Topic names are JSON-encoded, never
    spliced into text."""
    assign: dict[str, list[int]] = {}
    start: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    for (topic, part), (lo, hi) in sorted(ranges.ranges.items()):
        if hi <= lo or records <= 0:
            continue
        assign.setdefault(topic, []).append(part)
        start.setdefault(topic, {})[str(part)] = lo
        end.setdefault(topic, {})[str(part)] = min(hi, lo + records)
    if not assign:
        return None
    return json.dumps(assign), json.dumps(start), json.dumps(end)


def read_heads(spark: SparkSession, cfg: PipelineConfig, ranges: BatchRanges) -> DataFrame | None:
    """The batch's first ``stream.discovery_records`` records of each partition, with icetide's
    Kafka columns (a batch read of exactly those offsets; what retention deleted is skipped)."""
    offsets = head_offsets(ranges, cfg.stream.discovery_records)
    if offsets is None:
        return None
    assign, starting, ending = offsets
    route = cfg.target.route
    src = cfg.source
    reader = (spark.read.format("kafka").options(**source.kafka_options(src))
              .option("assign", assign).option("startingOffsets", starting).option("endingOffsets", ending)
              .option("failOnDataLoss", "false")
              .option("includeHeaders", "true" if route is not None and route.by == "header" else "false"))
    return decode.with_kafka_columns(reader.load())


def discover(spark: SparkSession, cfg: PipelineConfig, pre: Preparer, ranges: BatchRanges,
             lap: Callable[[str], None] = lambda name: None) -> Found:
    """Find the tables a routed batch goes to from its partitions' heads; create the new ones.
    ``lap(name)`` closes a phase of the batch's timings (``discover_read``, ``discover_create``)."""
    t = cfg.target
    found = Found()
    cached: DataFrame | None = None
    try:
        heads = read_heads(spark, cfg, ranges)
        if heads is None:
            return found
        cached = pre.routed(heads).persist(StorageLevel.MEMORY_AND_DISK_DESER)
        admission, _, _ = pre.admit(cached)
        tables = [x for x in admission.accepted if t.policy_for(x).cdc is None]
        known = pre.known_tables()
        new = [x for x in tables if x not in known]
        lap("discover_read")
        prepared = pre.prepare(cached, new) if new else None
    except IcetideError:
        raise
    except Exception as e:
        if is_fenced(e):
            raise
        log.warning("finding the tables of the batch from its partitions' heads failed (%s); the usual path "
                    "writes it", error_line(e, 300))
        return found
    finally:
        if cached is not None:
            cached.unpersist()
    if prepared is not None:
        lap("discover_create")
    refused = set(prepared.refused) if prepared is not None else set()
    found.tables = [x for x in tables if x not in refused]
    found.created = list(prepared.created) if prepared is not None else []
    found.inferred = [x for x in pre.inferred if x in found.created]
    log.info("batch's tables from its partitions' heads: %d (%d created)", len(found.tables), len(found.created))
    return found
