"""What Kafka's retention took from a batch before the pipeline read it, and who must be told.

A gap is a range of offsets of one partition. Retention deletes a partition's oldest records, so
what a batch's probe finds lost is a prefix of its planned range (what the read then returned of it
is taken out, :func:`minus_read`: a gap can also start inside it). A gap is *common* when no table holds
any record of it (every record of the range is lost), or *a table's* when other tables hold their
records of the range and this table does not (a batch a crash left partial): then the records
routed to that table, if any, are lost, and the report names it (``"topic[p] for ns.table"``).

A gap is what Kafka deleted *and the batch's read did not return*: Spark's Kafka reader keeps the
records it fetched past a batch's end for the next batch (its fetched-data cache), so a batch can
read records Kafka deleted after they were fetched; they land and are no loss (:func:`minus_read`).
"""

from __future__ import annotations

import logging
from functools import reduce
from typing import TYPE_CHECKING, Any

from icetide.config.source import KafkaSource
from icetide.errors import TransientError
from icetide.ingest.source import Lost, client_conf
from icetide.lake.offsets import BatchRanges, TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: per table (namespace.table), the part of a gap only its records lost
TableLost = dict[str, Lost]
#: per table, the next offset it needs of each partition (its watermark)
Nexts = dict[str, dict[TopicPartition, int]]


def lost_ranges(ranges: BatchRanges, low: dict[TopicPartition, int], read: set[TopicPartition] | None = None
                ) -> Lost:
    """Per partition, the part of a batch's planned range Kafka no longer holds: [start, oldest
    retained) cut at the range's end (retention deleted it before the pipeline read it). Only the
    partitions of ``read`` (None: all), those the query had a position in before this batch: a
    partition new to the query (added, or of a topic a pattern matches now) starts at its oldest
    retained record, and what retention deleted of it before was never the pipeline's to read."""
    out = {}
    for tp, (start, end) in sorted(ranges.ranges.items()):
        if read is not None and tp not in read:
            continue
        lo = low.get(tp)
        if lo is not None and end > start and lo > start:
            out[tp] = (start, min(lo, end))
    return out


#: per partition, (lowest, highest, how many) of the offsets a read returned in a range
Spans = dict[TopicPartition, tuple[int, int, int]]


def read_spans(rows: DataFrame, lost: Lost) -> Spans:
    """Per partition of ``lost``, what the batch's read returned of its range (one aggregate over
    ``rows``, the cached batch: Kafka is not read again)."""
    from pyspark.sql import functions as F

    if not lost:
        return {}
    off = F.col("_kafka_offset")
    cond = reduce(lambda x, y: x | y, [(F.col("_kafka_topic") == F.lit(t)) & (F.col("_kafka_partition") == F.lit(p))
                                       & (off >= F.lit(a)) & (off < F.lit(b)) for (t, p), (a, b) in lost.items()])
    got = (rows.where(cond).groupBy("_kafka_topic", "_kafka_partition")
           .agg(F.min(off), F.max(off), F.count(F.lit(1))).collect())
    return {(str(r[0]), int(r[1])): (int(r[2]), int(r[3]), int(r[4])) for r in got}


def minus_read(lost: Lost, spans: Spans, forward: bool = True) -> Lost:
    """``lost`` without what the read returned of it (``spans``), one range per partition (a gap
    may be reported wide, never short). ``forward``: one reader per partition
    (``source.min_partitions`` unset) reads up through the range; it returned [lowest, highest]
    (holes in between are taken for transaction markers or compacted records), and what is lost is
    below the lowest (a skip to the oldest retained offset) or above the highest (a skip past the
    range), or both: then the whole range (a second deletion during the read). With several
    readers per partition only one run without holes from either end of the range counts."""
    out = {}
    for tp, (a, b) in sorted(lost.items()):
        lo, hi, n = spans.get(tp, (a, a - 1, 0))
        run = forward or n == hi - lo + 1
        if n and run and lo <= a and hi + 1 < b:
            out[tp] = (hi + 1, b)
        elif n and run and hi + 1 >= b and lo > a:
            out[tp] = (a, lo)
        elif not (n and run and lo <= a and hi + 1 >= b):
            out[tp] = (a, b)
    return out


def above(lost: Lost, held: dict[TopicPartition, int]) -> Lost:
    """``lost`` without what the tables already hold (``held``: per partition, the highest offset
    any table of the pipeline holds)."""
    out = {}
    for tp, (a, b) in sorted(lost.items()):
        start = max(a, held.get(tp, a))
        if b > start:
            out[tp] = (start, b)
    return out


def beyond(lost: Lost, reported: Lost) -> Lost:
    """What of ``lost`` is not already in ``reported`` (both per partition, [start, end))."""
    return above(lost, {tp: b for tp, (_, b) in reported.items()})


def describe_lost(lost: Lost) -> str:
    return ", ".join(f"{t}[{p}] offsets {a}-{b - 1} ({b - a} records)" for (t, p), (a, b) in sorted(lost.items()))


class RetentionRace(TransientError):
    """Kafka deleted records of a batch's range while the batch read them (after its probe), or
    could not be asked, before any of its commits began: the batch is replayed, and its probe and
    read then report exactly what is gone (:class:`icetide.ingest.recheck.Recheck`)."""

    replays_batch = True  # not a commit conflict: retrying the commit would not help


def add_lost(lost: Lost, new: Lost) -> None:
    """Extend ``lost`` by ``new`` in place (a range that continues a reported one joins it)."""
    for tp, (a, b) in new.items():
        lost[tp] = (lost[tp][0], max(b, lost[tp][1])) if tp in lost else (a, b)


def split_lost(lost: Lost, nexts: Nexts) -> tuple[Lost, TableLost]:
    """``lost`` parted into what no table holds (``above`` the highest watermark: every record of it
    is lost) and, per table whose watermark lies below that (a batch a crash left partial: other
    tables committed it), the part it lacks, from its own watermark or the range's start: the
    records of it routed to that table, if any, are lost. Which tables a partial batch had records
    for is not recorded, so every table below the highest watermark gets its part (a table without
    records there loses nothing, and its part says "may")."""
    top: dict[TopicPartition, int] = {}
    for offs in nexts.values():
        for tp, off in offs.items():
            top[tp] = max(top.get(tp, -1), off)
    common, tables = above(lost, top), {}
    for table, offs in sorted(nexts.items()):
        mine = {}
        for tp, (a, b) in sorted(lost.items()):
            lo, hi = max(a, offs.get(tp, a)), min(b, top.get(tp, a))
            if hi > lo:
                mine[tp] = (lo, hi)
        if mine:
            tables[table] = mine
    return common, tables


def gap_keys(common: Lost, tables: TableLost | None = None) -> dict[str, list[int]]:
    """Gaps as reported (batch event, counters, batch log, alerts): ``"topic[p]"`` → [from, to),
    and ``"topic[p] for ns.table"`` for a table's part."""
    out = {f"{t}[{p}]": [a, b] for (t, p), (a, b) in sorted(common.items())}
    for table, lost in sorted((tables or {}).items()):
        out.update({f"{t}[{p}] for {table}": [a, b] for (t, p), (a, b) in sorted(lost.items())})
    return out


def parse_gap_key(key: str) -> tuple[str, str | None]:
    """``"topic[p] for ns.table"`` → ("topic[p]", "ns.table"); a common gap's table is None."""
    tp, sep, table = key.partition(" for ")
    return tp, (table if sep else None)


def describe_tables(tables: TableLost) -> str:
    return "; ".join(f"records routed to {t}, if any, of {describe_lost(lost)}" for t, lost in sorted(tables.items()))


def data_loss_message(pipeline: str, what: str, held: TableLost | None = None, replay: bool = False,
                      written: list[str] | None = None) -> str:
    """``on_data_loss: stop``'s reason. ``held``: the batch is a replay some tables hold part of, these
    may lack theirs; ``replay``: a replay every table holds (Spark's read fails for such a part too,
    so the stop mode stops for it: ``continue`` goes on); ``written``: the tables the batch's one pass
    committed before Spark's read of the rest failed (they hold the batch; the others nothing of it)."""
    if written and not held and not replay:
        return (f"source.on_data_loss: Kafka deleted records pipeline '{pipeline}' was reading ({what}). This "
                f"batch is already in {', '.join(written)} (written in one pass before the rest was read); the "
                "other tables and the dead letters have nothing of it. To go on, set source.on_data_loss: continue "
                "(what is gone is reported as a gap of each other table; producing the records again would land "
                "them twice in the tables named)")
    if held:
        return (f"source.on_data_loss: Kafka deleted records of a batch pipeline '{pipeline}' replays after a "
                f"crash ({what}; may lack part of it: {describe_tables(held)}). To go on, set "
                "source.on_data_loss: continue (what may be lost is reported as a gap); to keep records no table "
                "holds, produce them to the topic again first")
    if replay:
        return (f"source.on_data_loss: Kafka deleted records of a batch pipeline '{pipeline}' replays after a "
                f"crash ({what}), and its probe found none beyond what every table holds. To go on, set "
                "source.on_data_loss: continue")
    return (f"source.on_data_loss: Kafka no longer holds records pipeline '{pipeline}' had not read (its retention "
            f"deleted them): {what}. Nothing of this batch was written. To skip them and go on, set "
            "source.on_data_loss: continue (the gap is logged and counted); to keep them, produce them to the "
            "topic again first")


def stop_message(pipeline: str, common: Lost, tables: TableLost) -> str:
    """The stop mode's reason for a batch's probe that found records no table holds."""
    if tables:  # a partial replay too
        return data_loss_message(pipeline, f"lost: {describe_lost(common)}; nothing of this batch was written", tables)
    return data_loss_message(pipeline, describe_lost(common))


def describe_all(common: Lost, tables: TableLost) -> str:
    return "; ".join(x for x in (describe_lost(common), describe_tables(tables)) if x)


class RetentionProbe:
    """The oldest offset Kafka retains per partition, from one admin client kept for the run (one
    ``ListOffsets`` request for all of a batch's partitions: a batch asks before it reads, and again
    before each commit, :class:`icetide.ingest.recheck.Recheck`)."""

    def __init__(self, src: KafkaSource) -> None:
        self.src = src
        self._admin: Any = None

    def ask(self, ranges: BatchRanges, read: set[TopicPartition] | None = None) -> Lost | None:
        """What of ``ranges`` Kafka no longer holds (``read``: see :func:`lost_ranges`), or None when
        Kafka could not be asked (a recheck must not take that for "nothing deleted")."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        tps = [tp for tp, (start, end) in ranges.ranges.items() if end > start and (read is None or tp in read)]
        if not tps:
            return {}
        try:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient({**client_conf(self.src), "log_level": 0})
            asked = self._admin.list_offsets({KafkaTopicPartition(t, p): OffsetSpec.earliest() for t, p in tps},
                                             request_timeout=10)
            low = {(k.topic, k.partition): int(f.result(15).offset) for k, f in asked.items()}
        except Exception:  # the read itself will tell; a probe never fails a batch
            self.close()
            return None
        return lost_ranges(ranges, low, read)

    def close(self) -> None:
        self._admin = None  # an AdminClient has no close(): dropping it stops its threads


