"""CDC benchmark: changes/s of icetide's MERGE on merge-on-read vs copy-on-write, next to a hand-written
vanilla foreachBatch MERGE; and read time of a CDC table as delete files accumulate.

Part 1 (throughput): one backlog of generated changes (50,000 keys; inserts, updates, deletes,
duplicates, out-of-order, replays) on a 4-partition topic, drained by each system from a fresh JVM
with the same Spark settings; changes/s = changes / (end of last batch - start of first).

- ``vanilla-merge``: what a Spark user writes by hand: foreachBatch, from_json, keep the newest
  change per key, one ``MERGE INTO`` (copy-on-write, Iceberg's default), no ordering guard across
  batches, no tombstones, no dead letters, no exactly-once tags.
- ``icetide-mor`` / ``icetide-cow``: icetide CDC with ``write_mode`` merge-on-read / copy-on-write.

Part 2 (reads): a 500,000-row table, then 1, 10 and 100 MERGE commits of 500 updates each;
after each step the time of a full scan (best of 3), for merge-on-read and copy-on-write.

    .venv/bin/python -m benchmarks.cdc.run [--keys 50000] [--changes 500000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

from benchmarks.common import (  # noqa: E402
    BatchPhases,
    batch_seconds,
    batch_window,
    best_of,
    broker,
    one_jvm,
    profiled,
    stop_when_idle,
)
from benchmarks.ingest.run import machine  # noqa: E402
from icetide import paths  # noqa: E402
from icetide.demo.events import create_topic  # noqa: E402
from tests.fixtures.cdc_stream import generate, send_changes  # noqa: E402

#: Capacity: each batch starts when the last ends, so changes/s is the cost of a batch, not the trigger's pace.
TRIGGER = "0 seconds"
#: (system, icetide's write_mode): vanilla-merge is the common hand-written MERGE (newest per key in a
#: batch, no ordering across batches); vanilla-merge-ordered is one as correct as icetide's.
SYSTEMS = (("vanilla-merge", "copy-on-write"), ("vanilla-merge-ordered", "copy-on-write"),
           ("icetide-mor", "merge-on-read"), ("icetide-cow", "copy-on-write"))
MAX_OFFSETS = 250_000
SCHEMA = "id BIGINT, name STRING, balance DOUBLE"


def config(bootstrap: str, topic: str, table: str, work: Path, mode: str) -> dict[str, Any]:
    return {
        "name": f"bench-{table.split('.')[-1].replace('_', '-')}"[:60],
        "source": {"bootstrap_servers": bootstrap, "topics": [topic], "starting_offsets": "earliest",
                   "max_offsets_per_trigger": MAX_OFFSETS},
        "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 'catalog.db'}", "warehouse": str(work / "warehouse")},
        # the record's columns, as the hand-written jobs declare them (their from_json schema)
        "target": {"table": table, "schema": f"{SCHEMA}, version BIGINT, op STRING",
                   "cdc": {"primary_key": ["id"], "ordering": "version", "write_mode": mode}},
        "dead_letter": {"table": f"{table}_dlq"},
        "stream": {"trigger_interval": TRIGGER, "checkpoint_location": str(work / "ckpt" / table),
                   "batch_log_table": None},
        "spark": {"master": "local[2]", "conf": {"spark.driver.memory": "6g", **profiled(table.split(".")[-1])}},
    }


def worker(system: str, cfg_path: Path) -> dict[str, Any]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from icetide.config import load_config
    from icetide.ingest.source import kafka_options
    from icetide.spark import build_session

    cfg = load_config(cfg_path)
    spark = build_session(cfg)
    assert cfg.target.table is not None
    table = f"{cfg.catalog.name}.{cfg.target.table}"
    phases = BatchPhases()
    if system.startswith("icetide"):
        import logging

        from icetide.app.runner import Runner

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("icetide.ingest.sink").addHandler(phases)
        runner = Runner(cfg, spark=spark)
        runner.run(duration=3600, until_idle=True)
        runner.close()
        logging.getLogger("icetide.ingest.sink").removeHandler(phases)
        query = runner.query
    elif system == "vanilla-merge-ordered":
        query = _ordered_merge(spark, cfg, table)
    else:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{cfg.target.table.split('.')[0]}")
        spark.sql(f"CREATE TABLE {table} ({SCHEMA}, version BIGINT) USING iceberg")
        row_schema = f"{SCHEMA}, version BIGINT, op STRING"

        def merge(df: Any, _: int) -> None:
            changes = df.select(F.from_json(F.col("value").cast("string"), row_schema).alias("c")).select("c.*")
            w = Window.partitionBy("id").orderBy(F.col("version").desc())
            latest = changes.withColumn("rn", F.row_number().over(w)).where("rn = 1").drop("rn")
            latest.createOrReplaceTempView("changes")
            df.sparkSession.sql(f"""
                MERGE INTO {table} t USING changes s ON t.id = s.id
                WHEN MATCHED AND s.op = 'delete' THEN DELETE
                WHEN MATCHED THEN UPDATE SET t.name = s.name, t.balance = s.balance, t.version = s.version
                WHEN NOT MATCHED AND s.op <> 'delete' THEN INSERT (id, name, balance, version)
                  VALUES (s.id, s.name, s.balance, s.version)""")

        src = cfg.source
        kafka = (spark.readStream.format("kafka").options(**kafka_options(src))
                 .option("subscribe", ",".join(src.topics or [])).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", str(MAX_OFFSETS)).load())
        query = (kafka.writeStream.foreachBatch(merge).trigger(processingTime=TRIGGER)
                 .option("checkpointLocation", cfg.checkpoint_dir()).start())
        stop_when_idle(query)
    assert query is not None
    t0, t1, processed, n_batches = batch_window(query)
    per_batch = batch_seconds(query)
    rows = spark.table(table).count()
    state = {int(r[0]): (r[1], r[2]) for r in spark.table(table).select("id", "name", "balance").collect()}
    deletes = spark.sql(f"SELECT count(*) FROM {table}.delete_files").first()[0]
    spark.stop()
    return {"system": system, "changes": processed, "rows": rows, "batches": n_batches,
            "seconds": round(t1 - t0, 3), "changes_per_s": round(processed / (t1 - t0), 1), "delete_files": deletes,
            "state": {str(k): list(v) for k, v in state.items()}, "batch_phases": phases.batches,
            "batch_seconds": per_batch}


def _ordered_merge(spark: Any, cfg: Any, table: str) -> Any:
    """A hand-written foreachBatch MERGE as correct as icetide's: the newest change per key by
    (version, Kafka position); a change lands only over an older row; deleted keys are remembered
    with their version so an older change arriving later cannot bring the row back. No dead
    letters, no exactly-once tags, no fence."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from icetide.ingest.source import kafka_options

    ns = cfg.target.table.split(".")[0]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{ns}")
    spark.sql(f"CREATE TABLE {table} ({SCHEMA}, version BIGINT, pos BIGINT) USING iceberg")
    tombs = f"{table}_deleted"
    spark.sql(f"CREATE TABLE {tombs} (id BIGINT, version BIGINT, pos BIGINT) USING iceberg")
    row_schema = f"{SCHEMA}, version BIGINT, op STRING"

    def merge(df: Any, _: int) -> None:
        session = df.sparkSession
        changes = (df.select(F.from_json(F.col("value").cast("string"), row_schema).alias("c"),
                             (F.col("offset") * 16 + F.col("partition")).alias("pos"))
                   .select("c.*", "pos").where(F.col("id").isNotNull()))
        w = Window.partitionBy("id").orderBy(F.col("version").desc(), F.col("pos").desc())
        latest = changes.withColumn("rn", F.row_number().over(w)).where("rn = 1").drop("rn")
        session.catalog.refreshTable(tombs)  # the batch's own session: its cache may hold an older version
        dead = session.table(tombs).groupBy("id").agg(F.max(F.struct("version", "pos")).alias("d"))
        newer = (F.col("version") > F.col("d.version")) | (
            (F.col("version") == F.col("d.version")) & (F.col("pos") >= F.col("d.pos")))
        latest = latest.join(dead, "id", "left").where(F.col("d").isNull() | newer).drop("d")
        # Materialized (as icetide persists its changes): a temp view over a plan that reads a table
        # fails Spark 4.1's MERGE planning ("No plan for TableReference").
        latest = latest.localCheckpoint()
        latest.createOrReplaceTempView("changes")
        session.sql(f"""
            MERGE INTO {table} t USING changes s ON t.id = s.id
            WHEN MATCHED AND s.op = 'delete' AND (s.version > t.version OR (s.version = t.version AND s.pos > t.pos))
              THEN DELETE
            WHEN MATCHED AND s.op <> 'delete' AND (s.version > t.version OR (s.version = t.version AND s.pos > t.pos))
              THEN UPDATE SET t.name = s.name, t.balance = s.balance, t.version = s.version, t.pos = s.pos
            WHEN NOT MATCHED AND s.op <> 'delete' THEN INSERT (id, name, balance, version, pos)
              VALUES (s.id, s.name, s.balance, s.version, s.pos)""")
        latest.where("op = 'delete'").select("id", "version", "pos").writeTo(tombs).append()

    src = cfg.source
    kafka = (spark.readStream.format("kafka").options(**kafka_options(src))
             .option("subscribe", ",".join(src.topics or [])).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(MAX_OFFSETS)).load())
    query = (kafka.writeStream.foreachBatch(merge).trigger(processingTime=cfg.stream.trigger_interval)
             .option("checkpointLocation", cfg.checkpoint_dir()).start())
    stop_when_idle(query)
    return query


def read_worker(work: Path, rows: int, steps: list[int]) -> dict[str, Any]:
    """Read time of a full scan as MERGE commits (and, on merge-on-read, delete files) accumulate."""
    from pyspark.sql import functions as F

    from icetide.config import load_config
    from icetide.spark import build_session

    cfg_path = work / "reads.yaml"
    cfg_path.write_text(yaml.safe_dump(config("127.0.0.1:1", "unused", "bench.reads", work, "merge-on-read")))
    spark = build_session(load_config(cfg_path))
    spark.sql("CREATE NAMESPACE IF NOT EXISTS icetide.bench")
    out: dict[str, Any] = {}
    for mode in ("merge-on-read", "copy-on-write"):
        t = f"icetide.bench.reads_{mode.replace('-', '_')}"
        spark.sql(f"CREATE TABLE {t} (id BIGINT, name STRING, balance DOUBLE) USING iceberg TBLPROPERTIES ("
                  f"'write.merge.mode'='{mode}', 'write.update.mode'='{mode}', 'write.delete.mode'='{mode}', "
                  "'write.distribution-mode'='none')")
        (spark.range(rows).select("id", F.concat(F.lit("n"), F.col("id").cast("string")).alias("name"),
                                  (F.rand(1) * 1e4).alias("balance")).coalesce(4).writeTo(t).append())
        spark.sql(f"SELECT count(*), sum(balance) FROM {t}").collect()  # warm-up, not timed
        done, series = 0, []
        for step in [0, *steps]:
            merge_s = 0.0
            while done < step:
                ids = sorted({(done * 7919 + i * 104729) % rows for i in range(500)})  # deterministic keys
                src = spark.createDataFrame([(i, float(done)) for i in ids], "id BIGINT, balance DOUBLE")
                src.createOrReplaceTempView("upd")
                t0 = time.perf_counter()
                spark.sql(f"MERGE INTO {t} t USING upd s ON t.id = s.id "
                          "WHEN MATCHED THEN UPDATE SET balance = s.balance")
                merge_s += time.perf_counter() - t0
                done += 1
            read_s = best_of(lambda t=t: spark.sql(f"SELECT count(*), sum(balance) FROM {t}").collect())
            deletes = spark.sql(f"SELECT count(*) FROM {t}.delete_files").first()[0]
            series.append({"commits": step, "read_s": round(read_s, 3), "delete_files": deletes,
                           "merge_s_avg": round(merge_s / max(1, step - (series[-1]["commits"] if series else 0)), 3)})
            print(mode, series[-1], flush=True)
        if mode == "merge-on-read":  # what icetide's maintenance does when the delete trigger fires
            name = t.removeprefix("icetide.")
            t0 = time.perf_counter()
            spark.sql(f"CALL icetide.system.rewrite_data_files(table => '{name}', "
                      "options => map('delete-file-threshold', '1'))").collect()
            spark.sql(f"CALL icetide.system.rewrite_position_delete_files(table => '{name}', "
                      "options => map('rewrite-all', 'true'))").collect()
            rewrite_s = time.perf_counter() - t0
            read_s = best_of(lambda t=t: spark.sql(f"SELECT count(*), sum(balance) FROM {t}").collect())
            deletes = spark.sql(f"SELECT count(*) FROM {t}.delete_files").first()[0]
            out["after_maintenance"] = {"read_s": round(read_s, 3), "delete_files": deletes,
                                        "rewrite_s": round(rewrite_s, 3)}
            print("after maintenance", out["after_maintenance"], flush=True)
        out[mode] = series
    spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--changes", type=int, default=500_000)
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--throughput-from", type=Path, help="Reuse part 1 from an earlier results.json")
    ap.add_argument("--bootstrap", help="Use this running Kafka broker instead of starting one")
    ap.add_argument("--read-steps", default="1,10,100", help="MERGE commits after which part 2 reads")
    names = [s for s, _ in SYSTEMS]
    ap.add_argument("--systems", default=",".join(names), help="comma-separated, of: " + ", ".join(names))
    ap.add_argument("--no-reads", action="store_true", help="skip part 2 (read time as MERGE commits accumulate)")
    args = ap.parse_args()
    systems = [s.strip() for s in args.systems.split(",")]
    if not set(systems) <= set(names):
        ap.error(f"--systems: any of {names}")
    if args.throughput_from:
        earlier = json.loads(args.throughput_from.read_text())
        work = paths.home() / "bench" / uuid.uuid4().hex[:8]
        work.mkdir(parents=True)
        earlier["reads"] = _sub(work, ["reads", str(args.rows), args.read_steps])
        earlier["read_rows"] = args.rows
        _report(earlier, args.out)
        return

    work = paths.home() / "bench" / uuid.uuid4().hex[:8]
    work.mkdir(parents=True)
    results = []
    with broker(39194, args.bootstrap) as bootstrap:
        topic = f"bench.cdc.{work.name}"
        create_topic(bootstrap, topic, 4)
        stream = generate(args.keys, args.changes, seed=3, debezium=False)
        send_changes(bootstrap, topic, stream)
        print(f"produced {len(stream.messages)} changes over {args.keys} keys", flush=True)
        for system, mode in [(s, m) for s, m in SYSTEMS if s in systems]:
            cfg_path = work / f"{system}.yaml"
            cfg_path.write_text(yaml.safe_dump(config(bootstrap, topic, f"bench.{system.replace('-', '_')}",
                                                      work, mode)))
            results.append(_sub(work, ["worker", system, str(cfg_path)]))
            results[-1]["expected_rows"] = len(stream.final)
            results[-1]["changes"] = len(stream.messages)
            results[-1]["changes_per_s"] = round(len(stream.messages) / results[-1]["seconds"], 1)
            state = {int(k): tuple(v) for k, v in results[-1].pop("state").items()}
            results[-1]["state_ok"] = state == stream.final
            results[-1]["stale_or_wrong"] = len(set(state.items()) ^ set(stream.final.items()))
            print(json.dumps(results[-1]), flush=True)
    reads = {} if args.no_reads else _sub(work, ["reads", str(args.rows), args.read_steps])
    report = {"machine": machine(), "keys": args.keys, "changes": len(stream.messages), "throughput": results,
              "reads": reads, "read_rows": args.rows}
    _report(report, args.out)


def _report(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=2))
    write_markdown(report, out / "results.md")
    plot(report, out / "cdc.png")


def _sub(work: Path, argv: list[str]) -> dict[str, Any]:
    """One worker (``worker SYSTEM CFG`` or ``reads ROWS STEPS``) in a fresh JVM, or in this process
    with ``ICETIDE_BENCH_ONE_JVM=1`` (see benchmarks.common.one_jvm)."""
    out = work / f"{uuid.uuid4().hex[:6]}.json"
    if one_jvm():
        _worker_main([*argv, str(out)])
        in_process: dict[str, Any] = json.loads(out.read_text())
        return in_process
    with open(work / f"{argv[0]}-{argv[1] if len(argv) > 1 else ''}.log", "w") as log:
        rc = subprocess.call([sys.executable, "-m", "benchmarks.cdc.run", *argv, str(out)], cwd=REPO,
                             stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        raise RuntimeError(f"{argv} failed; see {log.name}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def write_markdown(r: dict[str, Any], path: Path) -> None:
    m = r["machine"]
    by = {x["system"]: x for x in r["throughput"]}
    first = next(iter(by.values()))
    base = by.get("vanilla-merge", first)["changes_per_s"]
    fair = by.get("vanilla-merge-ordered", by.get("vanilla-merge", first))["changes_per_s"]
    lines = [
        "# CDC benchmark: MERGE on merge-on-read vs copy-on-write", "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}; Spark {m['spark']} "
        f"({m['spark_master']}), Iceberg {m['iceberg']}, Kafka {m['kafka_broker']} (local KRaft broker).",
        f"Trigger {TRIGGER}, maxOffsetsPerTrigger {MAX_OFFSETS}; {r['changes']:,} changes over {r['keys']:,} keys "
        "(inserts, updates, 15% deletes, 3% duplicates, shuffled in windows of 500, 2% old changes replayed).", "",
        "## Changes per second", "",
        "| system | changes/s | ÷ vanilla MERGE | ÷ equally correct MERGE | batches | rows | rows expected "
        "| final state exact | rows stale, missing or extra | delete files |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for s, x in by.items():
        lines.append(f"| {s} | {x['changes_per_s']:,.0f} | {x['changes_per_s'] / base:.2f}× | "
                     f"{x['changes_per_s'] / fair:.2f}× | {x['batches']} | {x['rows']:,} | {x['expected_rows']:,} | "
                     f"{x.get('state_ok', '–')} | {x.get('stale_or_wrong', '–')} | {x['delete_files']} |")
    timed = {s: x["batch_seconds"] for s, x in by.items() if x.get("batch_seconds")}
    if timed:
        n = max(len(v) for v in timed.values())
        lines += ["", "Seconds per batch (Spark's `triggerExecution`; the first includes each JVM's warm-up; every "
                  "system makes its tables before its stream starts, icetide from the declared `target.schema`):", "",
                  "| system | " + " | ".join(f"batch {i}" for i in range(n)) + " |", "|---|" + "---:|" * n]
        lines += [f"| {s} | " + " | ".join(f"{v[i]:.2f}" if i < len(v) else "" for i in range(n)) + " |"
                  for s, v in timed.items()]
    for s, x in by.items():
        batches = x.get("batch_phases") or []
        if batches:
            names = list(dict.fromkeys(k for b in batches for k in b["timings"]))
            lines += ["", f"{s}: seconds per phase of each batch (the batch event's `timings`):", "",
                      "| batch | " + " | ".join(names) + " | whole batch |", "|---|" + "---:|" * (len(names) + 1)]
            for b in batches:
                lines.append(f"| {b['batch']} | " + " | ".join(f"{b['timings'].get(n, 0.0):.2f}" for n in names)
                             + f" | {b['seconds']:.2f} |")
    lines += ["", "`vanilla-merge` is the MERGE most hand-written jobs have: the newest change per key within a "
              "batch, no ordering guard across batches, so out-of-order and replayed changes leave stale rows "
              "(the *final state exact* column compares every row with the expected state). "
              "`vanilla-merge-ordered` is a hand-written MERGE as correct as icetide's: the newest change per "
              "key by (version, Kafka position), a change lands only over an older row, deleted keys remembered "
              "with their version (a `_deleted` table) so an older change cannot bring a row back. It has no "
              "dead letters, no exactly-once tags and no fence. Both vanilla tables are copy-on-write "
              "(Iceberg's default): compare them with `icetide-cow`.", ""]
    if not r["reads"]:  # --no-reads
        path.write_text("\n".join(lines))
        return
    lines += [f"## Read time as MERGE commits accumulate ({r['read_rows']:,} rows, 500 updates per commit)", "",
              "| commits | merge-on-read: delete files | merge-on-read: scan s | copy-on-write: scan s |",
              "|---:|---:|---:|---:|"]
    mor, cow = r["reads"]["merge-on-read"], r["reads"]["copy-on-write"]
    for a, b in zip(mor, cow, strict=True):
        lines.append(f"| {a['commits']} | {a['delete_files']} | {a['read_s']:.3f} | {b['read_s']:.3f} |")
    am = r["reads"].get("after_maintenance")
    if am:
        lines.append(f"| {mor[-1]['commits']} + compaction applying deletes | {am['delete_files']} | "
                     f"{am['read_s']:.3f} | |")
    lines += ["", "Average MERGE time per commit (s): merge-on-read "
              + ", ".join(f"{x['merge_s_avg']}" for x in mor[1:]) + "; copy-on-write "
              + ", ".join(f"{x['merge_s_avg']}" for x in cow[1:]) + ".", "",
              "Iceberg 1.11 merges a data file's earlier position deletes into the new delete file on each "
              "write (file-scoped deletes), so live delete files stay at one per data file while the deleted "
              "positions in them grow. Runs before this script had a warm-up read could show a cold first "
              "merge-on-read row.", "",
              "Merge-on-read writes cheaply and pays at read time until compaction applies the deletes "
              "(icetide's maintenance: `rewrite_position_delete_files` and compaction with delete application).",
              "", "![cdc](cdc.png)", ""]
    path.write_text("\n".join(lines))


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not r["reads"]:  # --no-reads: the throughput chart alone
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    names = [x["system"] for x in r["throughput"]]
    a.bar(names, [x["changes_per_s"] for x in r["throughput"]], color=["#999", "#1f77b4", "#6baed6"])
    a.set_title("CDC ingest (higher is better)")
    a.set_ylabel("changes / s")
    for mode, color in (("merge-on-read", "#1f77b4"), ("copy-on-write", "#999")):
        s = r["reads"][mode]
        b.plot([x["commits"] for x in s], [x["read_s"] for x in s], marker="o", label=mode, color=color)
    b.set_xscale("symlog")
    b.set_xlabel("MERGE commits")
    b.set_ylabel("full scan, s (lower is better)")
    b.set_title("Read time as delete files accumulate")
    b.legend()
    m = r["machine"]
    fig.suptitle(f"{m['cores']} cores, Spark {m['spark']} local, Iceberg {m['iceberg']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _worker_main(argv: list[str]) -> None:
    """``worker SYSTEM CFG OUT`` or ``reads ROWS STEPS OUT``: run it, write its result to OUT."""
    if argv[0] == "worker":
        _, system, cfg_path, out = argv
        Path(out).write_text(json.dumps(worker(system, Path(cfg_path))))
    else:
        _, rows, steps, out = argv
        Path(out).write_text(json.dumps(read_worker(Path(out).parent, int(rows), [int(x) for x in steps.split(",")])))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("worker", "reads"):
        _worker_main(sys.argv[1:])
    else:
        main()
