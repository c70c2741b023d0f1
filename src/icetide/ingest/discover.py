"""A routed batch's tables, found from the head of each Kafka partition, so the batch takes one pass.

The one pass (:mod:`icetide.ingest.one_pass`) writes only tables it knows the batch goes to: those
this run wrote in its last 20 batches. A routed pipeline's first batch of a run (or the first after
20 batches with no commit) has none, and would take the usual two passes with a cache (admit,
infer, create, write). Instead, the first ``stream.discovery_records`` records of each Kafka
partition of the batch are read (a bounded Kafka read of exactly those offsets, cached), routed and
admitted as the usual path would (:meth:`Preparer.admit`); the existing tables among them, and the
new ones that have a declared schema (``target.schema`` or ``target.tables.<pattern>.schema``),
created from it, are the one pass's targets for the whole batch (the one pass leaves out a table
whose columns only values can settle: :func:`icetide.ingest.shapes.settles_unseen`).

Invariants:
- Discovery writes no record and no dead letter, and decides no column: it only creates tables
  from their declared schema, as the usual path would. A table whose columns come from its records
  is left to the usual path, which infers over every record of the batch (so one outlier in the
  heads never types a column). What the sample missed (a table whose records start deeper in every
  partition, a shape the declared schema does not fit) is routed nowhere by the one pass, or
  aborted there, and takes the usual path: nothing is lost or written twice, it only costs that path.
- With ``route.max_tables``, a new declared table the heads show is created before the rest of the
  batch is admitted: which new tables a batch at the cap gets first follows the heads.
- CDC tables are neither created nor named here (the one pass does not write them).
- A failure to read the heads leaves the batch to the usual path; a configuration mistake
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
from icetide.config.target import TargetTable
from icetide.errors import IcetideError, is_fenced
from icetide.ingest import decode, source
from icetide.ingest.prepare import Parallel, Preparer
from icetide.lake.offsets import BatchRanges
from icetide.lake.tables import ensure_namespace
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass
class Found:
    """What discovery found: the tables the batch's heads route to that exist now, and which of
    them it created."""

    tables: list[str] = field(default_factory=list)  # namespace.table, admitted, not CDC
    created: list[str] = field(default_factory=list)


def may_find(t: TargetTable, known: set[str]) -> bool:
    """Whether discovery can name a target at all: a table exists, or some table has a declared schema."""
    return bool(known) or bool(t.schema_ddl) or any(v.get("schema") or v.get("schema_ddl") for v in t.tables.values())


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
    reader = (spark.read.format("kafka").options(**source.kafka_options(cfg.source))
              .option("assign", assign).option("startingOffsets", starting).option("endingOffsets", ending)
              .option("failOnDataLoss", "false")
              .option("includeHeaders", "true" if route is not None and route.by == "header" else "false"))
    return decode.with_kafka_columns(reader.load())


def discover(spark: SparkSession, cfg: PipelineConfig, pre: Preparer, ranges: BatchRanges, parallel: Parallel,
             lap: Callable[[str], None] = lambda name: None) -> Found:
    """The tables a routed batch goes to, from its partitions' heads; the new declared ones created.
    ``lap(name)`` closes a phase of the batch's timings (``discover_read``, ``discover_create``)."""
    t = cfg.target
    cached: DataFrame | None = None
    try:
        heads = read_heads(spark, cfg, ranges)
        if heads is None:
            return Found()
        cached = pre.routed(heads).persist(StorageLevel.MEMORY_AND_DISK_DESER)
        admission, _, _ = pre.admit(cached)
    except IcetideError:
        raise
    except Exception as e:
        if is_fenced(e):
            raise
        log.warning("reading the batch's partition heads failed (%s); the usual path writes it", error_line(e, 300))
        return Found()
    finally:
        if cached is not None:
            cached.unpersist()
    known = pre.known_tables()
    tables = [x for x in admission.accepted if t.policy_for(x).cdc is None]
    new = [x for x in tables if x not in known and t.policy_for(x).schema_ddl]
    lap("discover_read")
    created: list[str] = []
    if new:
        for ns in sorted({x.split(".")[0] for x in new}):  # once, before tables are created in parallel
            ensure_namespace(spark, pre.catalog, ns)
        errors = parallel(lambda x: pre.create(x, None), new)  # a refusal: the usual path reports it
        created = [x for x, err in zip(new, errors, strict=True) if err is None]
        known.update(created)
        lap("discover_create")
    found = Found([x for x in tables if x in known], created)
    log.info("the batch's tables from its partitions' heads: %d (%d created)", len(found.tables), len(created))
    return found
