"""Right before each commit of a batch: what Kafka's retention deleted of its range since its probe.

Spark's reader skips what is gone (``on_data_loss: continue``), so a deletion racing a batch's read
would otherwise go unreported. The batch's probe (:class:`icetide.ingest.retention.RetentionProbe`)
asked before the read; :class:`Recheck` asks again before each commit and decides by what the batch
has read and committed so far. A batch reads Kafka once or twice: the one pass (its read is over
before its first commit), then, for what it left, the usual path (its cached read is over once
admission filled it: :meth:`Recheck.read_done`). A newly found deletion:

- once a recheck found nothing new while the batch's last read was over (``read_over``): it took
  records already read; they land, nothing is reported (chaos seed 1202);
- the cached read is over: what the cache does not hold of it is reported (:func:`minus_read`),
  no replay (a replay would throw a complete read away); exact, unless a one-pass commit of the
  batch landed before (its tables' records of the range landed inside the gap: wide);
- no cache yet, after a clean recheck (so after the one pass's read): its records landed; left to
  the usual path's read, which tells what it lost (when it is read, not at a commit: its records
  may all be gone);
- no clean recheck yet, no commit began: the batch is replayed once
  (:class:`~icetide.ingest.retention.RetentionRace`), every later commit of it raises too, and
  the replay's probe and read tell exactly what is gone (chaos seed 4327);
- otherwise (commits landed unchecked, or the batch's second race): reported wide, never silent.

A recheck that cannot ask Kafka (the broker restarting) asks again for up to ``wait_s``; still
blind, before any commit began, it replays the batch once unless its cached read holds the whole
planned range, and only if the batch's own probe could ask (a probe that never answers would replay
every batch for nothing) (chaos seed 1404: the one pass's commits landed blind and the deletion was
then reported wide). Commits of one batch run in parallel threads: one lock orders them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from icetide.ingest.retention import (
    Nexts,
    RetentionProbe,
    RetentionRace,
    TableLost,
    add_lost,
    beyond,
    describe_all,
    minus_read,
    read_spans,
    split_lost,
)
from icetide.ingest.source import Lost
from icetide.lake.offsets import BatchRanges, TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: How long a recheck asks again when Kafka does not answer (a broker restart) before it decides blind.
WAIT_S = 60.0


class Recheck:
    """Called right before each commit of one batch (:attr:`icetide.ingest.ledger.Ledger.before_commit`).
    ``lost``/``tables``: what the batch reports (filled in place); ``known``: what its probe found
    deleted before any read (told once the read is over, :meth:`read_done`); ``nexts``: the tables'
    watermarks before the batch (what they held then was never lost); ``forward``: one reader per
    Kafka partition (see :func:`minus_read`)."""

    def __init__(self, probe: RetentionProbe, ranges: BatchRanges, read: set[TopicPartition] | None, lost: Lost,
                 nexts: Nexts, may_replay: bool, tables: TableLost | None = None,
                 read_over: Callable[[], bool] = lambda: False,
                 report: Callable[[Lost, TableLost], None] = lambda common, tables: None,
                 known: Lost | None = None, answered: bool = True, forward: bool = True,
                 wait_s: float = WAIT_S) -> None:
        self.probe, self.ranges, self.read, self.lost, self.nexts = probe, ranges, read, lost, nexts
        self.report = report  # the alert, at once (before the commit this recheck guards)
        self.tables: TableLost = tables if tables is not None else {}
        self.known: Lost = dict(known if known is not None else lost)
        self.probed: Lost = dict(self.known)  # the probe's answer, told by read_done
        self.answered, self.forward, self.wait_s = answered, forward, wait_s
        self.may_replay, self.read_over, self.started, self.raced = may_replay, read_over, 0, False
        self.clean, self.clean_after_read = False, False
        self.deferred: Lost = {}  # found after the one pass's read, left to the usual path's
        self.cached: DataFrame | None = None
        self._lock = threading.Lock()

    def read_done(self, cached: DataFrame) -> None:
        """The usual path's cached read is over (before any of its commits): tell what the probe
        found and what was left to this read, without what it returned (chaos seed 1404: Spark's
        reader served records it fetched before the deletion, and a gap was reported over them)."""
        with self._lock:
            self.cached = cached
            if self.probed:
                self.lost.clear()
                self.tables.clear()
                self._tell(*split_lost(minus_read(self.probed, read_spans(cached, self.probed), self.forward),
                                       self.nexts), "before the pipeline read them (retention)")
            if self.deferred:
                self._tell(*split_lost(minus_read(self.deferred, read_spans(cached, self.deferred), self.forward),
                                       self.nexts), "while the batch read them")
                add_lost(self.known, self.deferred)
                self.deferred = {}

    def _replay(self, why: str) -> None:
        self.raced = True
        raise RetentionRace(f"{why}: replaying the batch, which reports what is gone")

    def _ask(self) -> Lost | None:
        asked = self.probe.ask(self.ranges, self.read)
        deadline = time.monotonic() + self.wait_s
        while asked is None and self.answered and time.monotonic() < deadline:
            time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
            asked = self.probe.ask(self.ranges, self.read)
        return asked

    def _whole(self) -> bool:
        """Whether the cached read holds every offset of the batch's planned range."""
        planned = {tp: r for tp, r in self.ranges.ranges.items() if r[1] > r[0]
                   and (self.read is None or tp in self.read)}
        spans = read_spans(self.cached, planned) if self.cached is not None else {}
        return self.cached is not None and all(spans.get(tp, (0, 0, 0))[2] == b - a for tp, (a, b) in planned.items())

    def __call__(self) -> None:
        with self._lock:
            if self.raced:
                raise RetentionRace("a commit of this batch found records Kafka deleted while it read them")
            over = self.read_over()  # asked first: a deletion seen now happened after the read if this is set
            asked = self._ask()
            if asked is None:  # no clean recheck (the review: it latched clean)
                if (self.may_replay and self.answered and self.started == 0 and not self.clean_after_read
                        and not self._whole()):
                    self._replay("Kafka could not be asked what it deleted of this batch while it read it")
                self.started += 1
                return
            new = beyond(beyond(asked, self.known), self.deferred)
            common, tables = split_lost(new, self.nexts)
            what = describe_all(common, tables)
            if not what:
                self.clean = True
                self.clean_after_read = self.clean_after_read or over
            elif self.clean_after_read:
                log.info("Kafka deleted records of the batch after it read them (%s): they land, nothing is lost",
                         what)
            elif self.cached is not None:  # what the cached read returned of it lands: the rest is lost
                add_lost(self.known, new)
                self._tell(*split_lost(minus_read(new, read_spans(self.cached, new), self.forward), self.nexts),
                           "while the batch read them")
            elif self.clean:  # after the one pass's read: its records land; the usual path's read tells
                add_lost(self.deferred, new)
            elif self.may_replay and self.started == 0:
                self._replay(f"Kafka deleted records of this batch while it read them ({what})")
            else:  # commits landed unchecked, or the batch's second race: wide, never silent
                add_lost(self.known, new)
                self._tell(common, tables, "while the batch read them")
            self.started += 1

    def _tell(self, common: Lost, tables: TableLost, when: str) -> None:
        what = describe_all(common, tables)
        if not what:
            return
        log.warning("Kafka deleted records %s; reported as lost: %s", when, what)
        add_lost(self.lost, common)
        for t, lost in tables.items():
            add_lost(self.tables.setdefault(t, {}), lost)
        self.report(common, tables)
