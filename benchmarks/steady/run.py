"""A streaming day, compressed: does a table being streamed into query as fast as a fully compacted
copy of itself, including the partition being written right now?

One producer at a fixed rate; one `icetide run` ingests identical data into two arms of three
tables each (a ``days(event_time)`` table, an ``hours(event_time)`` table, a merge-on-read CDC
table): ``*_plain`` unmaintained, ``*_ice`` maintained by icetide (`icetide maintain --watch`, its
own process so its CPU is measured exactly). Event time runs ``86400 / duration`` times faster than
the wall clock, so the run covers one day: the day table has one partition, hot all the time, and
the hour table gets 24 partitions that turn cold one by one. Every ``--sample-every`` seconds the
third arm is built: the unmaintained table's current state copied and fully compacted and sorted.
Then the query mix (point lookup by key, the last event-hour, the day by type) runs on all three
arms through Spark and through PyIceberg (no JVM).

    .venv/bin/python -m benchmarks.steady.run [--minutes 30] [--rate 400] [--cdc-rate 40] [--trigger "10 seconds"]

Results: benchmarks/steady/results/steady.json, results.md, *.png (see report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

from benchmarks.ingest.run import machine  # noqa: E402
from benchmarks.steady import measure, report  # noqa: E402
from benchmarks.steady.load import APPEND_FAMILIES, ARMS, Load, tree_cpu_seconds  # noqa: E402
from icetide import paths  # noqa: E402

FAMILIES = (*APPEND_FAMILIES, "cdc")
QUIET_SECONDS = 120  # the hour table's partitions turn cold 2 minutes (≈ 1.6 event-hours) after their last write


def pipeline(bootstrap: str, work: Path, trigger: str, maintain_every_s: float = 60,
             fanout: int | None = None, snapshot_max_count: int | None = None, cdc_format: int = 2,
             hot_delete_ratio: float | None = None) -> dict[str, Any]:
    topics = [f"{f}_{a}" for f in FAMILIES for a in ARMS]
    return {
        "name": "steady",
        "source": {"bootstrap_servers": bootstrap, "topics": topics, "starting_offsets": "earliest",
                   "max_offsets_per_trigger": 500_000},
        "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 'catalog.db'}", "warehouse": str(work / "warehouse")},
        "target": {
            "route": {"by": "topic", "table": "bench.{value}", "namespaces": ["bench"], "max_tables": 10},
            "schema": "id STRING, event_time TIMESTAMP, user_id BIGINT, event_type STRING, amount DOUBLE",
            "properties": {"write.target-file-size-bytes": str(measure.TARGET), "format-version": "2"},
            "tables": {
                "bench.day_*": {"partition_by": ["days(event_time)"]},
                "bench.hour_*": {"partition_by": ["hours(event_time)"]},
                "bench.cdc_*": {"schema": "id BIGINT, name STRING, balance DOUBLE",
                                "properties": {"write.target-file-size-bytes": str(measure.TARGET),
                                               "format-version": str(cdc_format)},
                                "cdc": {"primary_key": ["id"], "ordering": "version",
                                        "write_mode": "merge-on-read"}},
            },
        },
        "dead_letter": {"table": "bench_meta.dead_letters"},
        "stream": {"trigger_interval": trigger, "checkpoint_location": str(work / "checkpoint"),
                   "batch_log_table": "bench_meta.batches"},
        "health": {"namespaces": ["bench"], "history_table": "bench_meta.health"},
        "maintenance": {
            "log_table": "bench_meta.maintenance", "interval": f"{maintain_every_s:g} seconds",
            "min_interval": "10 seconds",
            "policy": {"hot_partition_quiet_seconds": QUIET_SECONDS, **({"tier_fanout": fanout} if fanout else {}),
                       **({"snapshot_max_count": snapshot_max_count} if snapshot_max_count else {}),
                       **({"hot_delete_ratio": hot_delete_ratio} if hot_delete_ratio is not None else {})},
            "overrides": {"bench.*_plain": {"steps": []}},
        },
        "spark": {"master": "local[2]", "conf": {"spark.driver.memory": "4g"}},
    }


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - owned by the child
    return subprocess.Popen([sys.executable, "-m", "icetide.cli.main", *args], stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def wait_tables(spark: Any, tables: list[str], timeout: float = 300) -> None:
    from icetide.lake.tables import table_exists

    deadline = time.monotonic() + timeout
    while not all(table_exists(spark, f"{measure.CAT}.{t}") for t in tables):
        if time.monotonic() > deadline:
            raise RuntimeError(f"tables not created within {timeout}s: {tables}")
        time.sleep(5)


def sample(spark: Any, queries: measure.Queries, load: Load, rng: random.Random, elapsed: float) -> dict[str, Any]:
    out: dict[str, Any] = {"elapsed_s": round(elapsed), "produced": load.produced, "families": {}}
    now_event = load.event_time()
    out["event_time"] = now_event.isoformat()
    for fam in FAMILIES:
        copy_s = measure.build_compacted_copy(spark, fam)
        point = rng.randrange(load.keys) if fam == "cdc" else rng.choice(load.ids[: max(1, len(load.ids) * 3 // 4)])
        names = ("plain", "ice", "compact")
        layouts = {arm: measure.layout(spark, fam, arm) for arm in names}
        timed = queries.run(fam, names, point, now_event)
        arms = {arm: {"layout": layouts[arm], "queries": timed[arm]} for arm in names}
        out["families"][fam] = {"copy_seconds": round(copy_s, 1), "arms": arms}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=int, default=400, help="append events/s (to each append table of each arm)")
    ap.add_argument("--cdc-rate", type=int, default=40, help="CDC changes/s (to each arm)")
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--sample-every", type=float, default=300, help="seconds")
    ap.add_argument("--trigger", default="10 seconds", help="the pipeline's trigger interval")
    ap.add_argument("--maintain-every", type=float, default=60, help="seconds between maintenance cycles")
    ap.add_argument("--fanout", type=int, default=None, help="maintenance.policy.tier_fanout (default: icetide's)")
    ap.add_argument("--snapshot-max-count", type=int, default=40,
                    help="maintenance.policy.snapshot_max_count of icetide's arm (0: by age only, icetide's default)")
    ap.add_argument("--cdc-format", type=int, default=2, choices=(2, 3),
                    help="Iceberg format version of both CDC arms (3: deletion vectors)")
    ap.add_argument("--hot-delete-ratio", type=float, default=None,
                    help="maintenance.policy.hot_delete_ratio of icetide's arm (default: icetide's)")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args()
    print(f"seed {args.seed}", flush=True)

    from icetide.config import load_config
    from icetide.config.policy import MaintenancePolicy
    from icetide.demo.events import create_topic
    from icetide.services.kafka import LocalKafka
    from icetide.spark import build_session

    work = paths.home() / "bench" / f"steady-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    broker = LocalKafka(port=39292)
    broker.reset()
    broker.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for fam in FAMILIES:
            for arm in ARMS:
                create_topic(broker.bootstrap, f"{fam}_{arm}", 2)
        cfg_path = work / "steady.yaml"
        cfg = pipeline(broker.bootstrap, work, args.trigger, args.maintain_every, args.fanout,
                       args.snapshot_max_count or None, args.cdc_format, args.hot_delete_ratio)
        cfg_path.write_text(yaml.safe_dump(cfg))
        duration = args.minutes * 60
        # build_session opens the catalog, creating its SQLite schema before the ingest and maintenance
        # processes open it (two JVMs creating it at once can fail one: "duplicate column name: iceberg_type")
        spark = build_session(load_config(cfg_path))
        load = Load(broker.bootstrap, args.rate, args.cdc_rate, args.keys, 86400 / duration, args.seed).start()
        ingest = start(["run", "-c", str(cfg_path)], work / "ingest.log")
        procs.append(ingest)
        wait_tables(spark, [measure.table_of(f, a) for f in FAMILIES for a in ARMS])
        ice = [a for f in FAMILIES for a in ("-t", measure.table_of(f, "ice"))]
        maint = start(["maintain", "-c", str(cfg_path), *ice, "--watch"], work / "maintenance.log")
        procs.append(maint)
        queries = measure.Queries(spark, str(work / "catalog.db"), str(work / "warehouse"))
        rng = random.Random(args.seed)
        result: dict[str, Any] = {"machine": machine(), "seed": args.seed, "minutes": args.minutes,
                                  "rate": args.rate, "cdc_rate": args.cdc_rate, "keys": args.keys,
                                  "trigger": args.trigger, "quiet_seconds": QUIET_SECONDS,
                                  "maintain_every_s": args.maintain_every,
                                  "fanout": args.fanout or MaintenancePolicy().tier_fanout,
                                  "snapshot_max_count": args.snapshot_max_count or None,
                                  "cdc_format": args.cdc_format,
                                  "hot_delete_ratio": args.hot_delete_ratio if args.hot_delete_ratio is not None
                                  else MaintenancePolicy().hot_delete_ratio,
                                  "plan_with": "auto", "samples": []}
        args.out.mkdir(parents=True, exist_ok=True)
        next_at, ledger, polled = args.sample_every, measure.CommitLedger(queries.py, FAMILIES), 0.0
        while True:
            elapsed = time.time() - load.started
            if elapsed >= duration:
                break
            if elapsed - polled >= 60:  # before expiry drops a snapshot: it keeps the newest 20
                ledger.poll()
                polled = elapsed
            if elapsed < next_at:
                time.sleep(min(5, next_at - elapsed))
                continue
            s = sample(spark, queries, load, rng, elapsed)
            s["cpu_s"] = {"ingest": round(tree_cpu_seconds(ingest.pid), 1),
                          "maintenance": round(tree_cpu_seconds(maint.pid), 1)}
            result["samples"].append(s)
            (args.out / "steady.json").write_text(json.dumps(result, indent=1))
            print(f"sample at {s['elapsed_s']}s: " + report.one_line(s), flush=True)
            next_at += args.sample_every
        load.stop()
        result["produced"], result["changes"] = load.produced, load.changes
        time.sleep(30)  # let the last batches land
        result["cpu_s"] = {"ingest": round(tree_cpu_seconds(ingest.pid), 1),
                           "maintenance": round(tree_cpu_seconds(maint.pid), 1)}
        for p in procs:  # the driver only: it stops its query and its JVM cleanly
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(300)
        ledger.poll()
        result["end"] = finish(spark, work, cfg_path, ledger)
        (args.out / "steady.json").write_text(json.dumps(result, indent=1))
        report.write(result, args.out)
        print((args.out / "results.md").read_text())
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        broker.stop()


def finish(spark: Any, work: Path, cfg_path: Path, ledger: measure.CommitLedger) -> dict[str, Any]:
    """After the stream: row counts per arm, write amplification, maintenance actions, stream failures,
    and compaction throughput of icetide's rewrites vs a plain rewrite_data_files on the same data."""
    cat = measure.CAT
    end: dict[str, Any] = {"rows": {}, "write_amplification": {}}
    for fam in FAMILIES:
        end["rows"][fam] = {a: spark.sql(f"SELECT count(*) FROM {cat}.{measure.table_of(fam, a)}").first()[0]
                            for a in ARMS}
        end["write_amplification"][fam] = measure.write_amplification(spark, fam, "bench_meta.maintenance",
                                                                     ledger.ingested(fam))
        end["write_amplification"][fam]["ledger_gaps"] = ledger.gaps(fam)
    acts = spark.sql(f"SELECT table_name, step, outcome, bytes_in, seconds FROM {cat}.bench_meta.maintenance").collect()
    end["actions"] = {}
    for a in acts:
        key = f"{a['step']}:{a['outcome']}"
        end["actions"][key] = end["actions"].get(key, 0) + 1
    ok = [a for a in acts if a["outcome"] == "ok" and a["step"] in ("rewrite_hot_files", "rewrite_data_files")
          and a["bytes_in"]]
    end["icetide_rewrite"] = {"bytes": sum(int(a["bytes_in"]) for a in ok),
                              "seconds": round(sum(float(a["seconds"]) for a in ok), 1), "actions": len(ok)}
    ingest_log = (work / "ingest.log").read_text(errors="replace")
    end["stream_failures"] = ingest_log.count("query failed") + ingest_log.count("restarting after")
    end["merge_conflict_retries"] = ingest_log.count("conflicted with a concurrent commit")
    end["like_for_like"] = {fam: like_for_like(spark, cfg_path, fam) for fam in APPEND_FAMILIES}
    return end


def like_for_like(spark: Any, cfg_path: Path, family: str, rounds: int = 5) -> dict[str, Any]:
    """Compaction throughput on equal input: the unmaintained table's final state registered twice;
    one copy compacted by a plain ``rewrite_data_files`` call, the other by an icetide maintenance cycle
    (planning included, the partition cold). Idle machine, alternating order, best of ``rounds``."""
    from icetide.config import load_config
    from icetide.maintenance.cycle import run_cycle

    cfg = load_config(cfg_path)
    cfg.maintenance.overrides = {"bench_c.*": {"steps": ["rewrite_data_files"], "hot_partition_quiet_seconds": 0}}
    cfg.maintenance.log_table = "bench_meta.tput_log"
    meta = measure.metadata_file(spark, family, "plain")
    best: dict[str, dict[str, float]] = {}
    for r in range(rounds):
        for arm in (("plain", "icetide") if r % 2 == 0 else ("icetide", "plain")):
            copy = measure.register_copy(spark, f"tput_{family}_{arm}", meta)
            t0 = time.monotonic()
            if arm == "plain":
                row = spark.sql(f"CALL {measure.CAT}.system.rewrite_data_files(table => '{copy}')").first()
                rewritten = int(row["rewritten_bytes_count"])
                took = rewrite_s = time.monotonic() - t0
            else:
                _, records = run_cycle(spark, cfg, [copy])
                took = time.monotonic() - t0
                ok = [x for x in records if x.outcome == "ok" and x.bytes_in]
                rewritten = sum(int(x.bytes_in or 0) for x in ok)
                rewrite_s = sum(x.seconds for x in ok)  # the rewrite calls alone, icetide's options
            files = spark.sql(f"SELECT count(*) FROM {measure.CAT}.{copy}.files").first()[0]
            spark.sql(f"DROP TABLE {measure.CAT}.{copy}")  # no PURGE: the files are the source's
            mbs = rewritten / 1024**2 / rewrite_s if rewrite_s else 0.0
            if arm not in best or mbs > best[arm]["mb_per_s"]:
                best[arm] = {"bytes": rewritten, "seconds": round(rewrite_s, 2), "mb_per_s": round(mbs, 2),
                             "cycle_seconds": round(took, 2), "files_after": int(files)}
    plain_rate = best["plain"]["mb_per_s"]
    best["ratio"] = {"mb_per_s": round(best["icetide"]["mb_per_s"] / plain_rate, 2) if plain_rate else None}
    return best


if __name__ == "__main__":
    main()
