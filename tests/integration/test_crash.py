"""Exactly-once across crashes: SIGKILL `icetide run` at random moments, restart, count ids."""

from __future__ import annotations

import json
import os
import random
import re
import time

from icetide.demo.events import create_topic, produce, sample_values
from tests.fixtures.stack import kill_group, start, table_ids, unique, wait_for

#: Four batches of 10,000 (`max_offsets_per_trigger`): the kills land after a batch, inside a commit
#: and at a random moment with batches still to come; more events would only make each batch longer.
N_EVENTS = 40_000
PER_BATCH = 10_000
BAD_EVERY = 1000


def test_sigkill_three_times_then_exactly_once(kafka, spark, make_pipeline, tmp_path) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("ICETIDE_CRASH_SEED", time.time()))
    print(f"seed {seed}")
    rng = random.Random(seed)
    topic, table = unique("crash"), f"it.{unique('crash')}"
    create_topic(kafka.bootstrap, topic, 4)
    produced = produce(kafka.bootstrap, topic, sample_values(N_EVENTS, bad_every=BAD_EVERY), partitions=4)
    assert produced.good + produced.bad == N_EVENTS
    cfg = make_pipeline(topic, table, source__max_offsets_per_trigger=PER_BATCH)
    log = tmp_path / "run.log"
    kills: list[str] = []

    # 1) a random moment after the first batch completed
    pos = log.stat().st_size if log.exists() else 0
    proc = start(cfg, log)
    wait_for(log, r'"event": "batch"', pos)
    time.sleep(rng.uniform(0.0, 3.0))
    kill_group(proc)
    kills.append("after a completed batch")

    # 2) while an Iceberg commit is in flight: right after a table write started
    pos = log.stat().st_size
    proc = start(cfg, log)
    m = wait_for(log, r"committing batch (\d+) to (\S+)", pos)
    time.sleep(rng.uniform(0.0, 0.15))
    kill_group(proc)
    in_flight_batch = int(m.group(1))
    tail = log.read_text(errors="replace")[m.end():]
    assert f'"batch": {in_flight_batch},' not in tail, "the kill landed after the batch finished"
    kills.append(f"during the write of batch {in_flight_batch}")

    # 3) a random moment of the run, possibly during start-up or planning
    pos = log.stat().st_size
    proc = start(cfg, log)
    time.sleep(rng.uniform(4.0, 15.0))
    kill_group(proc)
    kills.append("at a random moment")

    # 4) run to the end from the same checkpoint
    proc = start(cfg, log, "--until-idle", "--for", "600")
    assert proc.wait(700) == 0, log.read_text()[-3000:]

    ids = table_ids(spark, table)
    assert len(ids) == len(set(ids)), f"duplicates after kills {kills}"
    assert len(ids) == produced.good and set(ids) == set(produced.ids), f"missing rows after kills {kills}"
    dead = spark.sql(f"SELECT _kafka_partition, _kafka_offset FROM icetide.{table}_dlq").collect()
    assert len(dead) == len({(r[0], r[1]) for r in dead}) == produced.bad
    batches = [json.loads(x) for x in re.findall(r"(\{\"event\": \"batch\".*\})", log.read_text())]
    assert len(batches) >= 4


def test_sigkill_between_two_tables_of_one_batch_then_every_table_exactly_once(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path) -> None:
    from icetide.lake.offsets import read_watermark
    from tests.fixtures.records import dumps, send
    from tests.fixtures.stack import assert_ids_per_table, routed_config

    ns = unique("kx")
    topic = f"kx-{ns[3:]}"
    create_topic(kafka.bootstrap, topic, 4)
    kinds = [f"k{i}" for i in range(8)]
    seed = int(os.environ.get("ICETIDE_CRASH_SEED", time.time()))
    print(f"seed {seed}")
    rng = random.Random(seed)
    # eight batches of 4,000 over eight tables: every batch writes every table, so a kill can land
    # between two of them in any batch, and the restarted run still has batches left to kill
    records = [{"id": f"m{i}", "kind": kinds[rng.randrange(len(kinds))], "n": i} for i in range(32_000)]
    send(kafka.bootstrap, topic, [dumps(r) for r in records], 4)
    cfg = routed_config(kafka, lake, tmp_path, ns, topic)
    text = cfg.read_text().replace("max_offsets_per_trigger: 20000", "max_offsets_per_trigger: 4000")
    cfg.write_text(text + "\n")
    import yaml

    raw = yaml.safe_load(cfg.read_text())
    raw["stream"]["table_write_parallelism"] = 1  # commits one table after the other: the kill lands between
    cfg.write_text(yaml.safe_dump(raw))
    log = tmp_path / "run.log"

    # 1) kill right after the first table of a batch committed, before the second one did
    proc = start(cfg, log)
    wait_for(log, r'"event": "batch"', 0)  # batch 0 creates the tables; kill inside a later batch
    pos = log.stat().st_size
    first = wait_for(log, r"committing batch (\d+) to (\S+)", pos)
    second = wait_for(log, rf"committing batch {first.group(1)} to (\S+)", first.end())
    kill_group(proc)
    batch = int(first.group(1))
    holding = [t for t in (f"icetide.{ns}.{k}" for k in kinds)
               if (w := read_watermark(spark, t, ns.replace("_", "-"))) is not None and w.batch >= batch]
    assert 1 <= len(holding) < len(kinds), f"batch {batch} was not partial: {holding} ({second.group(1)})"

    # 2) kill at a random moment of the restarted run
    pos = log.stat().st_size
    proc = start(cfg, log)
    wait_for(log, r"committing batch", pos)
    time.sleep(rng.uniform(0.0, 4.0))
    kill_group(proc)

    # 3) run to the end
    proc = start(cfg, log, "--until-idle", "--for", "600")
    assert proc.wait(700) == 0, log.read_text()[-3000:]
    assert_ids_per_table(spark, ns, records, kinds)
