"""The chaos run's schedule is a pure function of its seed, and its gap reading is exact (no JVM)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

from tests.chaos.checks import held_expectation, reported_gaps
from tests.chaos.schedule import APPEND_ONLY, FULL_KINDS, FULL_PIPELINES, KINDS, SERVICES, plan
from tests.fixtures.cdc_stream import generate


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


def test_chaos_1404_a_cdc_check_holds_icetide_to_what_kafka_holds() -> None:
    """Seed 1404: the harness's CDC producer lost every change after a broker outage without a
    word, and icetide was held to changes Kafka never had. The checks now read the topic back."""
    stream = generate(keys=40, changes=400, seed=3, debezium=True, bad_every=50, kafka_tombstones=True)
    every = Counter(v for _k, v in stream.messages if v is not None)
    assert held_expectation(stream, every) == (stream.final, stream.bad, 0)
    # the newest change of a key never reached Kafka: the key's older version is what must show
    newest = max(stream.history)
    ch = stream.history[newest]
    value = next(v for (_k, v), label in zip(stream.messages, stream.labels, strict=True) if label == newest)
    final, bad, absent = held_expectation(stream, every - Counter({value: every[value]}))
    older = [c for c in stream.history.values() if c["key"] == ch["key"] and c["version"] < newest]
    prior = max(older, key=lambda c: c["version"]) if older else None
    assert absent == 1 and bad == stream.bad
    assert final.get(ch["key"]) == (None if prior is None or prior["op"] == "d"
                                    else (prior["row"]["name"], prior["row"]["balance"]))
    assert {k: v for k, v in final.items() if k != ch["key"]} == {k: v for k, v in stream.final.items()
                                                                 if k != ch["key"]}
    # a bad change Kafka holds twice (sent again after a failed delivery that had landed): two dead letters
    bad_value = next(v for (_k, v), label in zip(stream.messages, stream.labels, strict=True)
                     if label == "unknown_operation")
    assert held_expectation(stream, every + Counter({bad_value: 1}))[1] == {
        **stream.bad, "unknown_operation": stream.bad["unknown_operation"] + 1}


def test_a_cdc_dead_letter_check_matches_bad_changes_record_for_record() -> None:
    """Review of #41: the CDC dead-letter check compared totals per class, so one bad change lost and
    another dead-lettered twice passed. It now matches (class, value) record for record."""
    from tests.chaos.checks import bad_held

    stream = generate(keys=40, changes=400, seed=3, debezium=True, bad_every=50, kafka_tombstones=True)
    every = Counter(v for _k, v in stream.messages if v is not None)
    due = bad_held(stream, every)
    assert sum(due.values()) == sum(stream.bad.values()) > 1
    assert Counter(label for label, _v in due.elements()) == Counter(stream.bad)
    (a_label, a), (b_label, b) = list(due)[:2]
    swapped = due - Counter({(a_label, a): 1}) + Counter({(b_label, b): 1})  # one lost, another twice
    assert sum((due - swapped).values()) + sum((swapped - due).values()) == 2
    # a bad change Kafka holds twice is two dead letters
    assert bad_held(stream, every + Counter({a: 1}))[(a_label, a)] == 2
    # one Kafka no longer holds is due none
    assert (a_label, a) not in bad_held(stream, every - Counter({a: every[a]}))
