"""The exactly-once ledger's arithmetic (the real-stack tests prove it end to end)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from icetide.lake.offsets import BatchRanges, Watermark, commit_properties, pack, resume_offsets, unpack


def test_roundtrip_summary_and_property() -> None:
    ranges = BatchRanges({("t", 0): (10, 20), ("t", 1): (5, 9), ("u", 0): (3, 3)}, planned_at_ms=2000)
    props = commit_properties("p1", "run1", 7, ranges)
    wm = Watermark.from_summary(props, committed_at_ms=42)
    # a snapshot carries its own batch: the ends of its non-empty ranges
    assert wm.offsets == {("t", 0): 20, ("t", 1): 9}
    ranges = BatchRanges({("t", 0): (10, 20), ("t", 1): (5, 9)}, planned_at_ms=2000)
    assert wm.batch == 7 and wm.run == "run1"
    assert wm.batch_ranges is not None and wm.batch_ranges.ranges == ranges.ranges
    again = Watermark.from_property(wm.to_property())
    assert again.offsets == wm.offsets and again.batch == 7 and again.committed_at_ms == 42
    assert props["icetide.batch-planned-at-ms"] == "2000"


def test_covers_and_advanced() -> None:
    wm = Watermark({("t", 0): 20})
    assert wm.covers(BatchRanges({("t", 0): (10, 20)}))
    assert not wm.covers(BatchRanges({("t", 0): (10, 21)}))
    assert not wm.covers(BatchRanges({("t", 1): (0, 1)}))
    assert wm.advanced(BatchRanges({("t", 0): (20, 30), ("t", 1): (0, 4)})) == {("t", 0): 30, ("t", 1): 4}
    # never moves backwards
    assert wm.advanced(BatchRanges({("t", 0): (0, 5)})) == {("t", 0): 20}


def test_resume_from_newest_partial_batch() -> None:
    # Table A committed batch 8 (covering [100,150) of p0); B crashed before it, holds batch 7.
    a = Watermark({("t", 0): 150, ("t", 1): 70}, batch=8, committed_at_ms=2000,
                  batch_ranges=BatchRanges({("t", 0): (100, 150)}))
    b = Watermark({("t", 0): 100, ("t", 1): 80}, batch=7, committed_at_ms=1000,
                  batch_ranges=BatchRanges({("t", 0): (90, 100), ("t", 1): (60, 80)}))
    # p0 restarts at batch 8's start (B may miss it); p1 at the highest watermark (complete).
    assert resume_offsets([a, b]) == {("t", 0): 100, ("t", 1): 80}
    assert resume_offsets([]) == {}


def test_empty_ranges_are_covered_and_never_stored() -> None:
    wm = Watermark({("t", 0): 20})
    assert wm.covers(BatchRanges({("t", 0): (20, 20), ("t", 9): (0, 0)}))
    assert "t" in BatchRanges({("t", 0): (20, 21)}).stored()
    assert BatchRanges({("t", 0): (5, 5)}).stored() == "{}"


def test_a_watermark_folds_snapshots_and_legacy_cumulative_summaries() -> None:
    older = commit_properties("p", "r", 1, BatchRanges({("t", 0): (0, 10), ("t", 1): (0, 4)}))
    newer = commit_properties("p", "r", 2, BatchRanges({("t", 0): (10, 15)}))
    legacy = {"icetide.pipeline": "p", "icetide.run": "r0", "icetide.batch": "0",
              "icetide.watermark": '{"t":{"2":7}}', "icetide.batch-offsets": '{"t":{"2":[0,7]}}'}
    wm = Watermark.from_summary(newer)
    for summary in (older, legacy):
        wm.fold(Watermark.from_summary(summary).offsets)
    assert wm.offsets == {("t", 0): 15, ("t", 1): 4, ("t", 2): 7}
    assert (wm.run, wm.batch) == ("r", 2)
    wm.fold({("t", 0): 3})  # never moves back
    assert wm.get(("t", 0)) == 15


def test_many_partitions_are_packed_small_and_round_trip() -> None:
    import random

    rng = random.Random(5)
    ranges = BatchRanges({("events", p): (s := rng.randrange(10**9, 10**10), s + rng.randrange(1, 5000))
                          for p in range(1000)})
    stored = ranges.stored()
    plain = ranges.encode()
    assert stored.startswith("z1:") and len(stored) < len(plain) * 0.6, (len(stored), len(plain))
    assert BatchRanges.decode(stored).ranges == ranges.ranges
    assert unpack(pack("short")) == "short" and pack("short") == "short"


def test_a_small_batch_from_many_kafka_partitions_is_read_by_fewer_tasks() -> None:
    from icetide.config.source import KafkaSource
    from icetide.ingest.source import batch_tasks

    src = KafkaSource(bootstrap_servers="k:9092", topics=["t"], records_per_task=1000)
    twelve = {("t", p): (100, 100 + 300) for p in range(12)}  # 3,600 records over 12 partitions
    assert BatchRanges(twelve).records() == 3600
    assert batch_tasks(src, BatchRanges(twelve), cores=1) == 4
    assert batch_tasks(src, BatchRanges(twelve), cores=3) == 6  # two full waves, not one and a third
    assert batch_tasks(src, BatchRanges(twelve), cores=8) == 8  # one wave on 8 cores
    assert batch_tasks(src, BatchRanges(twelve), cores=16) is None  # 16 wanted: the 12 partitions will do
    small = {("t", p): (0, 80) for p in range(12)}  # 960 records: one task, however many cores
    assert batch_tasks(src, BatchRanges(small), cores=8) == 1
    # never more tasks than partitions with records; empty partitions do not count
    sparse = {("t", 0): (0, 50_000), ("t", 1): (7, 7), ("t", 2): (0, 10)}
    assert batch_tasks(src, BatchRanges(sparse), cores=2) is None  # 2 busy partitions, 51 tasks wanted: leave Spark's 2
    assert batch_tasks(src, BatchRanges({("t", 0): (5, 5)}), cores=2) is None  # nothing to read
    assert batch_tasks(KafkaSource(bootstrap_servers="k:9092", topics=["t"], records_per_task=None),
                       BatchRanges(twelve), cores=2) is None
    assert batch_tasks(KafkaSource(bootstrap_servers="k:9092", topics=["t"], min_partitions=24),
                       BatchRanges(twelve), cores=2) is None  # the user asked for Spark's split
    assert batch_tasks(KafkaSource(bootstrap_servers="k:9092", topics=["t"]), BatchRanges(twelve), cores=2) == 1


def test_the_mirror_before_expiry_folds_only_current_ancestors_and_skips_what_is_current() -> None:
    from icetide.lake.offsets import PROPERTY_PREFIX, mirrors_needed, property_value
    from icetide.lake.tables import snapshots_of

    b1 = commit_properties("p", "r", 1, BatchRanges({("t", 0): (0, 10), ("t", 1): (0, 4)}))
    b2 = commit_properties("p", "r", 2, BatchRanges({("t", 0): (10, 15)}))
    stray = commit_properties("p", "x", 9, BatchRanges({("t", 0): (15, 99)}))  # not an ancestor of current
    hostile = {**b2, "icetide.pipeline": "p'; DROP TABLE t"}
    snaps = [(1, None, b1), (2, 1, b2), (3, 2, {"operation": "replace"}), (4, 1, stray), (5, None, hostile)]
    meta = {"current-snapshot-id": 3, "properties": {},
            "snapshots": [{"snapshot-id": i, "parent-snapshot-id": parent, "timestamp-ms": 1000 * i,
                           "summary": {"operation": "append", **summary}} for i, parent, summary in snaps]}
    parsed = {s.snapshot_id: s.ancestry for s in snapshots_of(meta)}
    assert parsed == {1: 2, 2: 1, 3: 0, 4: None, 5: None}

    needed = mirrors_needed(meta["properties"], snapshots_of(meta))
    assert list(needed) == ["p"]  # the hostile name is never written
    assert needed["p"].offsets == {("t", 0): 15, ("t", 1): 4} and needed["p"].batch == 2

    meta["properties"] = {PROPERTY_PREFIX + "p": property_value(needed["p"])}
    assert mirrors_needed(meta["properties"], snapshots_of(meta)) == {}  # already mirrored: no commit


def test_item9_lost_ranges_are_the_part_of_a_batch_kafka_no_longer_holds() -> None:
    from icetide.ingest.retention import describe_lost, lost_ranges

    ranges = BatchRanges({("t", 0): (100, 200), ("t", 1): (50, 60), ("t", 2): (10, 10), ("u", 0): (0, 5)})
    low = {("t", 0): 150, ("t", 1): 80, ("t", 2): 99, ("u", 0): 0}
    lost = lost_ranges(ranges, low)
    # partition 1 lost its whole range (and more that no batch planned); an empty range loses nothing
    assert lost == {("t", 0): (100, 150), ("t", 1): (50, 60)}
    assert describe_lost(lost) == "t[0] offsets 100-149 (50 records), t[1] offsets 50-59 (10 records)"
    assert lost_ranges(ranges, {}) == {}
    # a batch replayed after its commits: what the tables hold is not lost
    from icetide.ingest.retention import above

    assert above(lost, {("t", 0): 120, ("t", 1): 70}) == {("t", 0): (120, 150)}
    assert above(lost, {}) == lost
    # #41, hole 5: a partition new to the query (no position before the batch) lost nothing
    assert lost_ranges(ranges, low, read={("t", 0), ("u", 0)}) == {("t", 0): (100, 150)}


def test_chaos_4327_what_retention_deletes_while_the_batch_reads_is_never_silent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Chaos seed 4327: the probe ran before retention cut the whole of batch 0's range on one topic;
    Spark's reader then skipped it (on_data_loss: continue) and nothing was reported. Right before each
    commit the probe is asked again: a race replays the batch once (its probe then reports exactly
    what is gone) and no later commit of it lands; once a clean recheck found the read over, the
    batch had read it all (nothing lost); on the batch's second race, it is reported."""
    import pytest

    from icetide.errors import is_commit_conflict
    from icetide.ingest import recheck as rc
    from icetide.ingest.recheck import Recheck
    from icetide.ingest.retention import RetentionRace, add_lost, beyond, lost_ranges

    # what the usual path's cached read returned (Spark is not here): per partition (low, high, count)
    spans: dict[tuple[str, int], tuple[int, int, int]] = {}
    monkeypatch.setattr(rc, "read_spans", lambda cached, lost: {tp: v for tp, v in spans.items() if tp in lost})

    ranges = BatchRanges({("a", 0): (0, 748), ("a", 1): (0, 760), ("b", 0): (0, 535)})

    class Probe:
        def __init__(self, low: dict[tuple[str, int], int]) -> None:
            self.low = low

        def ask(self, r: BatchRanges, read: object = None) -> dict[tuple[str, int], tuple[int, int]] | None:
            return None if self.low is None else lost_ranges(r, self.low)

    assert beyond({("a", 0): (0, 748), ("a", 1): (0, 500)}, {("a", 0): (0, 300)}) == {("a", 0): (300, 748),
                                                                                  ("a", 1): (0, 500)}
    reported = {("a", 0): (0, 300)}
    add_lost(reported, {("a", 0): (300, 748), ("b", 0): (0, 5)})
    assert reported == {("a", 0): (0, 748), ("b", 0): (0, 5)}  # a continued range joins the reported one

    held: dict[str, dict[tuple[str, int], int]] = {}  # the tables' watermarks before the batch
    raced = Probe({("a", 0): 1087, ("a", 1): 1130, ("b", 0): 0})
    lost: dict[tuple[str, int], tuple[int, int]] = {}
    Recheck(Probe({("a", 0): 0, ("a", 1): 0, ("b", 0): 0}), ranges, None, lost, held, True)()
    assert lost == {}
    check = Recheck(raced, ranges, None, lost, held, True)
    with pytest.raises(RetentionRace, match=r"a\[0\] offsets 0-747 \(748 records\)") as e:
        check()
    assert not is_commit_conflict(e.value), "a race is not retried as a commit conflict"
    with pytest.raises(RetentionRace):  # the batch's other commits (other threads) land nothing either
        check()
    # already reported by the batch's own probe: nothing new, no replay
    Recheck(raced, ranges, None, {("a", 0): (0, 748), ("a", 1): (0, 760)}, held, True)()
    # a replay of a batch whose tables hold it all: nothing lost, so no endless replays
    Recheck(raced, ranges, None, {}, {"ns.t": {("a", 0): 748, ("a", 1): 760}}, True)()
    # a replay of a batch one table committed and another did not: the other's records may be lost
    with pytest.raises(RetentionRace, match=r"records routed to ns.u, if any, of a\[0\] offsets 0-747"):
        Recheck(raced, ranges, None, {}, {"ns.t": {("a", 0): 748, ("a", 1): 760},
                                          "ns.u": {("a", 0): 0, ("a", 1): 0}}, True)()
    # chaos seed 1202: once a recheck found nothing new after the batch's read was over, what Kafka
    # deletes later was read and lands: no gap (it was reported wide, over 5,435 records that landed)
    lost, over = {}, [True]
    later = Recheck(Probe({("a", 0): 0, ("a", 1): 0, ("b", 0): 0}), ranges, None, lost, held, True,
                    read_over=lambda: over[0])
    later()
    later.probe = raced
    later()
    assert lost == {} and not later.raced
    nothing = {("a", 0): 0, ("a", 1): 0, ("b", 0): 0}
    whole = {("a", 0): (0, 748), ("a", 1): (0, 760)}
    cache = cast(Any, "the usual path's cached batch")
    # the review: the one pass committed a table (a clean recheck, after its read), then a deletion;
    # the usual path reads the batch from Kafka again (records left to it). Chaos seed 1404: reported
    # wide at once, it covered records the one pass had landed; now the one pass's commits land and
    # the usual path's read, once over, tells what it did not return, as the gap of every table but
    # those the one pass committed (they hold their records of it)
    two = {"ns.t1": {("a", 0): 0, ("a", 1): 0}, "ns.t2": {("a", 0): 0, ("a", 1): 0}}
    lost, tables, alerted = {}, {}, []
    again = Recheck(Probe(nothing), ranges, None, lost, two, True, tables, wait_s=0, dead_letters="ns.dlq",
                    report=lambda c, t: alerted.append((dict(c), dict(t))))
    again()  # the one pass's first commit: clean
    again.probe = raced
    again()  # its second: the deletion came after its read
    assert lost == {} and alerted == [] and not again.raced and again.deferred == whole
    spans.update({("a", 0): (0, 299, 300)})  # Spark's reader served a[0] 0-299 from its fetched-data cache
    again.read_done(cache, ["ns.t1"])
    rest = {("a", 0): (300, 748), ("a", 1): (0, 760)}
    assert lost == {} and tables == {"ns.t2": rest, "ns.dlq": rest} and alerted == [({}, tables)]
    again()  # the usual path's commit: nothing new
    assert len(alerted) == 1
    # the third review: a one-pass commit that landed unchecked (Kafka not answering) may lack records
    # of a deletion found later: then the gap is wide (common), not only the other tables'
    blind = Probe(None)  # type: ignore[arg-type]
    lost, tables = {}, {}
    unchecked = Recheck(blind, ranges, None, lost, two, True, tables, wait_s=0, dead_letters="ns.dlq",
                        answered=False)
    unchecked()  # t1's commit, blind (the batch's probe was blind too: no replay)
    unchecked.probe = raced
    unchecked.read_done(cache, ["ns.t1"])
    assert lost == rest and tables == {}
    # ... and when the cached read's own ask was blind, the first answer after it is told as it
    # would have been (not wide, no replay of a complete read)
    lost, tables = {}, {}
    late_answer = Recheck(Probe(nothing), ranges, None, lost, two, True, tables, wait_s=0, dead_letters="ns.dlq")
    late_answer()  # t1's commit: clean
    late_answer.probe = blind
    late_answer.read_done(cache, ["ns.t1"])
    assert not late_answer.clean_after_read
    late_answer.probe = raced
    late_answer()  # the usual path's commit
    assert lost == {} and tables == {"ns.t2": rest, "ns.dlq": rest} and late_answer.clean_after_read
    # a deletion found when the cached read is over (no commit yet): what the cache holds lands, the
    # rest is reported, no replay (a replay would throw a complete read away: the review); later
    # deletions took records the cache holds
    lost = {}
    cached = Recheck(raced, ranges, None, lost, held, True, wait_s=0)
    cached.read_done(cache)
    assert lost == rest and not cached.raced and cached.clean_after_read
    cached()
    # the batch's own probe found the deletion: told when the read is over, without what it returned
    # (chaos seed 1404: 93 records landed inside a gap the probe reported before the read)
    lost, alerted = dict(whole), []
    probed = Recheck(raced, ranges, None, lost, held, True, known=dict(whole), wait_s=0,
                     report=lambda c, t: alerted.append(dict(c)))
    spans[("a", 1)] = (0, 759, 760)
    probed.read_done(cache)
    assert lost == {("a", 0): (300, 748)} and alerted == [lost]  # chaos seed 1301: before the commits
    probed()  # the probe's deletion is not new to its rechecks, though the read returned part of it
    assert lost == {("a", 0): (300, 748)} and not probed.raced
    spans.clear()
    # a batch that committed nothing (retention took its whole range before its one read) is asked
    # at its end (the second review: no recheck ran, nothing was reported)
    lost = {}
    empty = Recheck(Probe(nothing), ranges, None, lost, held, True, wait_s=0)
    empty.probe = raced
    empty.finish()
    assert lost == whole
    # the batch raced once already: its replay reports (wide) instead of replaying again, and the
    # alert goes out when the gap is found, before the commit it guards
    lost, alerted = {}, []
    Recheck(raced, ranges, None, lost, held, False, report=lambda c, t: alerted.append(dict(c)))()
    assert lost == whole and alerted == [lost]
    # the second review: a recheck that could not ask Kafka (a broker restarting, asked again for
    # ``wait_s``) is not a clean one. Chaos seed 1404: the one pass's commits landed blind, then the
    # deletion was reported wide; now a blind recheck before any commit replays the batch (once)
    lost = {}
    unsure = Recheck(blind, ranges, None, lost, held, True, read_over=lambda: True, wait_s=0)
    with pytest.raises(RetentionRace, match="could not be asked"):
        unsure()
    assert not unsure.clean_after_read
    # not when the batch's own probe could not ask either (a client misconfigured for the admin API
    # would replay every batch for nothing), nor when the cached read holds the whole planned range
    Recheck(blind, ranges, None, {}, held, True, read_over=lambda: True, answered=False, wait_s=0)()
    spans.update({("a", 0): (0, 747, 748), ("a", 1): (0, 759, 760), ("b", 0): (0, 534, 535)})
    complete = Recheck(blind, ranges, None, {}, held, True, read_over=lambda: True, wait_s=0)
    complete.read_done(cache)
    complete()
    assert not complete.raced
    spans.clear()
    # on the batch's replay a blind recheck lets the commit land, and a deletion found later is
    # reported (wide), never silent
    replayed = Recheck(blind, ranges, None, lost, held, False, read_over=lambda: True, wait_s=0)
    replayed()
    replayed.probe = raced
    replayed()
    assert lost == whole
    # a blind recheck after a clean one while the read was over: what Kafka deletes later was read
    late = Recheck(Probe(nothing), ranges, None, {}, held, True, read_over=lambda: True, wait_s=0)
    late()
    late.probe = blind
    late()
    assert not late.raced


def test_chaos_1404_a_gap_is_what_kafka_deleted_and_the_read_did_not_return() -> None:
    """Chaos seed 1404: Spark's Kafka reader keeps the records it fetched past a batch's end for the
    next batch; Kafka then deleted them, the next batch's probe reported them lost, and its read
    returned them: 93 records landed inside the gap. What the read returned is taken out."""
    from icetide.ingest.retention import minus_read

    lost = {("a", 0): (100, 150), ("a", 1): (10, 20), ("a", 2): (0, 30), ("a", 3): (5, 9), ("a", 4): (0, 40),
            ("a", 5): (0, 50)}
    spans = {("a", 0): (100, 115, 16),  # a run from the start (the reader's cache), then a skip: the rest is lost
             ("a", 1): (10, 19, 10),  # all of it read: nothing lost
             ("a", 2): (10, 29, 20),  # a skip to the oldest retained first: the start is lost
             ("a", 4): (5, 30, 20),  # neither end: a second deletion during the read; whole (wide, never short)
             ("a", 5): (0, 40, 30)}  # holes inside (transaction markers, compacted records), then a skip
    # one reader per partition reads up through the range: what it returned covers [lowest, highest]
    assert minus_read(lost, spans) == {("a", 0): (116, 150), ("a", 2): (0, 10), ("a", 3): (5, 9), ("a", 4): (0, 40),
                                       ("a", 5): (41, 50)}
    assert minus_read(lost, {}) == lost
    # several readers per partition (source.min_partitions): only a run without holes counts
    assert minus_read(lost, spans, forward=False) == {**minus_read(lost, spans), ("a", 5): (0, 50)}


def test_chaos_1202_a_partial_batch_s_gap_is_each_missing_table_s_own() -> None:
    """Chaos seed 1202: a batch committed to one table, not the other, then the checkpoint was lost
    and Kafka deleted the batch's start. The gap was reported from the highest offset any table
    held, so the records the other table never got were lost with no report (1,677 records). Now
    the part above every table is a common gap, and the part only some tables lack is theirs, named."""
    from icetide.ingest.batch_log import PipelineCounters
    from icetide.ingest.retention import gap_keys, parse_gap_key, split_lost

    lost = {("a", 0): (100, 180), ("a", 1): (50, 60), ("b", 0): (0, 10)}
    nexts = {"ns.orders": {("a", 0): 150, ("a", 1): 70}, "ns.clicks": {("a", 0): 100, ("a", 1): 70},
             "ns.views": {("a", 0): 80}, "ns.logins": {("a", 0): 120}, "ns.new": {}}
    common, tables = split_lost(lost, nexts)
    assert common == {("a", 0): (150, 180), ("b", 0): (0, 10)}  # no table holds these: every record lost
    # orders holds its records of 100-149; every other table may have lost its records there, from
    # where it stopped (views had none in the batch before, logins a replay's partial write, a
    # partition new to "new") (the review: a rule for "stopped at the range's start" missed those)
    a1 = {("a", 1): (50, 60)}  # held up to 70 by orders and clicks; the others never took a[1]
    assert tables == {"ns.clicks": {("a", 0): (100, 150)}, "ns.views": {("a", 0): (100, 150), **a1},
                      "ns.logins": {("a", 0): (120, 150), **a1}, "ns.new": {("a", 0): (100, 150), **a1}}
    assert split_lost(lost, {}) == (lost, {})
    keys = gap_keys(common, tables)
    assert keys["a[0] for ns.clicks"] == [100, 150] and keys["a[0]"] == [150, 180]
    assert parse_gap_key("a[0] for ns.clicks") == ("a[0]", "ns.clicks") and parse_gap_key("a[0]") == ("a[0]", None)
    counters = PipelineCounters()
    counters.add_gaps(keys)
    assert counters.lost_records == 30 + 10  # a table's part is a gap, not a count of lost records
    assert set(counters.gaps) == set(keys)


def test_a_gap_found_again_by_a_retried_start_is_counted_and_alerted_once() -> None:
    """A query start that fails after its resume found a gap (the object store down) and is retried
    finds the same gap again: only what this run has not recorded yet is new."""
    from icetide.ingest.batch_log import PipelineCounters

    c = PipelineCounters()
    c.add_gaps({"orders[0]": [100, 250], "orders[1] for ns.t": [5, 9]})
    assert c.unreported({"orders[0]": [100, 250], "orders[1] for ns.t": [5, 9]}) == []
    # retention went on meanwhile, start after start (the review: the third retry counted 250-300 again)
    for end in (300, 350, 400):
        for gaps in c.unreported({"orders[0]": [100, end]}):
            c.add_gaps(gaps)
    assert c.lost_records == 300 and c.unreported({"orders[0]": [100, 400]}) == []
    # a new part before, between and after what is recorded: each piece once
    c.add_gaps({"orders[2]": [20, 30]})
    c.add_gaps({"orders[2]": [40, 50]})
    assert c.unreported({"orders[2]": [10, 60], "orders[3]": [0, 7]}) == [
        {"orders[2]": [10, 20], "orders[3]": [0, 7]}, {"orders[2]": [30, 40]}, {"orders[2]": [50, 60]}]


def test_a_stop_for_a_replay_some_tables_hold_says_so_not_that_nothing_was_written() -> None:
    """Review: with ``on_data_loss: stop`` Spark's read of a replayed batch fails when Kafka deleted its
    start, also where tables already hold it; the reason said "had not read … nothing of this batch
    was written"."""
    from icetide.ingest.retention import data_loss_message

    held = {"ns.b": {("orders", 0): (100, 180)}}
    text = data_loss_message("p", "Spark: some data may have been lost", held)
    assert "replays after a crash" in text and "may lack part of it: records routed to ns.b" in text
    assert "Nothing of this batch was written" not in text
    # a replay every table holds (the second review): none lost, and it says so
    whole = data_loss_message("p", "orders[0] offsets 100-179", replay=True)
    assert "found none beyond what every table holds" in whole and "had not read" not in whole
    assert "reported as a gap" not in whole  # continue reports nothing for it: no promise of a report
    assert "Nothing of this batch was written" in data_loss_message("p", "orders[0] 100–180")
    # a loss above every table in a partial replay: the common part once, the tables' parts once
    from icetide.ingest.retention import stop_message

    both = stop_message("p", {("orders", 0): (180, 250)}, held)
    assert both.count("ns.b") == 1 and "lost: orders[0]" in both and "nothing of this batch was written" in both


def test_a_stop_after_the_one_pass_committed_names_the_tables_that_hold_the_batch() -> None:
    """Review of #41 (hole 8's last item, one path left): with ``on_data_loss: stop``, the one pass
    committed tables of a batch, then Spark's read of the rest failed because Kafka deleted records
    meanwhile; the reason said "Nothing of this batch was written"."""
    from types import SimpleNamespace

    from icetide.errors import DataLossError
    from icetide.ingest import sink as sink_module
    from icetide.ingest.retention import data_loss_message

    text = data_loss_message("p", "Spark: some data may have been lost", written=["ns.a", "ns.b"])
    assert "Nothing of this batch was written" not in text
    assert "already in ns.a, ns.b" in text and "other tables and the dead letters have nothing of it" in text

    # the sink's own handler passes the tables the batch's one pass committed
    s = cast(Any, object.__new__(sink_module.BatchWriter))
    forgot: list[bool] = []

    def process(df: Any, batch_id: int, started: float) -> None:
        s._written = ["ns.a"]  # what _process records once the one pass committed
        raise RuntimeError(f"Py4JJavaError: ... {sink_module.SPARK_DATA_LOSS}. ... OffsetOutOfRange")

    s._process, s.cfg = process, SimpleNamespace(name="p")
    s.ledger = SimpleNamespace(before_commit=None)
    s.forget_watermarks = lambda: forgot.append(True)
    s._lost_raw, s._lost_tables, s._raced, s.in_flight_since_ms = {}, {}, set(), None
    with pytest.raises(DataLossError) as err:
        s(None, 7)
    assert "already in ns.a" in str(err.value) and "Nothing of this batch was written" not in str(err.value)
    assert forgot == [True]


def test_hole8_a_periodic_mirror_never_moves_the_mirror_back_over_a_newer_runs_commit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """#41 (8): the shutdown flush mirrored a watermark only while the run's commit was still the
    pipeline's newest on the table; the periodic mirror right after each commit did not, so a run
    paused between its commit and its mirror, while a standby committed more, wrote its older
    offsets over the mirror when it woke."""
    from types import SimpleNamespace

    from icetide.ingest import ledger as ledger_module

    mine = Watermark(offsets={("t", 0): 100}, run="paused", batch=7)
    newer = Watermark(offsets={("t", 0): 180}, run="standby", batch=3)
    written: list[Watermark] = []
    newest: list[Any] = [newer]

    def read(spark: Any, table: str, pipeline: str) -> Watermark:
        if isinstance(newest[0], Exception):
            raise newest[0]
        return cast(Watermark, newest[0])

    monkeypatch.setattr(ledger_module, "read_watermark", read)
    monkeypatch.setattr(ledger_module, "set_property", lambda spark, table, pipeline, wm: written.append(wm))
    led = cast(Any, object.__new__(ledger_module.Ledger))
    led.spark, led.cfg, led._mirror_every = None, SimpleNamespace(name="p"), 0.0
    led._mirrored_at, led._unmirrored = {}, {}
    led._mirror("cat.ns.t", mine)  # the interval is over: the periodic mirror, right after the commit
    assert written == [] and "cat.ns.t" not in led._unmirrored  # the standby's commit is newer: left alone
    newest[0] = mine
    led._mirror("cat.ns.t", mine)
    assert written == [mine]  # still this run's commit: mirrored
    newest[0] = RuntimeError("catalog down")
    led._mirror("cat.ns.t", mine)  # a failed copy never fails the committed batch; the flush retries it
    assert written == [mine] and led._unmirrored == {"cat.ns.t": mine}


def test_hole8_each_partitions_tombstones_are_trimmed_by_its_own_stream_time() -> None:
    """#41 (8): the predicate that trims a tombstone table: one cutoff per partition, from its own
    newest delete (never past the wall clock), whole days; rows with no position by the earliest."""
    from icetide.maintenance.retention import tombstone_predicate

    day = 86_400_000
    now = 1_790_000_000_000  # 2026-09-21 14:13 UTC
    where, before = tombstone_predicate({0: now, 1: now - 30 * day, None: now - 30 * day}, "_deleted_at", now,
                                        7 * 86_400)
    assert where == ("(_cdc_position.partition IS NULL AND _deleted_at < TIMESTAMP '2026-08-15 00:00:00') OR "
                     "(_cdc_position.partition = 0 AND _deleted_at < TIMESTAMP '2026-09-14 00:00:00') OR "
                     "(_cdc_position.partition = 1 AND _deleted_at < TIMESTAMP '2026-08-15 00:00:00')")
    assert before == "TIMESTAMP '2026-09-14 00:00:00'"
    # a stream time ahead of the wall clock (a producer's skewed clock) counts as the wall clock
    assert "TIMESTAMP '2026-09-14 00:00:00'" in tombstone_predicate({3: now + 9 * day}, "_deleted_at", now,
                                                                     7 * 86_400)[0]
    # no positions at all: one cutoff for every row
    assert tombstone_predicate({None: now}, "_deleted_at", now, 7 * 86_400)[0] == (
        "_deleted_at < TIMESTAMP '2026-09-14 00:00:00'")


def test_spark_reads_kafka_without_the_brokers_wait_for_more_data_unless_the_user_sets_it() -> None:
    """A bounded read's fetch at the log's end waited fetch.max.wait.ms (500 ms) per partition."""
    from icetide.config.source import KafkaSource
    from icetide.ingest.source import FETCH_MAX_WAIT_MS, kafka_options

    plain = kafka_options(KafkaSource(bootstrap_servers="k:9092", topics=["t"]))
    assert plain == {"kafka.bootstrap.servers": "k:9092", "kafka.fetch.max.wait.ms": FETCH_MAX_WAIT_MS}
    assert int(FETCH_MAX_WAIT_MS) < 500
    mine = kafka_options(KafkaSource(bootstrap_servers="k:9092", topics=["t"],
                                     options={"fetch.max.wait.ms": "300", "security.protocol": "SSL"}))
    assert mine["kafka.fetch.max.wait.ms"] == "300" and mine["kafka.security.protocol"] == "SSL"
