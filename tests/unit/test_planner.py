"""Planner rules on health figures built by hand: tiers, hot/cold, expiry that can do something."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from icetide.config.policy import MaintenancePolicy
from icetide.health.model import PartitionHealth, TableHealth
from icetide.maintenance.hot import hot_partitions, tier_merge, tier_of
from icetide.maintenance.partitions import PartitionField
from icetide.maintenance.planner import demand, expirable, order, plan_table

MiB = 1024 * 1024
NOW = 1_800_000_000_000
DAY_SPEC = [PartitionField("ts_day", "days", "ts")]


def part(day: str, hist: dict[int, int], written_s_ago: float, **kw: int) -> PartitionHealth:
    files = sum(hist.values())
    return PartitionHealth(json.dumps({"ts_day": day}, separators=(",", ":")), data_files=files,
                           data_bytes=sum(n * 2**b for b, n in hist.items()), records=files * 100,
                           small_files=kw.pop("small_files", files), last_write_ms=int(NOW - written_s_ago * 1000),
                           size_hist=hist, **kw)


def table(*parts: PartitionHealth, snapshots: list[int] | None = None, target: int = 128 * MiB,
          compactions: tuple[int, ...] = ()) -> TableHealth:
    """``snapshots``: the writes' commit times; ``compactions``: times of ``replace`` snapshots besides."""
    times = snapshots or [NOW - 1000]
    return TableHealth("cat.ns.t", NOW, target, int(target * 0.75), list(parts),
                       snapshots=len(times) + len(compactions), snapshot_times_ms=sorted([*times, *compactions]),
                       write_times_ms=times)


@pytest.mark.parametrize(("bucket", "fanout", "tier"), [
    (27, 8, 0),  # 128 MiB: at or above half the target, never merged by minor compaction
    (26, 8, 0),  # 64 MiB = half the target
    (25, 8, 1), (23, 8, 1),  # 8..64 MiB
    (22, 8, 2), (20, 8, 2),  # 1..8 MiB
    (19, 8, 3), (10, 8, 6),
    (25, 2, 1), (24, 2, 2), (25, 16, 1), (22, 16, 1), (21, 16, 2),
])
def test_tier_of(bucket: int, fanout: int, tier: int) -> None:
    assert tier_of(bucket, 128 * MiB, fanout) == tier


def test_tier_merge_waits_until_a_tier_holds_fanout_files() -> None:
    assert tier_merge({18: 7}, 128 * MiB, 8) is None  # 7 files of 256 KiB: tier 3 not full
    assert tier_merge({18: 7, 26: 40}, 128 * MiB, 8) is None  # big files never count
    m = tier_merge({18: 8}, 128 * MiB, 8)
    assert m is not None and (m.tier, m.tier_files, m.files, m.below_bytes) == (3, 8, 8, 1 * MiB)


def test_tier_merge_takes_the_largest_full_tier_and_every_smaller_file() -> None:
    # tier 2 (1-8 MiB) holds 8 files, tier 3 holds 3, tier 4 holds 9 (also full): one merge below 8 MiB
    m = tier_merge({21: 8, 19: 3, 16: 9, 24: 5}, 128 * MiB, 8)
    assert m is not None
    assert (m.tier, m.tier_files, m.files, m.below_bytes) == (2, 8, 20, 8 * MiB)
    assert m.approx_bytes == int(8 * 1.5 * 2**21 + 3 * 1.5 * 2**19 + 9 * 1.5 * 2**16)


def test_merged_output_lands_at_least_one_tier_up() -> None:
    # fanout files of a tier's smallest size add up to the tier's upper edge: the next tier
    for fanout in (2, 4, 8, 16, 32, 64):
        for t in range(1, 5):
            m = tier_merge({b: fanout for b in range(0, 27) if tier_of(b, 128 * MiB, fanout) == t}, 128 * MiB,
                           fanout)
            assert m is not None and m.tier == t
            smallest = min(b for b in range(27) if tier_of(b, 128 * MiB, fanout) == t)
            assert tier_of((fanout * 2**smallest).bit_length() - 1, 128 * MiB, fanout) == t - 1


def test_expirable_counts_what_expire_snapshots_would_remove() -> None:
    times = [NOW - s * 1000 for s in (500, 400, 300, 200, 100)]  # oldest first
    assert expirable(times, NOW - 250_000, retain_last=2) == 3
    assert expirable(times, NOW - 250_000, retain_last=3) == 2  # 200 s old is among the last 3
    assert expirable(times, NOW - 1_000_000, retain_last=1) == 0  # none past the age floor
    assert expirable(times, NOW, retain_last=5) == 0
    assert expirable([], NOW, retain_last=1) == 0


def test_hot_partition_gets_minor_compaction_cold_gets_full() -> None:
    policy = MaintenancePolicy(hot_partition_quiet_seconds=900, tier_fanout=8)
    hot = part("2026-11-25", {18: 12, 16: 2}, written_s_ago=3)
    cold = part("2026-11-24", {18: 30}, written_s_ago=3600)
    plan = plan_table(table(hot, cold), DAY_SPEC, policy, NOW)
    assert [s.action for s in plan.steps] == ["rewrite_hot_files", "rewrite_data_files"]
    minor, full = plan.steps
    assert minor.partitions == [hot.partition] and full.partitions == [cold.partition]
    assert minor.args == {"strategy": "binpack",
                          "where": "(ts >= TIMESTAMP '2026-11-25 00:00:00' AND ts < TIMESTAMP '2026-11-26 00:00:00')"}
    assert minor.options["min-file-size-bytes"] == str(1 * MiB)
    assert minor.options["min-input-files"] == "2"
    assert minor.figures["files"] == 14 and "size tier 3 holds 12 files (≥ fanout 8)" in minor.reason
    assert "min-file-size-bytes" not in full.options  # Iceberg's default: 75% of the target
    assert plan.skipped == [f"{hot.partition}: hot (written 3s ago, quiet time 900s)"]


HOUR_SPEC = [PartitionField("ts_hour", "hours", "ts"), PartitionField("kind", "identity", "kind")]


def hour(h: int, kind: str, written_s_ago: float, files: int = 6) -> PartitionHealth:
    return PartitionHealth(json.dumps({"ts_hour": h, "kind": kind}, separators=(",", ":")), data_files=files,
                           data_bytes=files * 2**16, records=files * 100, small_files=files,
                           last_write_ms=int(NOW - written_s_ago * 1000), size_hist={16: files})


@pytest.mark.parametrize(("settle", "settle_commits", "prev_written_s_ago", "commits_since", "closed", "files",
                          "compacted_before"), [
    (60, 2, 90, 1, True, 6, False),  # the stream moved on to hour 11; hour 10 unwritten for 90 s ≥ 60
    (60, 2, 30, 1, False, 6, False),  # still settling: a late record may follow
    (60, 2, 30, 2, True, 6, False),  # but two commits went elsewhere since its last write
    (60, None, 30, 5, False, 6, False),  # commits not counted
    (60, 2, 2, 0, False, 6, False),  # a late record just landed there: hot again
    (None, None, 90, 9, False, 6, False),  # switched off: only the 900 s quiet time counts
    # fewer than min_input_files small files: after icetide compacted it, a few late ones wait for more …
    (60, 2, 90, 3, False, 4, True),
    # … but the first time it closes (hot merges left few small files) it is compacted all the same
    (60, 2, 90, 3, True, 4, False),
    (60, 2, 90, 3, False, 1, False),  # one file: nothing to merge
])
def test_a_time_partition_the_stream_moved_past_is_compacted_fully_once_settled(
        settle: float | None, settle_commits: int | None, prev_written_s_ago: float, commits_since: int,
        closed: bool, files: int, compacted_before: bool) -> None:
    policy = MaintenancePolicy(hot_partition_quiet_seconds=900, closed_partition_settle_seconds=settle,
                               closed_partition_settle_commits=settle_commits, min_input_files=5)
    prev, cur = hour(10, "a", prev_written_s_ago, files), hour(11, "b", 2)  # any other field: the time field counts
    written = int(NOW - prev_written_s_ago * 1000)
    commits = [written - 5000, written, *(written + 1 + i for i in range(commits_since))]
    compacted = {prev.partition: written - 60_000} if compacted_before else {}
    plan = plan_table(table(prev, cur, snapshots=commits), HOUR_SPEC, policy, NOW, compacted_ms=compacted)
    full = [s for s in plan.steps if s.action == "rewrite_data_files"]
    if closed:
        [step] = full
        assert step.partitions == [prev.partition]
        assert (f"closed (a newer time partition is being written; none here for {prev_written_s_ago}s, "
                f"{commits_since} commit(s))") in step.reason
        assert step.args["where"] == ("(ts >= TIMESTAMP '1970-01-01 10:00:00' AND ts < TIMESTAMP '1970-01-01 "
                                      "11:00:00' AND kind = 'a')")
        assert plan.skipped == [f"{cur.partition}: hot (written 2s ago, quiet time 900s)"]
    else:
        assert full == []
    assert hot_partitions([prev, cur], HOUR_SPEC, policy, NOW, commits, compacted, 128 * MiB) == (
        {cur.partition} if closed else {prev.partition, cur.partition})


def test_compactions_do_not_count_as_commits_elsewhere() -> None:
    """Only the stream's commits say it moved on: a compaction of another partition is not one."""
    policy = MaintenancePolicy(hot_partition_quiet_seconds=900, closed_partition_settle_seconds=60,
                               closed_partition_settle_commits=2, min_input_files=5)
    prev, cur = hour(10, "a", 30, 6), hour(11, "b", 2)
    written = int(NOW - 30_000)
    compactions = (written + 1, written + 2, written + 3)
    for writes_after, closed in ((1, False), (2, True)):
        commits = [written - 5000, written, *(written + 10 + i for i in range(writes_after))]
        plan = plan_table(table(prev, cur, snapshots=commits, compactions=compactions), HOUR_SPEC, policy, NOW)
        full = [s.partitions for s in plan.steps if s.action == "rewrite_data_files"]
        assert full == ([[prev.partition]] if closed else []), (writes_after, full)


def test_without_a_time_field_no_partition_is_closed_early() -> None:
    spec = [PartitionField("kind", "identity", "kind")]
    older = PartitionHealth('{"kind":"a"}', data_files=6, data_bytes=6 * 2**16, records=600, small_files=6,
                            last_write_ms=NOW - 300_000, size_hist={16: 6})
    newer = PartitionHealth('{"kind":"b"}', data_files=6, data_bytes=6 * 2**16, records=600, small_files=6,
                            last_write_ms=NOW - 1000, size_hist={16: 6})
    plan = plan_table(table(older, newer), spec, MaintenancePolicy(closed_partition_settle_seconds=60), NOW)
    assert [s.action for s in plan.steps] == []
    assert len(plan.skipped) == 2


def test_hot_partition_below_fanout_is_left_alone() -> None:
    hot = part("2026-11-25", {18: 7}, written_s_ago=3)
    plan = plan_table(table(hot), DAY_SPEC, MaintenancePolicy(tier_fanout=8), NOW)
    assert plan.steps == []


def test_minor_compaction_can_be_switched_off() -> None:
    hot = part("2026-11-25", {18: 12}, written_s_ago=3)
    policy = MaintenancePolicy(steps=["rewrite_data_files"])
    assert plan_table(table(hot), DAY_SPEC, policy, NOW).steps == []


def test_unpartitioned_table_is_compacted_while_written() -> None:
    p = PartitionHealth("", data_files=9, data_bytes=9 * 2**18, records=900, small_files=9,
                        last_write_ms=NOW - 1000, size_hist={18: 9})
    [step] = plan_table(table(p), [], MaintenancePolicy(tier_fanout=8), NOW).steps
    assert step.action == "rewrite_hot_files" and "where" not in step.args


def test_unsafe_partition_value_is_left_alone() -> None:
    spec = [PartitionField("kind", "identity", "kind")]
    p = PartitionHealth('{"kind":"a\'; DROP"}', data_files=9, data_bytes=9 * 2**18, records=900, small_files=9,
                        last_write_ms=NOW - 1000, size_hist={18: 9})
    plan = plan_table(table(p), spec, MaintenancePolicy(tier_fanout=8), NOW)
    assert plan.steps == []
    assert plan.skipped[0] == '{"kind":"a\'; DROP"}: cannot be selected safely by a filter; left alone'


def test_expiry_is_planned_only_when_a_snapshot_can_expire() -> None:
    policy = MaintenancePolicy(snapshots_trigger=3, snapshot_retain_last=2, snapshot_max_age_seconds=3600)
    young = [NOW - s * 1000 for s in range(10, 0, -1)]  # 10 snapshots, all younger than the 1 h floor
    plan = plan_table(table(snapshots=young), [], policy, NOW)
    assert plan.steps == []
    assert plan.skipped == ["expire_snapshots: 10 snapshots > trigger 3, but none beyond the last 2 is older than "
                            "2027-01-15 07:00:00 UTC"]
    old = [NOW - 7200_000, NOW - 7100_000, *young]
    [step] = plan_table(table(snapshots=old), [], policy, NOW).steps
    assert step.action == "expire_snapshots" and step.figures == {"snapshots": 12, "expirable": 2}


def test_snapshot_max_count_expires_young_snapshots_down_to_retain_last() -> None:
    young = [NOW - s * 10_000 for s in range(60, 0, -1)]  # 60 snapshots 10 s apart, all younger than 24 h
    assert plan_table(table(snapshots=young), [], MaintenancePolicy(), NOW).steps == []  # by age: nothing
    policy = MaintenancePolicy(snapshot_max_count=40, snapshot_retain_last=20)
    [step] = plan_table(table(snapshots=young), [], policy, NOW).steps
    assert step.action == "expire_snapshots" and step.figures == {"snapshots": 60, "expirable": 40}
    assert step.reason == "60 snapshots > trigger 40; 40 older than the newest 20"
    assert step.args["older_than"] == datetime.fromtimestamp((NOW - 200_000) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert step.args["retain_last"] == 20
    assert step.args["via"] == "driver" and "in the driver" in step.expected
    by_procedure = policy.model_copy(update={"snapshot_expiry": "procedure"})
    [proc] = plan_table(table(snapshots=young), [], by_procedure, NOW).steps
    assert proc.args["via"] == "procedure" and "(procedure)" in proc.expected
    # at or below the high-water mark (and the trigger): nothing to do until 20 more commits
    assert plan_table(table(snapshots=young[-40:]), [], policy, NOW).steps == []
    assert len(plan_table(table(snapshots=young[-41:]), [], policy, NOW).steps) == 1


def test_snapshot_max_count_below_retain_last_is_refused_naming_both_keys() -> None:
    with pytest.raises(ValueError, match="snapshot_max_count \\(10\\) must be at least snapshot_retain_last \\(20\\)"):
        MaintenancePolicy(snapshot_max_count=10)


def test_priority_orders_by_score_wait_and_demand() -> None:
    a = plan_table(table(part("2026-11-01", {18: 3}, 9999)), DAY_SPEC, MaintenancePolicy(), NOW, queries=31)
    b = plan_table(table(part("2026-11-01", {18: 3}, 9999)), DAY_SPEC, MaintenancePolicy(), NOW, queries=0)
    assert a.priority - b.priority == pytest.approx(demand(31)) == pytest.approx(20.0)
    b.table = "cat.ns.a"
    assert [p.table for p in order([b, a])] == ["cat.ns.t", "cat.ns.a"]


def test_a_hot_cdc_table_gets_its_deletes_applied() -> None:
    # unpartitioned and written all the time (a CDC table): no tier is full, but deletes pile up
    p = PartitionHealth("", data_files=6, data_bytes=6 * 2**20, records=60_000, small_files=6,
                        position_delete_files=12, position_delete_records=9_000, last_write_ms=NOW - 2000,
                        size_hist={20: 6})
    step, deletes = plan_table(table(p), [], MaintenancePolicy(), NOW).steps
    assert step.action == "rewrite_hot_files"
    assert step.reason == "(unpartitioned): hot, delete ratio 0.150 / 12 delete files"
    # then its delete files are merged, dropping the records of the files just replaced
    assert deletes.action == "rewrite_position_delete_files" and deletes.hot
    assert deletes.options["rewrite-all"] == "true" and deletes.args == {}
    assert step.options["min-file-size-bytes"] == "0"  # no size tier: only the files with deletes
    # a hot data file is rewritten for its deletes at hot_delete_ratio, not delete_ratio
    assert step.options["delete-file-threshold"] == "10" and step.options["delete-ratio-threshold"] == "0.3"
    quiet = PartitionHealth("", data_files=6, data_bytes=6 * 2**20, records=60_000, small_files=6,
                            position_delete_files=3, position_delete_records=300, last_write_ms=NOW - 2000,
                            size_hist={20: 6})
    # below both thresholds: no data rewrite, so no delete file dangles either
    assert plan_table(table(quiet), [], MaintenancePolicy(), NOW).steps == []


@pytest.mark.parametrize(("data_files", "deleted", "delete_files", "fires"), [
    (6, 12_000, 6, False),  # 20 % deleted, one file-scoped delete file per data file: the stream's steady state
    (6, 18_000, 6, True),  # 30 % = hot_delete_ratio
    (12, 0, 12, False),  # ≥ delete_files (10), but one per data file
    (12, 0, 13, True),  # more delete files than data files: they pile up
    (6, 0, 9, False),  # more than data files, fewer than delete_files
    (6, 0, 10, True),
])
def test_a_hot_cdc_table_applies_deletes_at_the_hot_ratio(data_files: int, deleted: int, delete_files: int,
                                                          fires: bool) -> None:
    p = PartitionHealth("", data_files=data_files, data_bytes=data_files * 2**20, records=60_000,
                        small_files=data_files, position_delete_files=delete_files, position_delete_records=deleted,
                        last_write_ms=NOW - 2000, size_hist={20: data_files // 2, 17: data_files - data_files // 2})
    steps = plan_table(table(p), [], MaintenancePolicy(), NOW).steps
    assert [s.action for s in steps] == (["rewrite_hot_files", "rewrite_position_delete_files"] if fires else [])
    # once cold, the table's delete_ratio applies again
    cold = PartitionHealth(**{**p.__dict__, "last_write_ms": NOW - 3600_000})
    assert [s.action for s in plan_table(table(cold), [], MaintenancePolicy(), NOW).steps][:1] == ["rewrite_data_files"]


def test_hot_delete_file_merges_are_per_partition_and_outside_the_rewrite_budget() -> None:
    from icetide.maintenance.executor import Budget

    hot = part("2026-03-02", {15: 3}, 5, position_delete_files=4, position_delete_records=200)  # ratio 0.67
    cold = part("2026-03-01", {15: 3}, 7200, position_delete_files=4)
    idle = part("2026-03-03", {15: 3}, 5, position_delete_files=4)  # hot, nothing rewritten: nothing dangles
    steps = plan_table(table(hot, cold, idle), DAY_SPEC, MaintenancePolicy(), NOW).steps
    assert [s.action for s in steps][:2] == ["rewrite_hot_files", "rewrite_position_delete_files"]
    merges = [s for s in steps if s.action == "rewrite_position_delete_files"]
    assert [(m.hot, m.partitions) for m in merges] == [(True, [hot.partition]), (False, [cold.partition])]
    assert "2026-03-02" in merges[0].args["where"] and "2026-03-01" not in merges[0].args["where"]
    budget = Budget(rewrites=1)
    budget.spend(merges[1])  # the cold one uses the cycle's only rewrite
    assert not budget.allows(merges[1]) and budget.allows(merges[0])
    budget.spend(merges[0])
    assert budget.used_rewrites == 1


def test_a_cold_partition_left_fragmented_by_minor_compaction_is_compacted_once() -> None:
    # 3 small files (below min_input_files 5) of 1-2 MiB in a cold partition: they fit in one file
    cold = part("2026-11-24", {20: 3}, written_s_ago=3600)
    [step] = plan_table(table(cold), DAY_SPEC, MaintenancePolicy(), NOW).steps
    assert step.action == "rewrite_data_files"
    assert step.reason == f"{cold.partition}: 3 small files in a partition that fits in 1 file(s)"
    assert step.options["min-input-files"] == "3"  # Iceberg would skip a group under its own minimum
    # one file, or files that each need their own target-size file: nothing to do
    assert plan_table(table(part("2026-11-24", {20: 1}, written_s_ago=3600)), DAY_SPEC, MaintenancePolicy(),
                      NOW).steps == []
    big = part("2026-11-24", {26: 3}, written_s_ago=3600, small_files=3)  # 3 × 64 MiB > 128 MiB target
    big.data_bytes = 3 * 100 * 2**20
    assert plan_table(table(big), DAY_SPEC, MaintenancePolicy(), NOW).steps == []


@pytest.mark.parametrize(("gib", "commits"), [(0.01, None), (1, None), (2.5, 3), (40, 10)])
def test_partial_progress_commits_about_once_per_file_group_of_input(gib: float, commits: int | None) -> None:
    # a commit per small group costs an idle rewrite 9-30% of its time, partial progress itself ~9%;
    # large rewrites keep their progress
    policy = MaintenancePolicy(max_file_group_bytes=1024 * MiB)
    cold = part("2026-11-24", {18: 30}, written_s_ago=3600)
    cold.data_bytes = int(gib * 1024 * MiB)
    hot = part("2026-11-25", {18: 12, 16: 2}, written_s_ago=3)
    minor, full = plan_table(table(hot, cold), DAY_SPEC, policy, NOW).steps
    if commits is None:
        assert not any(k.startswith("partial-progress") for k in full.options), full.options
    else:
        assert full.options["partial-progress.max-commits"] == str(commits)
        assert full.options["partial-progress.enabled"] == "true"
    assert "partial-progress.enabled" not in minor.options  # 14 files of ≤ 256 KiB: one commit


@pytest.mark.parametrize(("manifests", "manifest_bytes", "planned"), [
    (60, 60 * 10_000, True),  # 60 small per-commit manifests (a fast-appending writer): ~3 after at 256 KiB
    (60, 60 * 250_000, False),  # 60 manifests already about the target size: a rewrite changes nothing
    (40, 40 * 10_000, False),  # below the trigger
])
def test_manifests_are_rewritten_only_when_that_folds_them(manifests: int, manifest_bytes: int,
                                                            planned: bool) -> None:
    h = table(part("2026-11-24", {26: 1}, written_s_ago=3600))
    h.manifests, h.manifest_bytes, h.manifest_target_bytes = manifests, manifest_bytes, 256 * 1024
    plan = plan_table(h, DAY_SPEC, MaintenancePolicy(manifests_trigger=50), NOW)
    steps = [s for s in plan.steps if s.action == "rewrite_manifests"]
    if planned:
        [step] = steps
        assert step.expected == f"~{manifests} → ~3 manifests (faster planning)"
    else:
        assert steps == []
    assert any(s.startswith("rewrite_manifests:") for s in plan.skipped) == (manifests > 50 and not planned)


@pytest.mark.parametrize(("settle", "settle_commits", "commits_since", "due_s"), [
    (60, None, 1, 30),  # written 30 s ago: 60 s without a write comes 30 s from now
    (60, 2, 1, 10),  # one more commit needed; one every 20 s, the last 10 s ago: sooner than the 60 s
    (60, 2, 0, 10),  # two more needed: the last write was the last commit, 30 s ago
    (None, 3, 1, 30),  # two more at 20 s apart after the one 10 s ago
    (10, 2, 1, None),  # settled already: compacted in this very plan, nothing to look at again
])
def test_a_closing_partition_says_when_it_settles(settle: float | None, settle_commits: int | None,
                                                  commits_since: int, due_s: int | None) -> None:
    policy = MaintenancePolicy(hot_partition_quiet_seconds=900, closed_partition_settle_seconds=settle,
                               closed_partition_settle_commits=settle_commits, min_input_files=5)
    prev, cur = hour(10, "a", 30), hour(11, "b", 2)
    written = NOW - 30_000
    commits = [written - k * 20_000 for k in range(4, -1, -1)] + [written + (i + 1) * 20_000
                                                                   for i in range(commits_since)]
    plan = plan_table(table(prev, cur, snapshots=commits), HOUR_SPEC, policy, NOW)
    if due_s is None:
        assert plan.revisit_at_ms is None
        assert [s.partitions for s in plan.steps if s.action == "rewrite_data_files"] == [[prev.partition]]
    else:
        assert plan.revisit_at_ms == NOW + due_s * 1000
        assert prev.partition in hot_partitions([prev, cur], HOUR_SPEC, policy, NOW, commits)
        assert plan.skipped[-1] == f"a closed time partition settles in ~{due_s}s: planned again then"


def test_no_revisit_without_a_partition_about_to_close() -> None:
    policy = MaintenancePolicy(hot_partition_quiet_seconds=900, closed_partition_settle_seconds=60, min_input_files=5)
    assert plan_table(table(hour(11, "b", 2)), HOUR_SPEC, policy, NOW).revisit_at_ms is None  # only the newest hour
    one = hour(10, "a", 30, files=1)  # one file: nothing to close
    assert plan_table(table(one, hour(11, "b", 2)), HOUR_SPEC, policy, NOW).revisit_at_ms is None
    spec = [PartitionField("kind", "identity", "kind")]  # no time field: nothing closes early
    older = PartitionHealth('{"kind":"a"}', data_files=6, data_bytes=6 * 2**16, records=600, small_files=6,
                            last_write_ms=NOW - 30_000, size_hist={16: 6})
    assert plan_table(table(older), spec, policy, NOW).revisit_at_ms is None


def test_the_orphan_age_floor_is_an_hour_unless_a_test_run_lowers_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from icetide.config.policy import MaintenancePolicy

    with pytest.raises(ValueError, match="at least 3600"):
        MaintenancePolicy(orphan_min_age_seconds=60)
    monkeypatch.setenv("ICETIDE_ORPHAN_FLOOR_SECONDS", "30")  # the chaos run: icetide the only writer
    assert MaintenancePolicy(orphan_min_age_seconds=60).orphan_min_age_seconds == 60
    with pytest.raises(ValueError, match="at least 30"):
        MaintenancePolicy(orphan_min_age_seconds=10)
    monkeypatch.setenv("ICETIDE_ORPHAN_FLOOR_SECONDS", "7200")  # never raises the floor
    assert MaintenancePolicy(orphan_min_age_seconds=3600).orphan_min_age_seconds == 3600
