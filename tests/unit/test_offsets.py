"""The exactly-once ledger's arithmetic (the real-stack tests prove it end to end)."""

from __future__ import annotations

from icetide.lake.offsets import BatchRanges, Watermark, commit_properties, resume_offsets


def test_roundtrip_summary_and_property() -> None:
    ranges = BatchRanges({("t", 0): (10, 20), ("t", 1): (5, 9)}, planned_at_ms=2000)
    props = commit_properties("p1", "run1", 7, ranges, {("t", 0): 20, ("t", 1): 9, ("u", 0): 3})
    wm = Watermark.from_summary(props, committed_at_ms=42)
    assert wm.offsets == {("t", 0): 20, ("t", 1): 9, ("u", 0): 3}
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
