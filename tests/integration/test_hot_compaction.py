"""The partition being written is compacted while the stream writes it (tiered minor compaction).

`icetide run` with in-run maintenance streams into a `days(event_time)` table whose every record
falls in one day, so that partition is hot for the whole run. Sampled every few seconds, its data
file count stays under the tier bound while an unmaintained stream would add one file per commit;
every id lands exactly once and no stream commit fails.

The stream runs for SECONDS, and on until it has appended three times the bound in files (a slow or
busy machine commits fewer batches in the same time): the comparison with an unmaintained table is
made at the same strength on every machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta

import yaml

from icetide.demo.events import create_topic
from tests.fixtures.records import RateProducer
from tests.fixtures.stack import pipeline_dict, stop_once_landed, table_ids, unique

SECONDS = float(os.environ.get("ICETIDE_HOT_SECONDS", "210"))
RATE = 300  # events/s
TRIGGER = 2  # seconds
FANOUT = 4
TARGET = 1024 * 1024  # write.target-file-size-bytes: tiers 256 KiB, 64 KiB, 16 KiB, 4 KiB, ...
INTERVAL, MIN_INTERVAL = 20, 10  # maintenance cycle bounds (seconds)
DAY = datetime(2026, 3, 1)


def test_hot_partition_stays_compacted_while_streaming(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic, table = unique("hot"), f"hc.{unique('events')}"
    create_topic(kafka.bootstrap, topic, 2)
    cfg = pipeline_dict(kafka, lake, tmp_path, topic, table, maintenance={
        "in_run": True, "interval": f"{INTERVAL} seconds", "min_interval": f"{MIN_INTERVAL} seconds",
        "log_table": "hc.maintenance",
        "policy": {"tier_fanout": FANOUT, "snapshots_trigger": 1000}},
        health={"namespaces": ["hc"], "history_table": "hc.health"})
    cfg["target"]["properties"] = {"write.target-file-size-bytes": str(TARGET)}
    cfg["source"]["records_per_task"] = None  # one file per Kafka partition per commit: twice the small files
    cfg["stream"]["trigger_interval"] = f"{TRIGGER} seconds"
    path = tmp_path / "hot.yaml"
    path.write_text(yaml.safe_dump(cfg))
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "icetide.cli.main", "run", "-c", str(path), "--for",
                                 str(2 * SECONDS + 45)], stdout=out, stderr=subprocess.STDOUT)
    producer = RateProducer(kafka.bootstrap, topic, RATE, lambda i: {
        "id": f"hot-{i:08d}", "event_time": (DAY + timedelta(seconds=i % 86_000)).isoformat() + "Z", "user_id": i,
        "event_type": "view", "amount": 1.0}).start()
    fq = f"icetide.{table}"
    samples: list[tuple[float, int, int]] = []  # (seconds, data files in the day, files appended so far)
    # bounded: after the first cycles, never more than (fanout - 1) files per tier plus the files of
    # two cycle intervals' commits (one file per Kafka partition per commit); an unmaintained table
    # holds every file ever appended
    tiers = 5  # 256 KiB .. 1 KiB-sized files at this rate and target
    bound = (FANOUT - 1) * tiers + 2 * 2 * INTERVAL // TRIGGER
    t0 = time.time()

    def more() -> bool:
        elapsed = time.time() - t0
        return elapsed < SECONDS or (elapsed < 2 * SECONDS and (not samples or samples[-1][2] < 3 * bound))

    while more():
        time.sleep(5)
        try:
            files = spark.sql(f"SELECT count(*) FROM {fq}.files WHERE content = 0").first()[0]
            commits = spark.sql(f"SELECT coalesce(sum(CAST(summary['added-data-files'] AS INT)), 0) "
                                f"FROM {fq}.snapshots WHERE operation = 'append'").first()[0]
        except Exception:  # the table is created by the first batch
            continue
        samples.append((round(time.time() - t0, 1), int(files), int(commits)))
    ids = producer.stop()
    stop_once_landed(proc, lambda: spark.sql(f"SELECT count(*) FROM icetide.{table}").first()[0], len(ids), log)
    text = log.read_text()
    print("samples (s, files, files appended):", samples)

    # exactly once; no stream failure or restart
    got = table_ids(spark, table)
    assert len(got) == len(set(got)) == len(ids) and set(got) == set(ids)
    assert "query failed" not in text and "restarting after" not in text

    # the day is one hot partition the whole time
    parts = spark.sql(f"SELECT to_json(partition) p FROM {fq}.partitions").collect()
    assert [r["p"] for r in parts] == ['{"event_time_day":"2026-03-01"}']

    # minor compaction ran on it, never failed, and the full compaction never touched it
    actions = spark.sql(f"SELECT step, outcome, files_in, files_out FROM icetide.hc.maintenance "
                        f"WHERE table_name = '{fq}'").collect()
    hot = [a for a in actions if a["step"] == "rewrite_hot_files"]
    assert len([a for a in hot if a["outcome"] == "ok" and a["files_in"]]) >= 3, actions
    assert not [a for a in actions if a["outcome"] == "failed"], actions
    assert not [a for a in actions if a["step"] == "rewrite_data_files" and a["outcome"] == "ok"], actions

    steady = [s for s in samples if s[0] >= 60]
    assert steady and max(f for _, f, _ in steady) <= bound, (bound, samples)
    appended = samples[-1][2]
    assert appended >= 3 * bound, samples  # the bound is far below what an unmaintained table would hold

    # one manifest per ~1,000 live files (min-count-to-merge 2, target 256 KiB on tables icetide creates):
    # ~100 commits would otherwise leave one manifest each until Iceberg's default of 100
    manifests = spark.sql(f"SELECT count(*) FROM {fq}.manifests").first()[0]
    commits = spark.sql(f"SELECT count(*) FROM {fq}.snapshots").first()[0]
    assert manifests <= 2 and commits >= 40, (manifests, commits)
