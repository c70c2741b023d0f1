"""Ingestion + in-process maintenance for ICETIDE_SOAK_SECONDS (default 170 s in CI; run it for
20+ minutes with ICETIDE_SOAK_SECONDS=1200 as a longer soak).

An event clock advances one event-hour per wall-clock minute, so `hours(event_time)` partitions
turn cold one after another while the stream keeps writing the current one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta

import yaml

from icetide.demo.events import create_topic
from tests.fixtures.records import RateProducer
from tests.fixtures.stack import pipeline_dict, stop_once_landed, table_ids, unique

SOAK_SECONDS = float(os.environ.get("ICETIDE_SOAK_SECONDS", "170"))  # CI variant; 1200+ as a benchmark
RATE = 200  # events/s
QUIET = 45  # hot_partition_quiet_seconds
INTERVAL = 60  # maintenance.interval
MAX_INGEST_LATENCY = 15  # Kafka timestamp -> commit, bound for a 5 s trigger at this rate
MIN_INPUT_FILES = 5
SETTLE_COMMITS = 2  # closed_partition_settle_commits (the default)
BASE = datetime(2026, 1, 1)


def test_soak_ingest_with_maintenance(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic, table = unique("soak"), f"sk.{unique('events')}"
    create_topic(kafka.bootstrap, topic, 4)
    cfg = pipeline_dict(kafka, lake, tmp_path, topic, table, maintenance={
        "in_run": True, "interval": f"{INTERVAL} seconds", "min_interval": "20 seconds",
        "log_table": "sk.maintenance",
        "policy": {"hot_partition_quiet_seconds": QUIET, "min_input_files": MIN_INPUT_FILES,
                   "closed_partition_settle_commits": SETTLE_COMMITS, "snapshots_trigger": 60,
                   "snapshot_retain_last": 20, "snapshot_max_age_seconds": 60, "manifests_trigger": 40}},
        health={"namespaces": ["sk"], "history_table": "sk.health"})
    cfg["target"]["partition_by"] = ["hours(event_time)"]
    cfg["stream"]["trigger_interval"] = "5 seconds"
    path = tmp_path / "soak.yaml"
    path.write_text(yaml.safe_dump(cfg))

    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "icetide.cli.main", "run", "-c", str(path), "--for",
                                 str(SOAK_SECONDS + 60)], stdout=out, stderr=subprocess.STDOUT)
    t0 = time.time()

    def event(i: int) -> dict[str, object]:
        hour = int((time.time() - t0) // 60)
        return {"id": f"soak-{i:09d}", "event_time": (BASE + timedelta(hours=hour, seconds=i % 3600)).isoformat() + "Z",
                "user_id": i, "event_type": "view", "amount": 1.0}

    producer = RateProducer(kafka.bootstrap, topic, RATE, event).start()
    time.sleep(SOAK_SECONDS)
    ids = producer.stop()
    stop_once_landed(proc, lambda: spark.sql(f"SELECT count(*) FROM icetide.{table}").first()[0], len(ids), log)
    text = log.read_text()
    fq = f"icetide.{table}"

    # exactly once, and no streaming failure or restart
    got = table_ids(spark, table)
    assert len(got) == len(set(got)) == len(ids) and set(got) == set(ids)
    assert "query failed" not in text and "restarting after" not in text

    # maintenance ran, and rewrote a partition fully only once it was quiet, or once it was closed: the
    # stream had moved on to a newer hour and SETTLE_COMMITS more of its batches had committed since
    actions = spark.sql("SELECT started_at, step, outcome, arguments FROM icetide.sk.maintenance "
                        f"WHERE table_name = '{fq}'").collect()
    rewrites = [a for a in actions if a["step"] == "rewrite_data_files" and a["outcome"] == "ok"]
    assert len(rewrites) >= max(1, int(SOAK_SECONDS // 60) - 4), [(a["step"], a["outcome"]) for a in actions]
    assert not [a for a in actions if a["outcome"] == "failed"]
    written = {r["h"]: (r["first"], r["last"]) for r in spark.sql(
        f"SELECT date_trunc('HOUR', event_time) h, min(_kafka_timestamp) first, max(_kafka_timestamp) last "
        f"FROM {fq} GROUP BY 1").collect()}
    # a batch's offsets are written before it commits, and after every record it reads was produced
    batches = [f.stat().st_mtime for f in (tmp_path / "checkpoint" / "offsets").iterdir() if f.name.isdigit()]
    early = 0
    for a in rewrites:
        where, began = json.loads(a["arguments"])["args"]["where"], a["started_at"]
        for start in re.findall(r"event_time >= TIMESTAMP '([^']+)'", where):
            hour = datetime.fromisoformat(start)
            last = written[hour][1]
            if (began - last).total_seconds() >= QUIET - MAX_INGEST_LATENCY:
                continue
            early += 1
            assert any(h > hour and first < began for h, (first, _) in written.items()), (start, began, written)
            since = sum(1 for t in batches if last.timestamp() < t < began.timestamp())
            assert since >= 1 + SETTLE_COMMITS, (start, began, last, since)  # its last batch, then the settle ones
    print(f"{len(rewrites)} full rewrites, {early} of a closed hour before its quiet time")

    # cold partitions compacted below the policy bound; hot ones bounded; snapshots bounded
    files = {r["h"]: r["n"] for r in spark.sql(
        f"SELECT partition.event_time_hour h, count(*) n FROM {fq}.files WHERE content = 0 GROUP BY 1").collect()}
    cold_before = int((time.time() - t0 - QUIET - 2 * INTERVAL - 60) // 60)
    elapsed_hours = int((time.time() - t0) // 60)
    first_hour = min(files)
    for h, n in files.items():
        if h - first_hour < cold_before:
            assert n < MIN_INPUT_FILES, (h, n, files)
        assert n <= 4 * (60 + QUIET + 2 * INTERVAL) // 5, (h, n)
    assert elapsed_hours >= 1
    snapshots = spark.sql(f"SELECT count(*) FROM {fq}.snapshots").first()[0]
    assert snapshots <= 60 + 2 * INTERVAL // 5, snapshots
