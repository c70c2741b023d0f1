"""The chaos run's schedule is a pure function of its seed, and its gap reading is exact (no JVM)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from tests.chaos.checks import reported_gaps
from tests.chaos.schedule import APPEND_ONLY, FULL_KINDS, FULL_PIPELINES, KINDS, SERVICES, plan


def test_the_same_seed_gives_the_same_faults_and_another_seed_others() -> None:
    assert plan(7, 1800) == plan(7, 1800)
    assert plan(7, 1800) != plan(8, 1800)


def test_a_long_run_meets_every_kind_and_leaves_a_quiet_tail() -> None:
    for seed in range(5):
        faults = plan(seed, 1800)
        print(f"seed {seed}: {len(faults)} faults")
        assert {f.kind for f in faults} == set(KINDS)
        assert all(f.at + f.duration <= 1800 - 30 for f in faults)
        assert all(f.pipeline == "append" for f in faults if f.kind in APPEND_ONLY)
        assert all(b.at >= a.at + a.duration for a, b in itertools.pairwise(faults))  # one at a time


def test_the_full_stack_meets_its_services_faults_and_the_avro_pipeline() -> None:
    for seed in range(5):
        faults = plan(seed, 1800, kinds=FULL_KINDS, pipelines=FULL_PIPELINES)
        print(f"seed {seed}: {len(faults)} faults")
        assert {f.kind for f in faults} == set(FULL_KINDS)
        assert {f.pipeline for f in faults if f.kind in SERVICES} == {"-"}
        assert {f.pipeline for f in faults if f.kind == "kill"} <= set(FULL_PIPELINES)
        assert {f.pipeline for f in faults if f.kind == "executor"} == {"avro"}  # the pipeline on the cluster
        assert any(f.pipeline == "avro" for f in faults)
        assert all(b.at >= a.at + a.duration for a, b in itertools.pairwise(faults))


def test_the_local_stack_draws_no_service_fault() -> None:
    assert not {f.kind for s in range(5) for f in plan(s, 1800)} & {"registry", "rest", "store", "executor"}
    assert not any(f.pipeline == "avro" for s in range(5) for f in plan(s, 1800))


def test_gaps_are_read_from_the_alerts_the_runs_logged(tmp_path: Path) -> None:
    alert = {"event": "kafka_gap", "pipeline": "p", "partition": "chaos-ev-a[1]", "lost_from": 100, "lost_to": 150}
    log = tmp_path / "run.log"
    log.write_text("WARNING something\n" + json.dumps(alert) + "\nINFO {\"event\": \"batch\"}\n"
                   + json.dumps({**alert, "partition": "x[0]", "lost_from": 0, "lost_to": 3}) + "\n"
                   + json.dumps({**alert, "table": "chaos.orders", "lost_from": 90, "lost_to": 100}) + "\n")
    assert reported_gaps([log, tmp_path / "absent.log"]) == {("chaos-ev-a", 1): [(100, 150, None), (90, 100, "orders")],
                                                              ("x", 0): [(0, 3, None)]}
