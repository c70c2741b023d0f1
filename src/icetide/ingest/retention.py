"""What Kafka's retention took from a batch before the pipeline read it, and who must be told.

A gap is a range of offsets of one partition. Retention deletes a partition's oldest records, so
what a batch lost is always a prefix of its planned range. A gap is *common* when no table holds
any record of it (every record of the range is lost), or *a table's* when other tables hold their
records of the range and this table does not (a batch a crash left partial): then the records
routed to that table, if any, are lost, and the report names it (``"topic[p] for ns.table"``).

A gap is what Kafka deleted *and the batch's read did not return*: Spark's Kafka reader keeps the
records it fetched past a batch's end for the next batch (its fetched-data cache), so a batch can
read records Kafka deleted after they were fetched; they land and are no loss (:func:`minus_read`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
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


def minus_read(lost: Lost, spans: Spans) -> Lost:
    """``lost`` without what the read returned of it (``spans``). Of a range retention deleted, a read
    returns a run from its start (records Spark's reader fetched before the deletion), then skips to
    the oldest retained: what is left is the range's end. A read that is not one run from either
    end of the range leaves it whole: a gap may be reported wide, never short."""
    out = {}
    for tp, (a, b) in sorted(lost.items()):
        lo, hi, n = spans.get(tp, (a, a - 1, 0))
        if n == 0 or n != hi - lo + 1:
            out[tp] = (a, b)
        elif lo == a:
            if hi + 1 < b:
                out[tp] = (hi + 1, b)
        elif hi == b - 1:
            out[tp] = (a, lo)
        else:
            out[tp] = (a, b)
    return out


def after_read(batch_id: int, rows: DataFrame, lost: Lost, before: Nexts, common: Lost, tables: TableLost
               ) -> bool:
    """A batch's probe found ``lost`` (``before``: the tables' watermarks then); its read is over
    (``rows``: the cached batch). Fills ``common`` and ``tables`` (in place: the batch's
    :class:`Recheck` adds to them) with what is lost: what the read did not return (chaos seed
    1404: Spark's reader served records it fetched before the deletion, and a gap was reported
    over them). Whether anything is (logged; the caller alerts)."""
    found = split_lost(minus_read(lost, read_spans(rows, lost)), before)
    common.clear()
    tables.clear()
    common.update(found[0])
    tables.update(found[1])
    if common or tables:
        log.warning("Kafka deleted records before the pipeline read them (retention); going on from the oldest "
                    "still there (source.on_data_loss: continue). Lost in batch %s: %s", batch_id,
                    describe_all(common, tables))
    return bool(common or tables)


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
    """Kafka deleted records of a batch's range while the batch read them (after its probe), before
    any of its commits began: the batch is replayed, and its probe then reports exactly what is gone."""

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


def data_loss_message(pipeline: str, what: str, held: TableLost | None = None, replay: bool = False) -> str:
    """``on_data_loss: stop``'s reason. ``held``: the batch is a replay some tables hold part of, these
    may lack theirs; ``replay``: a replay every table holds (Spark's read fails for such a part too,
    so the stop mode stops for it: ``continue`` goes on)."""
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


class Recheck:
    """Right before each commit of one batch (:attr:`icetide.ingest.ledger.Ledger.before_commit`):
    what Kafka deleted of the batch's range since its probe (``known``: what the probe found).

    Spark's reader skips what is gone (``on_data_loss: continue``), so a deletion racing a read
    would otherwise go unreported. Once a recheck found nothing new while the batch's read was over
    (``read_over``: no write left reads Kafka again), a later deletion took records already read:
    they land, nothing is reported. Before that, a deletion may have been skipped by a read, and
    only a replay can tell which records its read returned: once per batch (``may_replay``), it
    raises :class:`RetentionRace` and every later commit of the batch raises too (the replay's
    probe, and what its read returns, report exactly what is gone; what a commit of the batch had
    landed stays, the replay skips it). So does a recheck that could not ask Kafka (its commit
    would land a read no one checked). On a batch's second race, the new deletion is reported
    wide (it may include records the read returned). ``nexts``: the tables' watermarks before the
    batch (what they held then was never lost). Commits of one batch run in parallel threads: one
    lock orders them."""

    def __init__(self, probe: RetentionProbe, ranges: BatchRanges, read: set[TopicPartition] | None, lost: Lost,
                 nexts: Nexts, may_replay: bool, tables: TableLost | None = None,
                 read_over: Callable[[], bool] = lambda: False,
                 report: Callable[[Lost, TableLost], None] = lambda common, tables: None,
                 known: Lost | None = None, answered: bool = True) -> None:
        self.probe, self.ranges, self.read, self.lost, self.nexts = probe, ranges, read, lost, nexts
        self.report = report  # the alert, at once (before the commit this recheck guards)
        self.tables: TableLost = tables if tables is not None else {}
        #: what Kafka had deleted of the range when the batch was probed (before any read); a
        #: recheck that cannot ask Kafka replays the batch only if its probe could (a probe that never
        #: answers, a client misconfigured for the admin API, would replay every batch for nothing)
        self.known: Lost = dict(known if known is not None else lost)
        self.answered = answered
        self.may_replay, self.read_over, self.started, self.raced = may_replay, read_over, 0, False
        self.clean_after_read = False
        self._lock = threading.Lock()

    def _replay(self, why: str) -> None:
        self.raced = True
        raise RetentionRace(f"{why}: replaying the batch, which reports what is gone")

    def __call__(self) -> None:
        with self._lock:
            if self.raced:
                raise RetentionRace("a commit of this batch found records Kafka deleted while it read them")
            over = self.read_over()  # asked first: a deletion seen now happened after the read if this is set
            asked = self.probe.ask(self.ranges, self.read)
            if asked is None:  # Kafka could not be asked: no clean recheck (the review: it latched clean)
                if self.may_replay and self.answered and not self.clean_after_read:  # seed 1404: blind, then wide
                    self._replay("Kafka could not be asked what it deleted of this batch while it read it")
                self.started += 1
                return
            new = beyond(asked, self.known)
            common, tables = split_lost(new, self.nexts)
            what = describe_all(common, tables)
            if not what:
                self.clean_after_read = self.clean_after_read or over
            elif self.clean_after_read:
                log.info("Kafka deleted records of the batch after it read them (%s): they land, nothing is lost",
                         what)
            elif self.may_replay:
                self._replay(f"Kafka deleted records of this batch while it read them ({what})")
            else:
                log.warning("Kafka deleted records of the batch while it read them; reported as lost: %s", what)
                add_lost(self.known, new)
                add_lost(self.lost, common)
                for t, lost in tables.items():
                    add_lost(self.tables.setdefault(t, {}), lost)
                self.report(common, tables)
            self.started += 1


class RetentionProbe:
    """The oldest offset Kafka retains per partition, from one admin client kept for the run (one
    ``ListOffsets`` request for all of a batch's partitions: a batch asks before it reads, and again
    before each commit, :class:`Recheck`)."""

    def __init__(self, src: KafkaSource) -> None:
        self.src = src
        self._admin: Any = None

    def lost(self, ranges: BatchRanges, read: set[TopicPartition] | None = None) -> Lost:
        """What of ``ranges`` Kafka no longer holds (empty when it could not be asked); ``read``: see
        :func:`lost_ranges`."""
        return self.ask(ranges, read) or {}

    def ask(self, ranges: BatchRanges, read: set[TopicPartition] | None = None) -> Lost | None:
        """:meth:`lost`, or None when Kafka could not be asked (a recheck must not take that for
        "nothing deleted")."""
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


