"""A recreated topic's restart marks hold against every writer that does not know them (#41; the
review of the first fix): maintenance's mirror of an older view, a torn view, a paused or stopping
run's own mirror and its commit after the mark, a topic recreated twice on skewed clocks, a restart
that did not know the new topic's id, and health's lag. JVM-free: the fold of the properties and
snapshot summaries every reader uses."""

from __future__ import annotations

from icetide.health.collector import watermarks as health_watermarks
from icetide.ingest import recreated
from icetide.ingest.recreated import KafkaTopics
from icetide.lake.meta import Snapshot
from icetide.lake.offsets import (
    PROPERTY_PREFIX,
    RESTARTS_PREFIX,
    BatchRanges,
    Watermark,
    commit_properties,
    mirrors_needed,
    watermark_from,
)
from icetide.lake.restart_marks import Restarts

X, Y, Z = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw"  # topic ids
OLDER = commit_properties("p", "r0", 6, BatchRanges({("t", 0): (0, 19_000), ("u", 0): (0, 20)}), {"t": X, "u": X})
NEWEST = commit_properties("p", "r1", 7, BatchRanges({("t", 0): (19_000, 20_000), ("u", 0): (20, 30)}))
TS7 = 1_000  # snapshot (r1, 7)'s timestamp-ms
MARK = {"t": ("r1", 7, TS7)}  # the mark of (r1, 7): what r2's commits after it carry
R2_FIRST = commit_properties("p", "r2", 0, BatchRanges({("t", 0): (0, 1_500), ("u", 0): (30, 31)}), {"t": Y}, MARK)


def _snaps(*extra: tuple[int, dict[str, str]]) -> list[Snapshot]:
    """Ancestry newest first: ``extra`` (newest first), then (r1, 7), then (r0, 6)."""
    chain = [*extra, (TS7, NEWEST), (900, OLDER)]
    return [Snapshot(100 + i, ts, s, i) for i, (ts, s) in enumerate(chain)]


def _marked(props: dict[str, str], wm: Watermark, topics: dict[str, str | None], run: str) -> dict[str, str]:
    """What ``set_restarted`` writes: ``wm`` (already restarted) and the marks of ``topics`` by ``run``."""
    now = Restarts.parse(props.get(RESTARTS_PREFIX + "p"))
    marks = now.with_marks({t: wm.restarts[t] for t in topics}, dict(topics), run)
    return {**props, PROPERTY_PREFIX + "p": wm.to_property(), RESTARTS_PREFIX + "p": marks.value()}


def _restart(new_id: str | None) -> tuple[Watermark, dict[str, str]]:
    read = watermark_from({}, _snaps(), "p")
    assert read is not None and read.offsets[("t", 0)] == 20_000
    return read, _marked({}, read.restarted({"t": new_id}), {"t": new_id}, "r2")


def test_a_stopping_runs_own_mirror_of_the_marked_batch_gives_the_topic_nothing() -> None:
    """r1 mirrors batch 7 after r2 marked it (its mirror's time is after the snapshot's)."""
    read, props = _restart(Y)
    zombie = Watermark(offsets=dict(read.offsets), run="r1", batch=7, batch_ranges=read.batch_ranges,
                       committed_at_ms=TS7 + 40, topic_ids={"t": X, "u": X})
    props[PROPERTY_PREFIX + "p"] = zombie.to_property()
    now = watermark_from(props, _snaps((2_000, R2_FIRST)), "p")
    assert now is not None and now.offsets == {("t", 0): 1_500, ("u", 0): 31} and now.topic_ids["t"] == Y


def test_a_paused_runs_commit_after_the_mark_holds_the_deleted_topics_offsets() -> None:
    """r1, paused before it saw the recreation, commits batch 8 (read from the deleted topic) after
    r2 marked the table: its offsets of the topic are the deleted one's. The same for a run the mark
    does not name (its newest commit to this table was older), and none of it once r1 has read the
    marks (it took over again with the same run id): its commits carry the mark."""
    _, props = _restart(Y)
    zombie8 = commit_properties("p", "r1", 8, BatchRanges({("t", 0): (20_000, 20_500), ("u", 0): (30, 32)}))
    now = watermark_from(props, _snaps((1_100, zombie8)), "p")
    assert now is not None and now.topic_ids["t"] == Y and recreated.stale_topics(now, {"t": Y}, {}, set()) == {}
    assert ("t", 0) not in now.offsets and now.offsets[("u", 0)] == 32
    other = commit_properties("p", "r9", 3, BatchRanges({("t", 0): (20_000, 20_500)}))  # not the marked run
    assert ("t", 0) not in (watermark_from(props, _snaps((1_100, other)), "p") or Watermark()).offsets
    again = commit_properties("p", "r1", 9, BatchRanges({("t", 0): (1_500, 2_300)}), None, MARK)  # r1 took over
    now = watermark_from(props, _snaps((3_000, again), (2_000, R2_FIRST), (1_100, zombie8)), "p")
    assert now is not None and now.offsets[("t", 0)] == 2_300
    # r1 marking the topic itself (it saw the recreation): its later commits are the new topic's
    read = watermark_from({}, _snaps(), "p")
    assert read is not None
    props = _marked({}, read.restarted({"t": Y}), {"t": Y}, "r1")
    new8 = commit_properties("p", "r1", 8, BatchRanges({("t", 0): (0, 700)}), None, MARK)
    assert (watermark_from(props, _snaps((1_100, new8)), "p") or Watermark()).offsets[("t", 0)] == 700


def test_a_torn_view_of_the_properties_and_snapshots_gives_the_topic_nothing() -> None:
    """The procedure expiry path reads the properties before the mark and the snapshots after r2's commit."""
    _, props = _restart(Y)
    snaps = _snaps((2_000, R2_FIRST))
    props[PROPERTY_PREFIX + "p"] = mirrors_needed({}, snaps)["p"].to_property()
    now = watermark_from(props, snaps, "p")
    assert now is not None and now.offsets[("t", 0)] == 1_500


def test_a_stale_mirror_never_gives_back_the_deleted_topics_id() -> None:
    """A restart that did not know the new id; a mirror of the marked snapshot from before it (the
    deleted topic's id X); the next start where Kafka tells Y must not find the topic recreated again."""
    _, props = _restart(None)
    assert Restarts.parse(props[RESTARTS_PREFIX + "p"]).ids == {"t": ""}  # unknown, said explicitly
    stale = mirrors_needed({}, _snaps())["p"]
    assert (stale.run, stale.batch, stale.committed_at_ms) == ("r1", 7, TS7)  # the mark's own identity
    props[PROPERTY_PREFIX + "p"] = stale.to_property()
    r2 = commit_properties("p", "r2", 0, BatchRanges({("t", 0): (0, 1_500), ("u", 0): (30, 31)}), None, MARK)  # no id
    now = watermark_from(props, _snaps((2_000, r2)), "p")
    assert now is not None and now.offsets[("t", 0)] == 1_500 and "t" not in now.topic_ids
    found = recreated.recreated_topics(KafkaTopics({"t": Y, "u": X}, {"t": [0], "u": [0]},
                                                   {("t", 0): 1_500, ("u", 0): 31}),
                                       {t: {i} for t, i in now.topic_ids.items()}, dict(now.offsets))
    assert "t" not in found


def test_a_topic_recreated_twice_keeps_its_second_mark_whatever_the_clocks_say() -> None:
    """The second restart's host is 26 s behind the first's; a mirror carrying the first mark lands after."""
    first_snaps = [Snapshot(101, 31_000, NEWEST, 0), Snapshot(100, 900, OLDER, 1)]
    read = watermark_from({}, first_snaps, "p")
    assert read is not None
    props = _marked({}, read.restarted({"t": Y}), {"t": Y}, "r2")  # mark 1 = (r1, 7, 31_000)
    r2 = commit_properties("p", "r2", 3, BatchRanges({("t", 0): (0, 4_000), ("u", 0): (30, 31)}), {"t": Y},
                           {"t": ("r1", 7, 31_000)})
    snaps = [Snapshot(102, 5_000, r2, 0), Snapshot(101, 31_000, NEWEST, 1), Snapshot(100, 900, OLDER, 2)]
    second_read = watermark_from(props, snaps, "p")
    assert second_read is not None and second_read.offsets[("t", 0)] == 4_000
    stale = mirrors_needed(props, snaps)["p"]  # carries mark 1
    props = _marked(props, second_read.restarted({"t": Z}), {"t": Z}, "r3")  # mark 2 = (r2, 3, 5_000)
    props[PROPERTY_PREFIX + "p"] = stale.to_property()  # ... written after it
    now = watermark_from(props, snaps, "p")
    assert now is not None and ("t", 0) not in now.offsets and now.restarts["t"] == ("r2", 3, 5_000)
    assert now.topic_ids["t"] == Z


def test_the_new_runs_mirror_counts_whatever_its_clock() -> None:
    """r2's host is behind the mark's: its mirror carries the mark, so it counts once its snapshots expired."""
    _, props = _restart(Y)
    mine = Watermark(offsets={("t", 0): 1_500, ("u", 0): 31}, run="r2", batch=0,
                     batch_ranges=BatchRanges({("t", 0): (0, 1_500), ("u", 0): (30, 31)}),
                     committed_at_ms=TS7 - 20, topic_ids={"t": Y, "u": X}, restarts={"t": ("r1", 7, TS7)})
    props[PROPERTY_PREFIX + "p"] = mine.to_property()
    alone = watermark_from(props, [], "p")
    assert alone is not None and alone.offsets == {("t", 0): 1_500, ("u", 0): 31}


def test_health_reads_the_watermark_with_its_marks() -> None:
    _, props = _restart(Y)
    props[PROPERTY_PREFIX + "p"] = mirrors_needed({}, _snaps())["p"].to_property()  # the stale mirror
    wm = health_watermarks(props)["p"]
    assert ("t", 0) not in wm.offsets and wm.offsets[("u", 0)] == 30


def test_marks_only_in_the_watermark_property_still_count() -> None:
    """Tables an earlier version marked: the watermark property alone carries the marks."""
    read = watermark_from({}, _snaps(), "p")
    assert read is not None
    props = {PROPERTY_PREFIX + "p": read.restarted({"t": Y}).to_property()}
    now = watermark_from(props, _snaps((2_000, R2_FIRST)), "p")
    assert now is not None and now.offsets == {("t", 0): 1_500, ("u", 0): 31} and now.topic_ids["t"] == Y
