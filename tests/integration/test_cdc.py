"""CDC on the real stack: changes with duplicates, out-of-order deliveries and replays over thousands
of keys; the table must equal the independently computed final state, row for row.

Sizes: 100,000 changes over 10,000 keys (3 batches of 40,000) give every key several changes, a
delete on 15% of them, 3% duplicates, shuffles in windows of 500 and 2% replays of changes older
than 1,000 deliveries, in every batch: all the orderings the MERGE must get right. More changes only
make each batch longer."""

from __future__ import annotations

import json
import logging
import os
import random
import time

import yaml

from icetide.config import load_config
from icetide.demo.events import create_topic
from icetide.health.collector import collect
from icetide.lake.meta_spark import SparkMeta
from icetide.lake.offsets import read_watermark
from icetide.maintenance.cycle import plan_all, run_cycle
from tests.fixtures.cdc_stream import assert_final_state, cdc_config, generate, send_changes
from tests.fixtures.stack import kill_group, run_in_process, start, unique, wait_for

KEYS, CHANGES = 10_000, 100_000
PER_BATCH = 40_000


def test_debezium_changes_land_as_the_exact_final_state_on_merge_on_read(kafka, spark, lake, tmp_path,  # type: ignore[no-untyped-def]
                                                                         caplog) -> None:
    topic, table = unique("cdc"), f"it.{unique('customers')}"
    create_topic(kafka.bootstrap, topic, 4)
    stream = generate(KEYS, CHANGES, seed=41, debezium=True, bad_every=997)
    assert stream.changes >= CHANGES and len({k for k, _ in stream.messages}) >= KEYS
    send_changes(kafka.bootstrap, topic, stream)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"format": "debezium", "ordering": "source.lsn"})
    raw = yaml.safe_load(cfg.read_text())
    raw["source"]["max_offsets_per_trigger"] = PER_BATCH
    cfg.write_text(yaml.safe_dump(raw))

    caplog.set_level(logging.INFO, logger="icetide")
    runner = run_in_process(spark, cfg)

    assert_final_state(spark, table, stream)
    fq = f"icetide.{table}"
    # a Debezium change's row may come as a JSON string its envelope's shape never sees: inferred every batch
    events = [json.loads(r.getMessage()) for r in caplog.records
              if r.name == "icetide.ingest.sink" and r.getMessage().startswith('{"event": "batch"')
              and json.loads(r.getMessage())["records"]]
    assert len(events) >= 3 and all(table in e["inferred"] for e in events), [e["inferred"] for e in events]
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {fq}").collect()}
    assert props["write.merge.mode"] == props["write.update.mode"] == props["write.delete.mode"] == "merge-on-read"
    # dead letters: changes without a key or with an unknown operation, with the reason
    dlq = {r[0]: r[1] for r in spark.sql(f"SELECT error_class, count(*) FROM {fq}_dlq GROUP BY 1").collect()}
    assert dlq == stream.bad
    msg = spark.sql(f"SELECT error_message FROM {fq}_dlq WHERE error_class = 'unknown_operation'").first()[0]
    assert msg.startswith("operation the envelope's 'op' is 'x'; known:")
    # every MERGE is tagged: the table's offsets are Kafka's end offsets
    wm = read_watermark(spark, fq, runner.cfg.name)
    assert wm is not None and sum(wm.offsets.values()) == len(stream.messages)
    ops = {r[0] for r in spark.sql(f"SELECT operation FROM {fq}.snapshots").collect()}
    assert "overwrite" in ops or "delete" in ops
    # the delete files merge-on-read creates are visible in the health figures
    h = collect(SparkMeta(spark, "icetide"), table)
    assert h.delete_files > 0 and h.deleted_records > 0 and h.delete_ratio > 0

    # while hot (being written): deletes applied by a hot rewrite, then the delete files it left
    # pointing at replaced data files dropped. On a second catalog entry over the same metadata (the
    # cold path below runs on the table itself); dropped without PURGE.
    hot = f"{table}_hot"
    meta = spark.sql(f"SELECT file FROM {fq}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]
    spark.sql(f"CALL icetide.system.register_table(table => '{hot}', metadata_file => '{meta}')")
    raw = yaml.safe_load(cfg.read_text())
    raw["maintenance"] = {"log_table": f"{table}_mlog", "policy": {"delete_files": 2, "hot_delete_ratio": 0.01,
                                                                   "steps": ["rewrite_hot_files",
                                                                             "rewrite_position_delete_files"]}}
    cfg.write_text(yaml.safe_dump(raw))
    _, records = run_cycle(spark, load_config(cfg), [hot])
    assert [(r.step, r.outcome) for r in records] == [("rewrite_hot_files", "ok"),
                                                     ("rewrite_position_delete_files", "ok")], records
    merged = collect(SparkMeta(spark, "icetide"), hot)
    assert merged.delete_files < h.delete_files and merged.deleted_records < h.deleted_records, (merged, h)
    assert_final_state(spark, hot, stream)
    spark.sql(f"DROP TABLE icetide.{hot}")

    # maintenance: the delete trigger fires, deletes are applied, the state is unchanged
    raw["maintenance"] = {"log_table": f"{table}_mlog", "rewrites_per_cycle": 4,
                          "policy": {"hot_partition_quiet_seconds": 0, "delete_files": 2}}
    cfg.write_text(yaml.safe_dump(raw))
    mcfg = load_config(cfg)
    plans = plan_all(spark, mcfg, [table])
    steps = {s.action: s for p in plans for s in p.steps}
    assert "rewrite_data_files" in steps and "delete ratio" in steps["rewrite_data_files"].reason
    _, records = run_cycle(spark, mcfg, [table])
    assert {r.step: r.outcome for r in records}.get("rewrite_data_files") == "ok", records
    run_cycle(spark, mcfg, [table])  # next cycle: dangling position deletes are dropped
    assert_final_state(spark, table, stream)
    live = spark.sql(f"SELECT count(*) FROM {fq}.delete_files").first()[0]
    assert live < h.delete_files, (live, h.delete_files)


def test_cdc_sigkill_three_times_format_v3_then_exact_final_state(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("ICETIDE_CRASH_SEED", time.time()))
    print(f"seed {seed}")
    rng = random.Random(seed)
    topic, table = unique("cdck"), f"it.{unique('accounts')}"
    create_topic(kafka.bootstrap, topic, 4)
    stream = generate(KEYS // 2, CHANGES // 2, seed=43, debezium=False)  # half size: three restarts
    send_changes(kafka.bootstrap, topic, stream)
    cfg = cdc_config(kafka, lake, tmp_path, topic, table, {"ordering": "version"}, **{"format-version": "3"})
    raw = yaml.safe_load(cfg.read_text())
    raw["source"]["max_offsets_per_trigger"] = 9_000  # ~6 batches: every kill lands in a running batch
    cfg.write_text(yaml.safe_dump(raw))
    log = tmp_path / "run.log"
    for i in range(3):
        pos = log.stat().st_size if log.exists() else 0
        proc = start(cfg, log)
        wait_for(log, r"committing batch", pos, timeout=300)
        time.sleep(rng.uniform(0.0, 6.0) if i != 1 else rng.uniform(0.0, 0.5))
        kill_group(proc)
    proc = start(cfg, log, "--until-idle", "--for", "900")
    assert proc.wait(1000) == 0, log.read_text()[-3000:]
    assert_final_state(spark, table, stream)
    assert spark.sql(f"SHOW TBLPROPERTIES icetide.{table} ('format-version')").first()[1] == "3"
