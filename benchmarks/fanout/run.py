"""Fan-out benchmark: icetide routing one topic to 20 tables (by a field, tables created on first
sight, schema evolution on) against a vanilla Spark single-table sink, same events, same run.

One backlog of N JSON events (~300 B, ``event_type`` one of 20 values) on a 4-partition topic. Each
system drains it from a fresh JVM with the same Spark settings; events/s = rows / (end of the last
batch - start of the first); "steady" leaves out the first batch (table creation, JVM warm-up).
Vanilla writes all events to one table (Iceberg defaults, and again with icetide's table
properties); icetide writes 20 tables, each committed once per batch. Two regimes, same batch cap:

- ``sustained``: a 10-second trigger, as a production stream would run: can each system keep up;
- ``capacity``: a 0-second trigger (the next batch starts when the last ends): raw processing cost.

    .venv/bin/python -m benchmarks.fanout.run [--events 4000000] [--tables 20] [--regimes sustained,capacity]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

from benchmarks.common import (  # noqa: E402
    BatchPhases,
    batch_seconds,
    batch_window,
    broker,
    first_batch_seconds,
    jvm_cpu_seconds,
    one_jvm,
    steady_batch_seconds,
    steady_rate,
)
from benchmarks.fanout import connect, reads  # noqa: E402
from benchmarks.ingest.run import MAX_OFFSETS, SCHEMA, TRIGGER, config, machine, run_worker  # noqa: E402
from icetide import paths  # noqa: E402
from icetide.demo.events import create_topic  # noqa: E402
from tests.fixtures.records import send  # noqa: E402


def events(n: int, tables: int, seed: int = 5) -> list[bytes]:
    rng = random.Random(seed)
    now = datetime.now(UTC)
    out = []
    for i in range(n):
        e = {"id": f"evt-{i:09d}", "event_time": (now - timedelta(seconds=rng.randint(0, 3 * 86400))).isoformat(),
             "user_id": rng.randint(1, 50_000), "event_type": f"t{i % tables:02d}",
             "amount": round(rng.uniform(0, 500), 2), "payload": "x" * 150}
        out.append(json.dumps(e, separators=(",", ":")).encode())
    return out


REGIMES = {"sustained": TRIGGER, "capacity": "0 seconds"}
#: vanilla: one table, Iceberg's defaults; vanilla-tuned: icetide's table properties; vanilla-by-route:
#: one table partitioned by the routing field too (the fan-out's files per batch); icetide: one table
#: (``target.table``); icetide-expressions: the same with ``stream.decode_in_task: false`` (values parsed
#: by Spark expressions, the way before the in-task decoder); icetide-fanout: routed to ``--tables`` tables.
#: vanilla-tuned-nodict, icetide-nodict: the same with Parquet dictionary encoding off for the table
#: (``parquet.enable.dictionary: false``, which Iceberg 1.11's Parquet writer reads from table properties).
SYSTEMS = ("vanilla", "vanilla-tuned", "vanilla-by-route", "icetide", "icetide-expressions", "icetide-fanout",
           "vanilla-tuned-nodict", "icetide-nodict")
#: The peers a team would pick instead, run when named in ``--systems``: kafka-connect is Apache Iceberg's
#: Kafka Connect sink into a table made like vanilla-tuned's (connect.py; results in results/connect/);
#: icetide-nometa is icetide without the ``_kafka_*`` columns (``target.kafka_metadata_columns: false``),
#: the sink's columns.
PEERS = ("kafka-connect", "icetide-nometa")
#: Table-property choices, run when named (results in results/dictionary/): vanilla-tuned-smalldict,
#: icetide-smalldict keep dictionaries but cap each column's at 64 KiB (``write.parquet.dict-size-bytes``),
#: so a column whose values never repeat falls back to plain encoding after ~2,000 values while a
#: low-cardinality one keeps its dictionary.
OPTIONS = ("vanilla-tuned-smalldict", "icetide-smalldict")
NO_DICTIONARY = {"parquet.enable.dictionary": "false"}
SMALL_DICTIONARY = {"write.parquet.dict-size-bytes": str(64 * 1024)}
#: A system named ``<base>-<suffix>`` is ``<base>`` with these table properties
PROPERTY_VARIANTS = {"nodict": NO_DICTIONARY, "smalldict": SMALL_DICTIONARY}


def fanout_config(bootstrap: str, topic: str, ns: str, work: Path, trigger: str = TRIGGER) -> dict[str, Any]:
    cfg = config(bootstrap, topic, f"{ns}.unused", work, trigger)
    cfg["name"] = "bench-fanout"
    cfg["target"] = {"route": {"by": "field", "name": "event_type", "table": f"{ns}.{{value}}", "max_tables": 100},
                     "schema": SCHEMA, "partition_by": ["days(event_time)"]}
    cfg["dead_letter"] = {"table": f"{ns}.dead_letters"}
    cfg["stream"]["checkpoint_location"] = str(work / "ckpt" / ns)
    cfg["stream"]["batch_log_table"] = f"{ns}.batches"
    cfg["stream"]["table_write_parallelism"] = int(os.environ.get("FANOUT_PARALLELISM", "4"))
    return cfg


def fanout_worker(cfg_path: Path, expected: int) -> dict[str, Any]:
    from icetide.app.runner import Runner
    from icetide.config import load_config
    from icetide.lake.tables import list_tables
    from icetide.spark import build_session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    phases = BatchPhases()
    logging.getLogger("icetide.ingest.sink").addHandler(phases)
    cfg = load_config(cfg_path)
    spark = build_session(cfg)
    started = time.time()
    cpu0 = jvm_cpu_seconds(spark)
    runner = Runner(cfg, spark=spark)
    runner.run(duration=1800, until_idle=True)
    runner.close()  # the batch log's kept rows: after the measured window
    logging.getLogger("icetide.ingest.sink").removeHandler(phases)
    query = runner.query
    assert query is not None
    t0, t1, processed, n_batches = batch_window(query)
    cpu = jvm_cpu_seconds(spark) - cpu0
    assert cfg.target.route is not None
    ns = (cfg.target.route.namespaces or [])[0]
    tables = [t for t in list_tables(spark, cfg.catalog.name, ns) if t.split(".")[1].startswith("t")]
    rows = sum(spark.table(f"{cfg.catalog.name}.{t}").count() for t in tables)
    sizes = [spark.sql(f"SELECT count(*), sum(file_size_in_bytes) FROM {cfg.catalog.name}.{t}.files").first()
             for t in tables]
    files, data_bytes = sum(x[0] for x in sizes), sum(x[1] or 0 for x in sizes)
    spark.stop()
    return {"system": "icetide-fanout", "tables": len(tables), "rows": rows, "expected": expected,
            "processed": processed, "batches": n_batches, "seconds": round(t1 - t0, 3),
            # landed rows: Spark's input rows count a batch twice when the one pass leaves it to the usual path
            "events_per_s": round(rows / (t1 - t0), 1),
            "steady_events_per_s": round((steady_rate(query) or 0) * rows / processed, 1) or None,
            "first_batch_s": first_batch_seconds(query), "steady_batch_s": steady_batch_seconds(query),
            "batch_s": batch_seconds(query),
            "jvm_cpu_s_per_m_events": round(cpu / processed * 1e6, 1), "trigger": cfg.stream.trigger_interval,
            "data_files": files, "data_bytes": data_bytes, "wall_s": round(time.time() - started, 1),
            "batch_phases": phases.batches}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=4_000_000)
    ap.add_argument("--tables", type=int, default=20)
    ap.add_argument("--regimes", default="sustained,capacity", help=f"comma-separated, of {sorted(REGIMES)}")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"comma-separated, of {list(SYSTEMS + PEERS + OPTIONS)}")
    ap.add_argument("--no-report", action="store_true", help="Print the results only (profiling)")
    ap.add_argument("--bootstrap", help="Use this running Kafka broker instead of starting one")
    ap.add_argument("--read", action="store_true",
                    help="After the run, measure what each one-table system's files cost readers (reads.py)")
    args = ap.parse_args()
    regimes = [r.strip() for r in args.regimes.split(",") if r.strip()]
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown:
        ap.error(f"--regimes: unknown {unknown}; use {sorted(REGIMES)}")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    known = SYSTEMS + PEERS + OPTIONS
    if [s for s in systems if s not in known]:
        ap.error(f"--systems: unknown {[s for s in systems if s not in known]}; use {list(known)}")

    work = paths.home() / "bench" / uuid.uuid4().hex[:8]
    work.mkdir(parents=True)
    results: list[dict[str, Any]] = []
    with broker(39193, args.bootstrap) as bootstrap:
        topic = f"bench.fanout.{work.name}"
        create_topic(bootstrap, topic, 4)
        values = events(args.events, args.tables)
        send(bootstrap, topic, values, 4)
        print(f"produced {len(values)} events of ~{len(values[0])} B", flush=True)
        for regime in regimes:
            trigger = REGIMES[regime]
            for s in systems:
                if s == "icetide-fanout":
                    r = fanout_run(bootstrap, topic, f"bench_fanout_{regime}", work, trigger, len(values))
                elif s == "kafka-connect":
                    r = connect.run(config(bootstrap, topic, f"bench.fo_{regime}_kafka_connect", work, trigger),
                                    work, len(values), cadence(results, regime))
                else:
                    table = f"bench.fo_{regime}_{s.replace('-', '_')}"
                    cfg = config(bootstrap, topic, table, work, trigger)
                    if s == "icetide-expressions":
                        cfg["stream"]["decode_in_task"] = False
                    variant = PROPERTY_VARIANTS.get(s.rsplit("-", 1)[-1])
                    if variant is not None:
                        cfg["target"]["properties"] = dict(variant)
                    if s == "icetide-nometa":
                        cfg["target"]["kafka_metadata_columns"] = False
                    r = run_worker(s, cfg, work, len(values))
                results.append({**r, "regime": regime})
                print(json.dumps({k: v for k, v in results[-1].items() if k != "batch_phases"}), flush=True)
        read = None
        if args.read:
            regime = regimes[-1]
            one = {s: f"bench.fo_{regime}_{s.replace('-', '_')}" for s in systems if s != "icetide-fanout"}
            read = reads.measure(config(bootstrap, topic, "bench.reads", work), one, work)
            print(json.dumps(read), flush=True)
    if args.no_report:
        return
    report = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "events": args.events, "event_bytes": len(values[0]), "tables": args.tables, "results": results,
              **({"reads": read} if read else {})}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2))
    write_markdown(report, args.out / "results.md")
    plot(report, args.out / "fanout.png")


def cadence(results: list[dict[str, Any]], regime: str) -> float:
    """The Kafka Connect sink's commit interval, seconds: the regime's batch cadence, which for capacity
    (a batch as soon as the last ends) is vanilla-tuned's median steady batch in this run (10 s if it
    did not run)."""
    if REGIMES[regime] != "0 seconds":
        return float(REGIMES[regime].split()[0])
    tuned = next((x for x in results if x["regime"] == regime and x["system"] == "vanilla-tuned"), None)
    return float((tuned or {}).get("steady_batch_s") or 10.0)


def fanout_run(bootstrap: str, topic: str, ns: str, work: Path, trigger: str, expected: int) -> dict[str, Any]:
    """One icetide fan-out run in a fresh JVM."""
    cfg_path = work / f"{ns}.yaml"
    cfg_path.write_text(yaml.safe_dump(fanout_config(bootstrap, topic, ns, work, trigger)))
    out = work / f"{ns}.json"
    if one_jvm():  # the test suite's tiny runs: this process's JVM (benchmarks.common)
        return fanout_worker(cfg_path, expected)
    with open(work / f"{ns}.log", "w") as log:
        rc = subprocess.call([sys.executable, "-m", "benchmarks.fanout.run", "worker", str(cfg_path),
                              str(expected), str(out)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        raise RuntimeError(f"fan-out worker failed; see {work / (ns + '.log')}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, float | None, float, bool]]:
    """The issue's targets for one regime: (what, measured, target, higher is better)."""
    by = {x["system"]: x for x in rows}
    out: list[tuple[str, float | None, float, bool]] = []

    def add(what: str, a: str, b: str, key: str, target: float, higher: bool = True) -> None:
        if a in by and b in by:
            out.append((what, ratio(by[a].get(key), by[b].get(key)), target, higher))

    add("one table, whole run: icetide ÷ vanilla-tuned", "icetide", "vanilla-tuned", "events_per_s", 1.1)
    add("one table, steady: icetide ÷ vanilla-tuned", "icetide", "vanilla-tuned", "steady_events_per_s", 1.1)
    add("one table, JVM CPU per event: icetide ÷ vanilla-tuned", "icetide", "vanilla-tuned",
        "jvm_cpu_s_per_m_events", 0.9, higher=False)
    add("decoder: icetide ÷ icetide-expressions, steady", "icetide", "icetide-expressions",
        "steady_events_per_s", 1.0)
    add("no dictionary, both: icetide-nodict ÷ vanilla-tuned-nodict, steady", "icetide-nodict",
        "vanilla-tuned-nodict", "steady_events_per_s", 1.1)
    add("small dictionaries, both: icetide-smalldict ÷ vanilla-tuned-smalldict, steady", "icetide-smalldict",
        "vanilla-tuned-smalldict", "steady_events_per_s", 1.1)
    add("fan-out, whole run: icetide-fanout ÷ vanilla-by-route", "icetide-fanout", "vanilla-by-route",
        "events_per_s", 1.0)
    add("fan-out, steady: icetide-fanout ÷ vanilla-by-route", "icetide-fanout", "vanilla-by-route",
        "steady_events_per_s", 1.0)
    add("the Kafka Connect sink, whole run: icetide ÷ kafka-connect", "icetide", "kafka-connect", "events_per_s", 1.0)
    add("the Kafka Connect sink, steady: icetide ÷ kafka-connect", "icetide", "kafka-connect",
        "steady_events_per_s", 1.0)
    add("the Kafka Connect sink, CPU per event: icetide ÷ kafka-connect", "icetide", "kafka-connect",
        "jvm_cpu_s_per_m_events", 1.0, higher=False)
    add("the Kafka Connect sink, its columns, steady: icetide-nometa ÷ kafka-connect", "icetide-nometa",
        "kafka-connect", "steady_events_per_s", 1.0)
    add("the Kafka Connect sink, its columns, CPU per event: icetide-nometa ÷ kafka-connect", "icetide-nometa",
        "kafka-connect", "jvm_cpu_s_per_m_events", 1.0, higher=False)
    for s in ("icetide", "icetide-fanout"):
        if s in by:
            out.append((f"{s}: first batch ÷ its steady batch", ratio(by[s].get("first_batch_s"),
                                                                       by[s].get("steady_batch_s")), 2.0, False))
    return out


def write_markdown(r: dict[str, Any], path: Path) -> None:
    m = r["machine"]
    lines = [
        f"# Ingest cost: one table and one topic → {r['tables']} tables, icetide against vanilla Spark", "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}; Spark {m['spark']} "
        f"({m['spark_master']}), Iceberg {m['iceberg']}, Kafka {m['kafka_broker']} (local KRaft broker). "
        f"Run {r.get('date', '')}.",
        f"maxOffsetsPerTrigger {MAX_OFFSETS:,}; a backlog of {r['events']:,} JSON events of ~{r['event_bytes']} B "
        "on one 4-partition topic, drained by each system from a fresh JVM, one after another. *Steady* leaves "
        "out the first batch (table creation, JVM warm-up). CPU is the driver JVM's (local mode: driver and "
        "executors).", "",
    ]
    for regime in dict.fromkeys(x["regime"] for x in r["results"]):
        rows = [x for x in r["results"] if x["regime"] == regime]
        lines += [f"## {regime}: trigger {rows[0]['trigger']}", "",
                  "| system | tables | events/s | steady events/s | first batch s | steady batch s (median) "
                  "| JVM CPU s per 1M events | batches | data files | data MB | rows ok |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for x in rows:
            lines.append(
                f"| {x['system']} | {x.get('tables', 1)} | {x['events_per_s']:,.0f} | "
                f"{x.get('steady_events_per_s') or 0:,.0f} | {x.get('first_batch_s', '–')} | "
                f"{x.get('steady_batch_s', '–')} | {x['jvm_cpu_s_per_m_events']} | {x['batches']} | "
                f"{x['data_files']} | {(x.get('data_bytes') or 0) / 1e6:.1f} | {x['rows'] == x['expected']} |")
        lines += ["", "| target | measured | target | met |", "|---|---:|---:|---|"]
        for what, got, want, higher in targets(rows):
            met = got is not None and (got >= want if higher else got <= want)
            lines.append(f"| {what} | {got if got is not None else '–'}{'×' if got is not None else ''} | "
                         f"{'≥' if higher else '≤'} {want}× | {'yes' if met else '**no**'} |")
        lines.append("")
        for system in ("icetide", "icetide-fanout"):
            fan = next((x for x in rows if x["system"] == system), None)
            steady = [b for b in (fan or {}).get("batch_phases", []) if b["batch"] > 0]
            if not steady:
                continue
            names = list(dict.fromkeys(k for b in steady for k in b["timings"]))
            lines += [f"{system}'s steady batches ({len(steady)}), seconds per phase (the batch event's `timings`):",
                      "", "| phase | median | min | max |", "|---|---:|---:|---:|"]
            for name in [*names, "whole batch"]:
                xs = sorted(b["seconds"] if name == "whole batch" else b["timings"].get(name, 0.0) for b in steady)
                lines.append(f"| {name} | {xs[len(xs) // 2]:.2f} | {xs[0]:.2f} | {xs[-1]:.2f} |")
            lines.append("")
    lines += ["![fan-out](fanout.png)", "", "## Reading the numbers", "",
              "- `vanilla`: `readStream.format(\"kafka\")` → `from_json` → `writeStream.format(\"iceberg\")` into one "
              "table with Iceberg's defaults (hash distribution: a shuffle by day per batch). `vanilla-tuned`: the "
              "same with icetide's table properties (no shuffle, fan-out writers). `vanilla-by-route`: "
              "vanilla-tuned partitioned by the routing field too, so it writes as many files per batch as the "
              "fan-out: the fair baseline for it. No system but icetide checks records, keeps dead letters, tags "
              "commits for exactly-once or fences a second writer.",
              f"- `icetide`: one table (`target.table`, `target.schema`, schema evolution on). `icetide-fanout`: "
              f"every event routed by its `event_type` field to one of {r['tables']} tables, created on first "
              "sight. Both write a batch whose tables exist and whose record shapes are known in one pass "
              "(`stream.one_pass_write`); the single table's first batch too (the table is made from "
              "`target.schema` first). Each JSON value is decoded in the write task, once, from its bytes "
              "(`stream.decode_in_task`); `icetide-expressions` is `icetide` with that off (a check UDF, then "
              "`from_json`), in the same run: the decoder's own effect.",
              *([] if not any(x["system"] == "kafka-connect" for x in r["results"]) else [
              "- `kafka-connect`: Apache Iceberg's own Kafka Connect sink (`iceberg-kafka-connect` 1.11.0 under "
              "Kafka Connect 4.1.1 standalone, two tasks, Connect's defaults otherwise) into a table made like "
              "vanilla-tuned's, committing at the regime's batch cadence (the *trigger* column). Its window opens "
              "when both tasks run and closes with the commit holding the last event; its CPU is its own JVM's "
              "over that window (benchmarks/fanout/connect.py). It writes no `_kafka_*` columns" + (
                  "; `icetide-nometa` is icetide without them (`target.kafka_metadata_columns: false`)."
                  if any(x["system"] == "icetide-nometa" for x in r["results"]) else ".")]),
              "- Where the time goes, what changed, what would close the gaps: [analysis.md](analysis.md).", ""]
    if r.get("reads"):
        lines += [*reads.markdown(r["reads"]), ""]
    path.write_text("\n".join(lines))


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = list(dict.fromkeys(x["regime"] for x in r["results"]))
    systems = list(dict.fromkeys(x["system"] for x in r["results"]))
    fig, axes = plt.subplots(1, len(regimes), figsize=(7 * len(regimes), 4.2), squeeze=False)
    colors = {"vanilla": "#999", "vanilla-tuned": "#bbb", "vanilla-by-route": "#ddd", "icetide": "#2ca02c",
              "icetide-expressions": "#98df8a", "vanilla-tuned-nodict": "#ccc", "icetide-nodict": "#bcbd22",
              "vanilla-tuned-smalldict": "#aaa", "icetide-smalldict": "#8c564b",
              "icetide-fanout": "#1f77b4", "kafka-connect": "#d62728", "icetide-nometa": "#17becf"}
    for ax, regime in zip(axes[0], regimes, strict=True):
        by = {x["system"]: x for x in r["results"] if x["regime"] == regime}
        xs = range(len(systems))
        ax.bar([i - 0.2 for i in xs], [by[s]["events_per_s"] for s in systems], 0.4, label="whole run",
               color=[colors.get(s, "#1f77b4") for s in systems])
        ax.bar([i + 0.2 for i in xs], [by[s].get("steady_events_per_s") or 0 for s in systems], 0.4,
               label="steady (after batch 1)", color=[colors.get(s, "#1f77b4") for s in systems], hatch="//")
        ax.set_xticks(list(xs), systems, fontsize=7)
        ax.set_ylabel("events / s (higher is better)")
        ax.set_title(f"{regime}: trigger {by[systems[-1]]['trigger']}")
        top = max(max(x["events_per_s"], x.get("steady_events_per_s") or 0) for x in by.values())
        ax.set_ylim(0, top * 1.25)  # room for the legend above the bars
        ax.legend(fontsize=8, loc="upper right", ncol=2)
    m = r["machine"]
    fig.suptitle(f"{r['events']:,} events → 1 table, or {r['tables']} tables (icetide-fanout); "
                 f"{m['cores']} cores, Spark {m['spark']} local")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        _, _, cfg_path, expected, out = sys.argv
        Path(out).write_text(json.dumps(fanout_worker(Path(cfg_path), int(expected))))
    else:
        main()
