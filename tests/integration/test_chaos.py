"""The chaos run in CI (#41): a fixed seed for ICETIDE_CHAOS_MINUTES (default 2) over its own Kafka
broker and lake, every check exact. Longer runs with new seeds: ``scripts/chaos.sh --minutes 30
--seed S --record`` (results under tests/chaos/results/). Costs about the run's minutes plus two
for the start, the drain and the checks."""

from __future__ import annotations

import os
from pathlib import Path

from tests.chaos.run import Chaos

SEED = int(os.environ.get("ICETIDE_CHAOS_SEED", "4327"))
MINUTES = float(os.environ.get("ICETIDE_CHAOS_MINUTES", "2"))


def test_a_seeded_fault_schedule_leaves_every_record_exact(tmp_path: Path) -> None:
    print(f"chaos seed {SEED}, {MINUTES} minutes (replay: scripts/chaos.sh --seed {SEED} --minutes {MINUTES})")
    chaos = Chaos(SEED, MINUTES, tmp_path)
    report = chaos.run()
    kinds = {f["kind"] for f in report["faults"]}
    assert len(kinds) >= 4, f"the schedule met too few kinds of fault to prove anything: {sorted(kinds)}"
    # the producer runs beside three test workers: a floor well under the nominal 100 records/s
    assert report["produced"]["append"] > 40 * 60 * MINUTES and report["produced"]["cdc"] > 5_000
    failed = [f"{c['name']}: {c['detail']}" for c in report["checks"] if not c["ok"]]
    assert not failed, "\n".join(failed)
