"""Avro benchmark: icetide ingesting Avro (Confluent wire format, schema from a registry) against
icetide ingesting the same events as JSON, and against vanilla Spark ``from_avro`` with one fixed
schema into one table; same run, each system from a fresh JVM, 0-second trigger (capacity).

The events are the ingest benchmark's (~300 B as JSON); the Avro ones are written with fastavro
and the id the registry (Apicurio, local) gave the schema. Vanilla decodes with
``from_avro(substring(value, 6), schema)``: no schema id check, no dead letters, no evolution.

    .venv/bin/python -m benchmarks.avro.run [--events 2000000] [--wide 40] [--systems "icetide Avro,vanilla from_avro"]

``--wide N`` adds N fields (long, double, string, boolean, int in turn) to the schema and the events:
a per-event cost that grows with the schema's width shows against vanilla, which decodes each record once.
``--nested`` makes the added fields cycle over ten types instead: those five, a nested record, an array,
a decimal, a date and an optional string (a union with null).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

from benchmarks.common import batch_window, broker, jvm_cpu_seconds, one_jvm, steady_rate, stop_when_idle  # noqa: E402
from benchmarks.ingest.run import MAX_OFFSETS, config, machine, run_worker  # noqa: E402
from icetide import paths  # noqa: E402

SCHEMA: dict[str, Any] = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
    {"name": "id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "user_id", "type": "long"}, {"name": "event_type", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "payload", "type": "string"}]}
TABLE_DDL = "id STRING, event_time TIMESTAMP, user_id BIGINT, event_type STRING, amount DOUBLE, payload STRING"
#: the extra fields of ``--wide``: (Avro type, Spark type, value for event i)
_WIDE_TYPES: list[tuple[str, str, Any]] = [
    ("long", "BIGINT", lambda i: i * 7), ("double", "DOUBLE", lambda i: i / 3),
    ("string", "STRING", lambda i: f"v{i % 1000}"), ("boolean", "BOOLEAN", lambda i: i % 2 == 0),
    ("int", "INT", lambda i: i % 97)]
#: ``--nested``: the five above, then a nested record, an array, a decimal, a date, an optional string
_NESTED_TYPES: list[tuple[Any, str, Any]] = [
    *_WIDE_TYPES,
    ({"type": "record", "name": "Part", "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "string"}]},
     "STRUCT<a: BIGINT, b: STRING>", lambda i: {"a": i, "b": f"p{i % 50}"}),
    ({"type": "array", "items": "long"}, "ARRAY<BIGINT>", lambda i: [i, i + 1, i % 7]),
    ({"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}, "DECIMAL(12,2)",
     lambda i: Decimal(i % 1_000_000) / 100),
    ({"type": "int", "logicalType": "date"}, "DATE", lambda i: date(2026, 1, 1) + timedelta(days=i % 300)),
    (["null", "string"], "STRING", lambda i: None if i % 3 == 0 else f"o{i % 400}")]
#: vanilla from_avro tuned: the same job into a table with icetide's table properties (same files);
#: icetide Avro hash: icetide into a table with Iceberg's default write.distribution-mode=hash (a
#: shuffle by day before the write, as vanilla's), which icetide's one pass honours
SYSTEMS = ("icetide JSON", "icetide Avro", "icetide Avro hash", "vanilla from_avro", "vanilla from_avro tuned")


def _types(nested: bool) -> list[tuple[Any, str, Any]]:
    return _NESTED_TYPES if nested else _WIDE_TYPES


def schema(wide: int = 0, nested: bool = False) -> dict[str, Any]:
    """The events' Avro schema; a record type is named once (later fields of it name it again)."""
    types, extra, named = _types(nested), [], False
    for k in range(wide):
        t = types[k % len(types)][0]
        if isinstance(t, dict) and t.get("type") == "record":
            t, named = ("bench.Part" if named else t), True
        extra.append({"name": f"w{k}", "type": t})
    return {**SCHEMA, "fields": [*SCHEMA["fields"], *extra]}


def table_ddl(wide: int = 0, nested: bool = False) -> str:
    types = _types(nested)
    return ", ".join([TABLE_DDL, *[f"w{k} {types[k % len(types)][1]}" for k in range(wide)]])
CAPACITY = "0 seconds"


def iter_events(n: int, seed: int = 5, wide: int = 0, nested: bool = False, now: datetime | None = None
                ) -> Iterator[dict[str, Any]]:
    """The events, one at a time (a million of 150 fields do not fit in memory as a list)."""
    rng = random.Random(seed)
    now = now or datetime.now(UTC)
    types = _types(nested)
    for i in range(n):
        yield {"id": f"evt-{i:09d}", "event_time": now - timedelta(seconds=rng.randint(0, 3 * 86400)),
               "user_id": rng.randint(1, 50_000), "event_type": f"t{i % 20:02d}",
               "amount": round(rng.uniform(0, 500), 2), "payload": "x" * 150,
               **{f"w{k}": types[k % len(types)][2](i) for k in range(wide)}}


def events(n: int, seed: int = 5, wide: int = 0, nested: bool = False) -> list[dict[str, Any]]:
    return list(iter_events(n, seed, wide, nested))


def as_json(e: dict[str, Any]) -> bytes:
    return json.dumps({**e, "event_time": e["event_time"].isoformat()}, separators=(",", ":"),
                      default=lambda v: float(v) if isinstance(v, Decimal) else str(v)).encode()


def as_avro(events_: Iterable[dict[str, Any]], schema_id: int, wide: int = 0, nested: bool = False) -> list[bytes]:
    """The Confluent wire format: byte 0, the 4-byte schema id, Avro binary (fastavro)."""
    return list(iter_avro(events_, schema_id, wide, nested))


def iter_avro(events_: Iterable[dict[str, Any]], schema_id: int, wide: int = 0, nested: bool = False
              ) -> Iterator[bytes]:
    import fastavro

    parsed = fastavro.parse_schema(schema(wide, nested))
    header = b"\x00" + schema_id.to_bytes(4, "big")
    for e in events_:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, e)
        yield header + buf.getvalue()


def vanilla_worker(cfg_path: Path, expected: int, wide: int = 0, nested: bool = False, tuned: bool = False
                   ) -> dict[str, Any]:
    """``from_avro`` with the one fixed schema into one table (Iceberg defaults; ``tuned``: icetide's
    table properties, so both write the same files)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from icetide.config import load_config
    from icetide.ingest.source import kafka_options
    from icetide.spark import build_session

    cfg = load_config(cfg_path)
    spark = build_session(cfg)
    table = f"{cfg.catalog.name}.{cfg.target.table}"
    cpu0 = jvm_cpu_seconds(spark)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{cfg.target.table.split('.')[0]}")
    props = ", ".join(f"'{k}'='{v}'" for k, v in cfg.target.table_properties().items())
    spark.sql(f"CREATE TABLE {table} ({table_ddl(wide, nested)}, _kafka_topic STRING, _kafka_partition INT, "
              "_kafka_offset BIGINT, _kafka_timestamp TIMESTAMP, _kafka_key STRING) USING iceberg "
              "PARTITIONED BY (days(event_time))" + (f" TBLPROPERTIES ({props})" if tuned else ""))
    kafka = (spark.readStream.format("kafka").options(**kafka_options(cfg.source))
             .option("subscribe", ",".join(cfg.source.topics or [])).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(MAX_OFFSETS)).load())
    rows = kafka.select(
        from_avro(F.expr("substring(value, 6)"), json.dumps(schema(wide, nested))).alias("a"), "topic", "partition",
        "offset", "timestamp", "key",
    ).select("a.*", F.col("topic").alias("_kafka_topic"), F.col("partition").alias("_kafka_partition"),
             F.col("offset").alias("_kafka_offset"), F.col("timestamp").alias("_kafka_timestamp"),
             F.col("key").cast("string").alias("_kafka_key"))
    query = (rows.writeStream.format("iceberg").outputMode("append").trigger(processingTime=CAPACITY)
             .option("checkpointLocation", cfg.checkpoint_dir()).toTable(table))
    stop_when_idle(query)
    t0, t1, processed, n_batches = batch_window(query)
    cpu = jvm_cpu_seconds(spark) - cpu0
    out = {"system": "vanilla from_avro" + (" tuned" if tuned else ""), "rows": spark.table(table).count(),
           "expected": expected,
           "processed": processed, "batches": n_batches, "seconds": round(t1 - t0, 3),
           "events_per_s": round(processed / (t1 - t0), 1), "steady_events_per_s": steady_rate(query),
           "jvm_cpu_s_per_m_events": round(cpu / processed * 1e6, 1),
           "data_files": spark.sql(f"SELECT count(*) FROM {table}.files").first()[0]}
    spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--wide", type=int, default=0, help="fields added to the 6 of the schema")
    ap.add_argument("--nested", action="store_true",
                    help="the added fields cycle over ten types: flat ones, a record, an array, logical types")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, of: " + ", ".join(SYSTEMS))
    ap.add_argument("--bootstrap", help="a running Kafka broker to use (default: a fresh local one)")
    ap.add_argument("--registry", help="a running schema registry's URL to use (default: a fresh local one)")
    args = ap.parse_args()
    systems = [s.strip() for s in args.systems.split(",")]
    if "icetide Avro" not in systems or not set(systems) <= set(SYSTEMS):
        ap.error(f"--systems: 'icetide Avro' and any of {SYSTEMS}")
    results, event_bytes = run(args.events, args.wide, systems, args.nested, args.bootstrap, args.registry)
    report = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "events": args.events, "wide": args.wide,
              "nested": args.nested, "fields": 6 + args.wide, "event_bytes": event_bytes, "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2, default=str))
    (args.out / "results.md").write_text(markdown(report))
    print((args.out / "results.md").read_text())


def run(n: int, wide: int = 0, systems: list[str] | tuple[str, ...] = SYSTEMS, nested: bool = False,
        bootstrap: str | None = None, registry_url: str | None = None
        ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Produce ``n`` events as JSON and as Avro, drain each with each system; the results. A broker
    or registry given is used as it is (topics and subject named for this run), else a fresh one."""
    with contextlib.ExitStack() as stack:
        kafka = stack.enter_context(broker(39193, bootstrap))
        if registry_url is None:
            from icetide.services.registry import LocalRegistry

            local = LocalRegistry(port=39197, management_port=39198)
            local.reset()
            local.start()
            stack.callback(local.reset)
            registry_url = local.url
        return _run(n, wide, systems, nested, kafka, registry_url)


def _run(n: int, wide: int, systems: list[str] | tuple[str, ...], nested: bool, bootstrap: str, registry_url: str
         ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    import urllib.request

    from icetide.demo.events import create_topic
    from tests.fixtures.records import send

    run_id = uuid.uuid4().hex[:8]
    work = paths.home() / "bench" / run_id
    work.mkdir(parents=True)
    json_topic, avro_topic = f"bench.json.{run_id}", f"bench.avro.{run_id}"
    body = json.dumps({"schema": json.dumps(schema(wide, nested))}).encode()
    req = urllib.request.Request(f"{registry_url}/subjects/{avro_topic}-value/versions", data=body,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        schema_id = int(json.loads(r.read())["id"])
    now = datetime.now(UTC)
    first = next(iter_events(1, wide=wide, nested=nested, now=now))
    sizes = {"json": len(as_json(first)), "avro": len(next(iter_avro([first], schema_id, wide, nested)))}
    create_topic(bootstrap, avro_topic, 4)
    avro = iter_avro(iter_events(n, wide=wide, nested=nested, now=now), schema_id, wide, nested)
    send(bootstrap, avro_topic, avro, 4)
    if "icetide JSON" in systems:
        create_topic(bootstrap, json_topic, 4)
        send(bootstrap, json_topic, (as_json(e) for e in iter_events(n, wide=wide, nested=nested, now=now)), 4)
    print(f"produced {n} events: ~{sizes['json']} B as JSON, ~{sizes['avro']} B as Avro", flush=True)
    results = []
    if "icetide JSON" in systems:
        cfg = config(bootstrap, json_topic, "bench.icetide_json", work, CAPACITY)
        if wide:
            cfg["target"]["schema"] = table_ddl(wide, nested)
        results.append({**run_worker("icetide", cfg, work, n), "system": "icetide JSON"})
    cfg = config(bootstrap, avro_topic, "bench.icetide_avro", work, CAPACITY)
    cfg["source"].update({"format": "avro", "schema_registry": {"url": registry_url}})
    del cfg["target"]["schema"]
    results.append({**run_worker("icetide", cfg, work, n), "system": "icetide Avro"})
    if "icetide Avro hash" in systems:
        cfg = config(bootstrap, avro_topic, "bench.icetide_avro_hash", work, CAPACITY)
        cfg["source"].update({"format": "avro", "schema_registry": {"url": registry_url}})
        cfg["target"]["properties"] = {**cfg["target"].get("properties", {}), "write.distribution-mode": "hash"}
        del cfg["target"]["schema"]
        results.append({**run_worker("icetide", cfg, work, n), "system": "icetide Avro hash"})
    for tuned in (False, True):
        if "vanilla from_avro" + (" tuned" if tuned else "") in systems:
            name = "bench.vanilla_avro" + ("_tuned" if tuned else "")
            results.append(vanilla_run(config(bootstrap, avro_topic, name, work, CAPACITY),
                                       work, n, wide, nested, tuned))
    return results, sizes


def vanilla_run(cfg: dict[str, Any], work: Path, expected: int, wide: int = 0, nested: bool = False,
                tuned: bool = False) -> dict[str, Any]:
    stem = "vanilla-avro" + ("-tuned" if tuned else "")
    path = work / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = work / f"{stem}.json"
    if one_jvm():  # the test suite's tiny runs: this process's JVM (benchmarks.common)
        in_process = vanilla_worker(path, expected, wide, nested, tuned)
        print(json.dumps(in_process), flush=True)
        return in_process
    with open(work / f"{stem}.log", "w") as log:
        rc = subprocess.call([sys.executable, "-m", "benchmarks.avro.run", "worker", str(path), str(expected),
                              str(out), str(wide), str(int(nested)), str(int(tuned))], cwd=REPO, stdout=log,
                             stderr=subprocess.STDOUT)
    if rc != 0:
        raise RuntimeError(f"vanilla from_avro worker failed; see {work / f'{stem}.log'}")
    result: dict[str, Any] = json.loads(out.read_text())
    print(json.dumps(result), flush=True)
    return result


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    by = {x["system"]: x for x in r["results"]}
    avro = by["icetide Avro"]  # --systems always has it

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}×" if a and b else "–"

    lines = [
        "# Avro benchmark: icetide Avro vs icetide JSON vs vanilla `from_avro`", "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}; Spark {m['spark']} "
        f"({m['spark_master']}), Iceberg {m['iceberg']}; {r['date']}.",
        f"{r['events']:,} events" + (f" of {r['fields']} fields" if "fields" in r else "")
        + (" (the added ones: flat, nested records, arrays, decimals, dates, optional strings)" if r.get("nested")
           else "") + " "
        f"(~{r['event_bytes']['json']} B as JSON, ~{r['event_bytes']['avro']} B as Avro) on "
        f"one 4-partition topic each, maxOffsetsPerTrigger {MAX_OFFSETS:,}, trigger 0 s, each system from a fresh "
        "JVM. *Steady* leaves out the first batch. Rates and CPU are per Kafka row read (Spark's `numInputRows`): "
        "a system that reads the topic twice per batch shows 2.0 reads per event, and its real rate is half.", "",
        "| system | events/s | Avro ÷ this | steady events/s | Avro ÷ this (steady) | JVM CPU s per 1M events "
        "| Kafka reads per event | batches | data files | rows ok |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for x in r["results"]:
        lines.append(
            f"| {x['system']} | {x['events_per_s']:,.0f} | {ratio(avro['events_per_s'], x['events_per_s'])} | "
            f"{x.get('steady_events_per_s') or 0:,.0f} | "
            f"{ratio(avro.get('steady_events_per_s'), x.get('steady_events_per_s'))} | "
            f"{x['jvm_cpu_s_per_m_events']} | {x['processed'] / x['expected']:.1f} | {x['batches']} | "
            f"{x['data_files']} | {x['rows'] == x['expected']} |")
    for x in r["results"]:
        batches = x.get("batch_phases") or []
        if not batches:
            continue
        names = list(dict.fromkeys(k for b in batches for k in b["timings"]))
        lines += ["", f"{x['system']}: seconds per phase of each batch (the batch event's `timings`)", "",
                  "| batch | records | " + " | ".join(names) + " | whole batch |",
                  "|---:|---:|" + "---:|" * (len(names) + 1)]
        for b in batches:
            lines.append(f"| {b['batch']} | {b['records']:,} | "
                         + " | ".join(f"{b['timings'].get(n, 0.0):.2f}" for n in names) + f" | {b['seconds']:.2f} |")
    lines += ["", "Targets (issue #30): Avro ≥ 1.0× icetide's own JSON events/s, and ≥ 0.9× vanilla `from_avro`.",
              "See [analysis.md](analysis.md) for where the time goes.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        _, _, cfg_path, expected, out_path, wide, nested, tuned = sys.argv
        Path(out_path).write_text(json.dumps(vanilla_worker(Path(cfg_path), int(expected), int(wide), nested == "1",
                                                            tuned == "1")))
    else:
        main()
