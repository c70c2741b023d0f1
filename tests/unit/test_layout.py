"""Layout from telemetry: clustering depth, and the gain-vs-cost decision."""

from __future__ import annotations

import json
import random

import pytest

from icetide.config.policy import MaintenancePolicy
from icetide.health.model import PartitionHealth, TableHealth
from icetide.maintenance.layout import Clustering, LayoutInput, decide, depth, sort_args
from icetide.maintenance.partitions import PartitionField
from icetide.maintenance.planner import plan_table
from icetide.maintenance.telemetry import ColumnDemand

NOW = 1_800_000_000_000
MB = 1024 * 1024


def test_depth_of_disjoint_ranges_is_one() -> None:
    assert depth([(0, 9), (10, 19), (20, 29)]) == 1.0


def test_depth_of_fully_overlapping_ranges_is_the_file_count() -> None:
    assert depth([(0, 100)] * 7) == 7.0


def test_depth_counts_touching_ranges_as_overlapping() -> None:
    # [0,10] and [10,20] share the value 10: a filter on 10 reads both
    assert depth([(0, 10), (10, 20)]) == 2.0
    assert depth([]) == 0.0


def test_depth_matches_a_brute_force_count() -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(50):
        iv = []
        for _ in range(rng.randrange(1, 40)):
            a = rng.randrange(1000)
            iv.append((a, a + rng.randrange(200)))
        brute = sum(sum(1 for lo2, hi2 in iv if lo2 <= hi and hi2 >= lo) for lo, hi in iv) / len(iv)
        assert depth(iv) == pytest.approx(brute)


def demand(scans: int = 40, files: int = 400, bytes_read: int = 4000 * MB) -> list[ColumnDemand]:
    return [ColumnDemand("user_id", scans, files, bytes_read), ColumnDemand("kind", 12, 30, 10 * MB)]


def parts() -> list[Clustering]:
    return [Clustering('{"d":"2026-11-01"}', 10, 500 * MB, 10.0),  # unsorted: every file spans every user
            Clustering('{"d":"2026-11-02"}', 10, 500 * MB, 1.0),  # already sorted
            Clustering('{"d":"2026-11-03"}', 1, 50 * MB, 1.0)]  # one file: nothing to gain


def test_decide_sorts_unclustered_cold_partitions_when_reads_saved_beat_the_rewrite() -> None:
    d = decide(demand(), parts(), MaintenancePolicy(), ["user_id", "kind", "ts"], hot=set())
    assert d is not None and d.worth_it
    assert d.columns == ["user_id", "kind"]
    assert [p.partition for p in d.partitions] == ['{"d":"2026-11-01"}']
    assert (d.gain_bytes, d.cost_bytes) == (int(4000 * MB * 0.9), 500 * MB)
    assert "sorting by user_id, kind saves" in d.why()


def test_decide_waits_while_the_gain_is_below_the_cost() -> None:
    d = decide(demand(bytes_read=100 * MB), parts(), MaintenancePolicy(), ["user_id", "kind"], hot=set())
    assert d is not None and not d.worth_it
    assert d.why().endswith(f"rewrite {500 * MB:,}; not worth it yet")


@pytest.mark.parametrize(("policy", "columns", "hot"), [
    (MaintenancePolicy(sort_columns=["ts"]), ["user_id"], set()),  # explicit order wins
    (MaintenancePolicy(layout_from_telemetry=False), ["user_id"], set()),
    (MaintenancePolicy(layout_min_scans=41), ["user_id"], set()),  # too few scans
    (MaintenancePolicy(), ["ts"], set()),  # the column is not in the table
    (MaintenancePolicy(), ["user_id"], {'{"d":"2026-11-01"}'}),  # the unsorted partition is hot
])
def test_decide_does_nothing(policy: MaintenancePolicy, columns: list[str], hot: set[str]) -> None:
    assert decide(demand()[:1], parts(), policy, columns, hot) is None


def test_sort_args() -> None:
    assert sort_args(["a"]) == {"strategy": "sort", "sort_order": "a ASC NULLS LAST"}
    assert sort_args(["a", "b"]) == {"strategy": "sort", "sort_order": "zorder(a, b)"}


def test_plan_shows_the_layout_step_with_its_reason() -> None:
    p1 = PartitionHealth('{"d":"2026-11-01"}', data_files=10, data_bytes=500 * MB, records=10, small_files=0,
                         last_write_ms=NOW - 86_400_000, size_hist={25: 10})
    h = TableHealth("cat.ns.t", NOW, 512 * MB, 384 * MB, [p1], snapshots=1, snapshot_times_ms=[NOW])
    spec = [PartitionField("d", "days", "ts")]
    plan = plan_table(h, spec, MaintenancePolicy(), NOW, layout_input=LayoutInput(demand(), parts(), ["user_id"]))
    [step] = plan.steps
    assert step.action == "rewrite_data_files"
    assert step.args == {"strategy": "sort", "sort_order": "user_id ASC NULLS LAST",
                         "where": "(ts >= TIMESTAMP '2026-11-01 00:00:00' AND ts < TIMESTAMP '2026-11-02 00:00:00')"}
    assert step.options["rewrite-all"] == "true"
    assert step.figures["columns"] == ["user_id"] and step.figures["depth"] == 10.0
    assert step.reason.startswith("layout: 40 scans filtered on user_id and still read 400 data files")
    assert json.dumps(step.figures)  # recorded in the action log as JSON
