"""The exactly-once ledger: which Kafka offsets each Iceberg table holds, per pipeline.

Every icetide commit carries in its snapshot summary (atomically with the data):

- ``icetide.pipeline``      the pipeline name
- ``icetide.run`` / ``icetide.batch``  the streaming run and micro-batch id
- ``icetide.batch-offsets`` the batch's non-empty ranges ``[start, end)`` per topic-partition, as
  ``{"topic": [[partition, end, end - start], ...]}``, deflated (``z1:`` + base64) when long

A table's *watermark* (per topic-partition, the next offset it still needs: it holds every record
of this pipeline routed to it below that) is the largest ``end`` over its tagged snapshots, folded
with the table property ``icetide.watermark.<pipeline>``. The property is a mirror written after
commits at most every ``stream.watermark_mirror_interval`` (and by maintenance before it expires
snapshots); it records when it was taken, so only snapshots committed since are folded in. Each
snapshot therefore carries only its own batch, not the cumulative map of every partition ever seen:
metadata grows with the partitions a batch touched, not with partitions × snapshots. (Snapshots of
older icetide versions also carry ``icetide.watermark``, the cumulative map; it is folded in too.)

A recreated topic's offsets start at 0 again (#41): a commit also records ``icetide.topic-ids``
(``{"topic": "<Kafka topic id>"}``) where the table did not hold them yet, and *restart marks* set
the offsets of a deleted topic aside (:func:`fold_watermark`). The marks live in their own property,
``icetide.restarts.<pipeline>`` (:mod:`icetide.lake.restart_marks`), which only the pipeline writes
when it finds a topic recreated, never maintenance; each commit's summary carries the marks its
writer knew (``icetide.restart-marks``). A mirror or a commit that does not carry a topic's mark
was written without knowing it (maintenance's mirror of an older view, a paused or stopping run)
and gives that topic nothing. The watermark property carries the marks too, as earlier versions
wrote them; per topic, the marks' own property wins.

Before writing, rows below the table's watermark are dropped, so a replayed batch (crash, restart,
lost checkpoint) never lands twice, whichever tables it had reached.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icetide.identifiers import validate_pipeline
from icetide.lake.offset_codec import decode_map, encode_map, pack, safe_value, unpack
from icetide.lake.restart_marks import Mark, Restarts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.lake.meta import Snapshot

PREFIX = "icetide."
K_PIPELINE = "icetide.pipeline"
K_RUN = "icetide.run"
K_BATCH = "icetide.batch"
K_BATCH_OFFSETS = "icetide.batch-offsets"
K_WATERMARK = "icetide.watermark"
K_PLANNED_AT = "icetide.batch-planned-at-ms"
K_TOPIC_IDS = "icetide.topic-ids"
K_MARKS = "icetide.restart-marks"
PROPERTY_PREFIX = "icetide.watermark."
RESTARTS_PREFIX = "icetide.restarts."
#: Snapshots committed up to this long before the mirror are folded in too (clock skew).
MIRROR_SLACK_MS = 5 * 60 * 1000

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class BatchRanges:
    """Offset ranges ``[start, end)`` per topic-partition that one micro-batch covered."""

    ranges: dict[TopicPartition, tuple[int, int]]
    planned_at_ms: int | None = None

    def encode(self) -> str:
        return encode_map(self.ranges)

    def ends(self) -> dict[TopicPartition, int]:
        return {tp: end for tp, (_, end) in self.ranges.items()}

    def records(self) -> int:
        """Offsets the batch covers (records, or fewer on compacted or transactional topics)."""
        return sum(max(0, end - start) for start, end in self.ranges.values())

    def stored(self) -> str:
        """What a snapshot carries: the non-empty ranges as ``{"topic": [[partition, end, length],
        ...]}`` (the length is short, where a start would repeat the end's digits), packed (see
        :func:`pack`)."""
        out: dict[str, list[list[int]]] = {}
        for (topic, part), (start, end) in sorted(self.ranges.items()):
            if end > start:
                out.setdefault(topic, []).append([part, end, end - start])
        return pack(json.dumps(out, separators=(",", ":"), sort_keys=True))

    @classmethod
    def decode(cls, text: str | None) -> BatchRanges:
        """Either form: ``stored()``'s, or ``{"topic": {"partition": [start, end]}}`` (``encode()``)."""
        if not text:
            return cls({})
        raw = json.loads(unpack(text))
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        for topic, parts in raw.items():
            if isinstance(parts, list):
                ranges.update({(topic, int(p)): (int(e) - int(n), int(e)) for p, e, n in parts})
            else:
                ranges.update({(topic, int(p)): (int(v[0]), int(v[1])) for p, v in parts.items()})
        return cls(ranges)


@dataclass
class Watermark:
    """Next offset per topic-partition a table still needs from this pipeline."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    run: str = ""
    batch: int = -1
    batch_ranges: BatchRanges | None = None
    committed_at_ms: int = 0
    kafka_ts_max: int | None = None  # newest Kafka timestamp in the batch (freshness)
    #: Where it was read: "snapshot" (a tagged snapshot among the current ancestors, which a fenced
    #: commit expects to still be the newest) or "property" (the mirror, once those expired).
    source: str = "snapshot"
    #: Kafka topic id per topic whose offsets these are (where recorded)
    topic_ids: dict[str, str] = field(default_factory=dict)
    #: Topics ingested again from their start after a recreation: the snapshot up to which (this one
    #: and older) their offsets belong to the deleted topic
    restarts: dict[str, Mark] = field(default_factory=dict)

    def without(self, topics: set[str] | dict[str, Any]) -> Watermark:
        """A copy without the offsets, ranges and ids of ``topics`` (run, batch and source kept)."""
        ranges = None if self.batch_ranges is None else BatchRanges(
            {tp: r for tp, r in self.batch_ranges.ranges.items() if tp[0] not in topics},
            self.batch_ranges.planned_at_ms)
        return Watermark({tp: o for tp, o in self.offsets.items() if tp[0] not in topics}, self.run, self.batch,
                         ranges, self.committed_at_ms, self.kafka_ts_max, self.source,
                         {t: i for t, i in self.topic_ids.items() if t not in topics}, dict(self.restarts))

    def fence(self) -> tuple[str | None, int]:
        """(run, batch) a fenced commit expects as the newest tagged ancestor; (None, -1): none."""
        return (self.run, self.batch) if self.source == "snapshot" and self.run else (None, -1)

    def get(self, tp: TopicPartition) -> int:
        return self.offsets.get(tp, -1)

    def covers(self, ranges: BatchRanges) -> bool:
        """True if every record of the batch is already below the watermark (empty ranges hold none)."""
        return all(self.get(tp) >= end for tp, (start, end) in ranges.ranges.items() if end > start)

    def fold(self, offsets: dict[TopicPartition, int]) -> None:
        """Raise the watermark to ``offsets`` where they are higher (it never moves back)."""
        for tp, end in offsets.items():
            if end > self.offsets.get(tp, -1):
                self.offsets[tp] = end

    def advanced(self, ranges: BatchRanges) -> dict[TopicPartition, int]:
        merged = Watermark(dict(self.offsets))
        merged.fold(ranges.ends())
        return merged.offsets

    def encode(self) -> str:
        return encode_map(self.offsets)

    @classmethod
    def from_summary(cls, summary: dict[str, str], committed_at_ms: int = 0) -> Watermark:
        """The snapshot's own contribution: its batch's ends (and, from older versions, the
        cumulative map); :func:`read_watermark` folds every snapshot since the mirror."""
        ranges = BatchRanges.decode(summary.get(K_BATCH_OFFSETS))
        wm = cls(
            offsets={k: int(v) for k, v in decode_map(summary.get(K_WATERMARK)).items()},
            run=summary.get(K_RUN, ""),
            batch=int(summary.get(K_BATCH, -1)),
            batch_ranges=ranges,
            committed_at_ms=committed_at_ms,
            topic_ids=dict(json.loads(summary[K_TOPIC_IDS])) if summary.get(K_TOPIC_IDS) else {},
            restarts={str(t): (str(m[0]), int(m[1]), int(m[2]))
                      for t, m in json.loads(summary.get(K_MARKS) or "{}").items()},
        )
        wm.fold(ranges.ends())
        return wm

    def to_property(self) -> str:
        out: dict[str, Any] = {"run": self.run, "batch": self.batch, "committed_at_ms": self.committed_at_ms,
                               "kafka_ts_max": self.kafka_ts_max, "watermark": json.loads(self.encode()),
                               "batch_offsets": json.loads(self.batch_ranges.encode()) if self.batch_ranges else {}}
        if self.topic_ids:  # added only when there is something to say (older readers ignore them)
            out["topic_ids"] = self.topic_ids
        if self.restarts:
            out["restarts"] = {t: list(m) for t, m in self.restarts.items()}
        return json.dumps(out, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_property(cls, text: str) -> Watermark:
        raw = json.loads(text)
        wm = cls.from_summary(
            {
                K_WATERMARK: json.dumps(raw.get("watermark", {})),
                K_RUN: raw.get("run", ""),
                K_BATCH: str(raw.get("batch", -1)),
                K_BATCH_OFFSETS: json.dumps(raw.get("batch_offsets", {})),
            },
            committed_at_ms=int(raw.get("committed_at_ms", 0)),
        )
        wm.kafka_ts_max = raw.get("kafka_ts_max")
        wm.source = "property"
        wm.topic_ids = {str(t): str(i) for t, i in raw.get("topic_ids", {}).items()}
        wm.restarts = {str(t): (str(m[0]), int(m[1]), int(m[2])) for t, m in raw.get("restarts", {}).items()}
        return wm

    def restarted(self, topics: dict[str, str | None]) -> Watermark:
        """The offsets of ``topics`` (→ the new topic's id, None if unknown) set aside, marking the
        newest tagged snapshot: it and older ones no longer count for them (a fresh read only)."""
        out = self.without(topics)
        out.topic_ids.update({t: i for t, i in topics.items() if i})
        out.restarts.update({t: (self.run, self.batch, self.committed_at_ms) for t in topics})
        return out


def commit_properties(pipeline: str, run: str, batch: int, ranges: BatchRanges,
                      topic_ids: dict[str, str] | None = None, marks: dict[str, Mark] | None = None) -> dict[str, str]:
    """Snapshot-summary entries for one commit (``topic_ids``: the Kafka topic ids to record;
    ``marks``: the restart marks its writer knew, so that a commit of a run that had not seen a
    recreation gives the recreated topic nothing)."""
    props = {
        K_PIPELINE: pipeline,
        K_RUN: run,
        K_BATCH: str(batch),
        K_BATCH_OFFSETS: ranges.stored(),
    }
    if ranges.planned_at_ms is not None:
        props[K_PLANNED_AT] = str(ranges.planned_at_ms)
    if topic_ids:
        props[K_TOPIC_IDS] = json.dumps(topic_ids, separators=(",", ":"), sort_keys=True)
    if marks:
        props[K_MARKS] = json.dumps({t: list(m) for t, m in marks.items()}, separators=(",", ":"), sort_keys=True)
    return props


def read_watermark(spark: SparkSession, table: str, pipeline: str) -> Watermark | None:
    """The newest watermark of ``pipeline`` on ``table`` (fully qualified, validated identifier).

    The property (the mirror) folded with every tagged snapshot among the current snapshot's
    ancestors committed since the mirror was taken (five minutes of slack for clocks: folding more is
    harmless, the fold is a maximum). Run, batch and batch ranges are the newest snapshot's (what a
    fenced commit expects); with none left, the property's.
    """
    validate_pipeline(pipeline)
    props = table_properties(spark, table)
    prop = props.get(PROPERTY_PREFIX + pipeline)
    base = Watermark.from_property(prop) if prop else None
    since = f"AND unix_millis(s.committed_at) >= {int(base.committed_at_ms) - MIRROR_SLACK_MS} " if base else ""
    rows = spark.sql(
        f"SELECT s.summary, CAST(unix_millis(s.committed_at) AS BIGINT) AS ts "
        f"FROM {table}.snapshots s JOIN {table}.history h ON s.snapshot_id = h.snapshot_id "
        f"WHERE h.is_current_ancestor AND s.summary['{K_PIPELINE}'] = '{pipeline}' {since}"
        f"ORDER BY h.made_current_at DESC, s.committed_at DESC"
    ).collect()
    return fold_watermark(base, [(dict(r["summary"]), int(r["ts"])) for r in rows],
                          Restarts.parse(props.get(RESTARTS_PREFIX + pipeline)))


def watermark_from(props: dict[str, str], snapshots: list[Snapshot], pipeline: str) -> Watermark | None:
    """:func:`read_watermark` from facts a :class:`~icetide.lake.meta.MetaReader` returns (no Spark)."""
    validate_pipeline(pipeline)
    prop = props.get(PROPERTY_PREFIX + pipeline)
    base = Watermark.from_property(prop) if prop else None
    floor = int(base.committed_at_ms) - MIRROR_SLACK_MS if base else None
    tagged = sorted((s for s in snapshots if s.ancestry is not None and s.summary.get(K_PIPELINE) == pipeline
                     and (floor is None or s.committed_at_ms >= floor)), key=lambda s: s.ancestry or 0)
    return fold_watermark(base, [(s.summary, s.committed_at_ms) for s in tagged],
                          Restarts.parse(props.get(RESTARTS_PREFIX + pipeline)))


def fold_watermark(base: Watermark | None, tagged: list[tuple[dict[str, str], int]],
                   restarts: Restarts | None = None) -> Watermark | None:
    """The property's watermark ``base`` folded with the pipeline's tagged ancestors (newest first).

    A topic marked as restarted (``restarts``, from ``icetide.restarts.<pipeline>``, whose entries
    win over the marks the property carries) takes nothing from the marked snapshot and older ones,
    nor from a later snapshot or a property that does not carry its mark (written without knowing
    it: a paused run's commit, a mirror of an older view, a stopping run's): those offsets and ids
    are the deleted topic's. (Marks only the property carries, from earlier versions, need no
    carrying.) A marked topic's id is the newest a snapshot after its mark recorded, else the
    mark's. Topic ids otherwise: the newest wins."""
    restarts = restarts or Restarts()
    marks = {**(base.restarts if base is not None else {}), **restarts.marks}
    if base is not None and marks:
        base = base.without({t for t, m in marks.items() if base.restarts.get(t) != m})
        base.restarts = dict(marks)
    newest: Watermark | None = None
    gone: set[str] = set()
    for summary, ts in tagged:
        wm = Watermark.from_summary(summary, ts)
        gone |= {t for t, m in marks.items() if m == (wm.run, wm.batch, ts)}
        drop = gone | {t for t, m in restarts.marks.items() if wm.restarts.get(t) != m}
        wm = wm.without(drop) if drop else wm
        if newest is None:
            newest = wm
        else:
            newest.fold(wm.offsets)
            newest.topic_ids = {**wm.topic_ids, **newest.topic_ids}
    if newest is None:
        newest = base
    elif base is not None:
        newest.fold(base.offsets)
        newest.topic_ids = {**base.topic_ids, **newest.topic_ids}
    if newest is not None:
        newest.restarts = dict(marks)
        newest.topic_ids.update({t: i for t, i in restarts.ids.items() if i and t not in newest.topic_ids})
    return newest


def table_properties(spark: SparkSession, table: str) -> dict[str, str]:
    return {str(row["key"]): str(row["value"]) for row in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}


def table_property(spark: SparkSession, table: str, key: str) -> str | None:
    return table_properties(spark, table).get(key)


def resume_offsets(watermarks: list[Watermark]) -> dict[TopicPartition, int]:
    """Where a pipeline whose checkpoint is gone resumes, from its tables' watermarks.

    Batches run one after another and a batch starts only after every table of the previous one
    committed. So every batch before the newest one seen in any table is complete everywhere; only
    that newest batch may be partial. Resume from its start (the per-table filter drops the part
    already written), and from the highest watermark for partitions it did not cover.
    """
    if not watermarks:
        return {}
    newest = max(watermarks, key=lambda w: (w.committed_at_ms, w.batch))
    out: dict[TopicPartition, int] = {}
    for w in watermarks:
        for tp, off in w.offsets.items():
            out[tp] = max(out.get(tp, -1), off)
    if newest.batch_ranges:
        for tp, (start, _) in newest.batch_ranges.ranges.items():
            out[tp] = start
    return out


def mirrors_needed(props: dict[str, str], snapshots: list[Snapshot]) -> dict[str, Watermark]:
    """Before snapshot expiry, per pipeline, the watermark its property must be set to (only pipelines
    whose property is missing or behind their tagged snapshots): once the tagged snapshots are gone,
    the property is what remains. From facts any reader returns."""
    pipelines = {k[len(PROPERTY_PREFIX):] for k in props if k.startswith(PROPERTY_PREFIX)}
    pipelines |= {s.summary[K_PIPELINE] for s in snapshots if K_PIPELINE in s.summary}
    needed = {}
    for p in sorted(pipelines):
        try:
            validate_pipeline(p)
        except Exception:
            continue
        wm = watermark_from(props, snapshots, p)
        if wm is not None and _newer(props.get(PROPERTY_PREFIX + p), wm):
            needed[p] = wm
    return needed


def _newer(current: str | None, wm: Watermark) -> bool:
    if current is None:
        return True
    have = Watermark.from_property(current)
    return not (have.batch >= wm.batch and have.offsets == wm.offsets and have.topic_ids == wm.topic_ids
                and have.restarts == wm.restarts)


def property_value(wm: Watermark) -> str:
    """``wm`` as its property value, checked against a narrow alphabet (it is written into SQL)."""
    return safe_value(wm.to_property())


def set_property(spark: SparkSession, table: str, pipeline: str, wm: Watermark) -> None:
    """Write ``wm`` into ``icetide.watermark.<pipeline>`` (values checked: nothing else reaches SQL)."""
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES "
              f"('{PROPERTY_PREFIX}{validate_pipeline(pipeline)}' = '{property_value(wm)}')")


def set_restarted(spark: SparkSession, table: str, pipeline: str, wm: Watermark, topics: dict[str, str | None],
                  run: str) -> None:
    """``wm`` (:meth:`Watermark.restarted` for ``topics``, each → the new topic's id or None) into
    the watermark property, and its marks of ``topics``, written by ``run``, into
    ``icetide.restarts.<pipeline>`` (the other topics' entries kept), in one commit. Only the
    pipeline calls this, when it sets a recreated topic aside: never a mirror."""
    name = validate_pipeline(pipeline)
    now = Restarts.parse(table_properties(spark, table).get(RESTARTS_PREFIX + name))
    marks = now.with_marks({t: wm.restarts[t] for t in topics}, dict(topics), run)
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{PROPERTY_PREFIX}{name}' = '{property_value(wm)}', "
              f"'{RESTARTS_PREFIX}{name}' = '{marks.value()}')")
