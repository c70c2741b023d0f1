"""Right before each commit of a batch, and once its last read is over: what Kafka's retention
deleted of its range since the batch's probe.

Spark's reader skips what is gone (``on_data_loss: continue``), so a deletion racing a batch's read
would otherwise go unreported. The batch's probe (:class:`icetide.ingest.retention.RetentionProbe`)
asked before the read; :class:`Recheck` asks again and decides by what the batch has read and
committed. A batch reads Kafka once or twice: the one pass (its read is over before its first
commit), then, for what it left, the usual path, whose cached read is over once admission filled
it (:meth:`Recheck.read_done`, before the usual path's commits).

- At the cached read's end: the probe's gap and every deletion since are told without what the
  cache holds (:func:`minus_read`: Spark's reader serves records it fetched before a deletion,
  chaos seed 1404); later deletions took records already read. When the one pass committed
  tables of the batch before, they hold their records: the gap is every other table's
  (``topic[p] for ns.table``: the dead letters and the tables the pipeline has written).
- Before a commit, no clean answer yet and nothing committed (the one pass's first commit): a
  deletion replays the batch once (:class:`~icetide.ingest.retention.RetentionRace`; every later
  commit of it raises too), and the replay's probe and read tell exactly what is gone (chaos seed
  4327). After a clean answer the one pass's read was complete: a deletion then is left to the
  usual path's read. A commit that landed unchecked (Kafka could not be asked), or a second race
  of the batch: reported at once, wide (never silent).
- A batch with no commit at all: asked once at its end (:meth:`finish`), what is gone is reported.

Kafka not answering (a broker restarting) is asked again for up to ``wait_s`` (once a batch);
still blind, before any commit, the batch is replayed once unless its cached read holds the rest of
its range, and only if the batch's own probe could ask (a probe that never answers would replay
every batch for nothing) (chaos seed 1404: the one pass's commits landed blind, and the deletion
was then reported wide, over 194 records that had landed). The one pass's tables are left out of a
gap only if a recheck answered after its read; the first answer after a blind end of the cached
read is told as it would have been then. Commits of one batch run in parallel threads: one lock
orders them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
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
    watermarks before the batch (what they held then was never lost); ``dead_letters``: the
    dead-letter table (namespace.table); ``forward``: one reader per Kafka partition (:func:`minus_read`)."""

    def __init__(self, probe: RetentionProbe, ranges: BatchRanges, read: set[TopicPartition] | None, lost: Lost,
                 nexts: Nexts, may_replay: bool, tables: TableLost | None = None,
                 read_over: Callable[[], bool] = lambda: False,
                 report: Callable[[Lost, TableLost], None] = lambda common, tables: None,
                 known: Lost | None = None, answered: bool = True, forward: bool = True,
                 dead_letters: str = "", wait_s: float = WAIT_S, asks: bool = True) -> None:
        self.probe, self.ranges, self.read, self.lost, self.nexts = probe, ranges, read, lost, nexts
        self.report = report  # the alert, at once (before the commit this recheck guards)
        self.tables: TableLost = tables if tables is not None else {}
        self.known: Lost = dict(known if known is not None else lost)
        self.probed: Lost = dict(self.known)  # the probe's answer, told by read_done
        self.answered, self.forward, self.dead_letters, self.wait_s = answered, forward, dead_letters, wait_s
        self.asks = asks  # on_data_loss: continue (read_done asks Kafka; with stop, Spark's read fails)
        self.may_replay, self.read_over, self.started, self.raced = may_replay, read_over, 0, False
        self.clean, self.clean_after_read = False, False
        self.deferred: Lost = {}  # found after the one pass's read, left to the usual path's
        self.cached: DataFrame | None = None
        self.committed: set[str] = set()  # tables the one pass committed before the cached read
        self._lock = threading.Lock()

    def read_done(self, cached: DataFrame, committed: Collection[str] = ()) -> None:
        """The usual path's cached read is over, before any of its commits (``committed``: the
        tables of the batch the one pass committed before it)."""
        with self._lock:
            # the one pass's tables hold their records of what is gone only if a recheck answered
            # after its read (third review: blind one-pass commits may lack some: wide then)
            self.cached, self.committed = cached, set(committed) if self.clean else set()
            if self.probed:  # the probe's gap: no one pass ran (it has no cache to tell by)
                self.lost.clear()
                self.tables.clear()
                self._tell(self._split(self._unread(self.probed)), "before the pipeline read them (retention)")
            asked = self._ask() if self.asks else None  # on_data_loss: stop: Spark's read fails instead
            gone = dict(self.deferred)
            add_lost(gone, beyond(beyond(asked or {}, self.known), gone))
            if gone:
                self._tell(self._split(self._unread(gone)), "while the batch read them")
                add_lost(self.known, gone)
                self.deferred = {}
            self.clean_after_read = asked is not None  # later deletions took records the cache holds

    def finish(self) -> None:
        """The batch is written. One that committed nothing (no recheck ran) is asked once: what
        Kafka deleted of its range, beyond what was told, was not read (nothing of it landed)."""
        with self._lock:
            if self.started or self.cached is not None or self.raced:
                return
            gone = beyond(beyond(self._ask() or {}, self.known), self.deferred)
            add_lost(gone, self.deferred)
            self._tell(split_lost(gone, self.nexts), "while the batch read them")

    def _unread(self, gone: Lost) -> Lost:
        """What of ``gone`` the cached read did not return (:func:`minus_read`)."""
        assert self.cached is not None
        return minus_read(gone, read_spans(self.cached, gone), self.forward)

    def _split(self, gone: Lost) -> tuple[Lost, TableLost]:
        """``gone`` as the gap it is: common and the tables' own parts (:func:`split_lost`), or, when
        the one pass committed tables of the batch before the read, every other table's part."""
        if not self.committed:
            return split_lost(gone, self.nexts)
        others = {t: offs for t, offs in self.nexts.items() if t not in self.committed}
        if self.dead_letters and self.dead_letters not in self.committed:
            others.setdefault(self.dead_letters, {})
        tables = {t: mine for t, offs in sorted(others.items())
                  if (mine := {tp: (max(a, offs.get(tp, a)), b) for tp, (a, b) in gone.items()
                               if b > max(a, offs.get(tp, a))})}
        return {}, tables

    def _replay(self, why: str) -> None:
        self.raced = True
        raise RetentionRace(f"{why}: replaying the batch, which reports what is gone")

    def _ask(self) -> Lost | None:
        asked = self.probe.ask(self.ranges, self.read)
        deadline = time.monotonic() + self.wait_s
        while asked is None and self.answered and time.monotonic() < deadline:
            time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
            asked = self.probe.ask(self.ranges, self.read)
        if asked is None:
            self.wait_s = 0.0  # one wait per batch: later asks try once (its commits would wait in turn)
        return asked

    def _whole(self) -> bool:
        """Whether the cached read holds the batch's range beyond what its probe found deleted."""
        if self.cached is None:
            return False
        rest = {tp: (max(a, self.known[tp][1]) if tp in self.known else a, b)
                for tp, (a, b) in self.ranges.ranges.items() if self.read is None or tp in self.read}
        rest = {tp: r for tp, r in rest.items() if r[1] > r[0]}
        return not self._unread(rest)

    def __call__(self) -> None:
        with self._lock:
            if self.raced:
                raise RetentionRace("a commit of this batch found records Kafka deleted while it read them")
            over = self.read_over()  # asked first: a deletion seen now happened after the read if this is set
            asked = None if self.clean_after_read and self.cached is not None else self._ask()
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
            elif self.cached is not None and not self.clean_after_read:  # read_done's ask was blind
                add_lost(self.known, new)
                self._tell(self._split(self._unread(new)),
                           "while the batch read them")
                self.clean_after_read = True
            elif self.clean_after_read:
                log.info("Kafka deleted records of the batch after it read them (%s): they land, nothing is lost",
                         what)
            elif self.clean and self.cached is None:  # after the one pass's read: the usual path's tells
                add_lost(self.deferred, new)
            elif self.may_replay and self.started == 0:
                self._replay(f"Kafka deleted records of this batch while it read them ({what})")
            else:  # a commit landed unchecked, or the batch's second race: at once, wide, never silent
                add_lost(self.known, new)
                self._tell((common, tables), "while the batch read them")
            self.started += 1

    def _tell(self, gap: tuple[Lost, TableLost], when: str) -> None:
        common, tables = gap
        what = describe_all(common, tables)
        if not what:
            return
        log.warning("Kafka deleted records %s; reported as lost: %s", when, what)
        add_lost(self.lost, common)
        for t, lost in tables.items():
            add_lost(self.tables.setdefault(t, {}), lost)
        self.report(common, tables)
