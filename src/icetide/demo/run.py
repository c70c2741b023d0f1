"""``icetide demo``: everything on the embedded default, from a fresh machine."""

from __future__ import annotations

import shutil
import time
from typing import Any

import yaml
from rich.table import Table

from icetide import jvm, paths
from icetide.app.output import console
from icetide.app.render import health_table, print_actions, print_plans
from icetide.config import load_config
from icetide.demo.events import create_topic, produce, sample_values
from icetide.health.watch import collect_all
from icetide.secrets import error_line
from icetide.services.kafka import LocalKafka

TOPIC = "demo.events"


def demo_config(port: int, trigger: str = "5 seconds", registry_url: str | None = None,
                fmt: str = "avro") -> dict[str, Any]:
    """The demo pipeline; with ``registry_url``, ``fmt`` (avro, protobuf, json_schema) values whose schema
    comes from the registry."""
    cfg: dict[str, Any] = {
        "name": "demo",
        "source": {"bootstrap_servers": f"127.0.0.1:{port}", "topics": [TOPIC],
                   "starting_offsets": "earliest", "max_offsets_per_trigger": 5000},
        "catalog": {"type": "jdbc", "uri": "jdbc:sqlite:catalog.db", "warehouse": "warehouse"},
        "target": {
            "table": "demo.events",
            "schema": "id STRING, event_time TIMESTAMP, user_id BIGINT, event_type STRING, amount DOUBLE",
            "partition_by": ["days(event_time)"],
        },
        "dead_letter": {"table": "demo.dead_letters"},
        "health": {"namespaces": ["demo"], "history_table": "demo.health"},
        # The demo stream has stopped when maintenance runs, so a short quiet time is safe here;
        # production default is 15 minutes.
        "maintenance": {"log_table": "demo.maintenance", "rewrites_per_cycle": 2,
                        "policy": {"hot_partition_quiet_seconds": 5, "min_input_files": 2,
                                   "snapshots_trigger": 5, "snapshot_retain_last": 2,
                                   "snapshot_max_age_seconds": 1, "manifests_trigger": 4}},
        "stream": {"trigger_interval": trigger, "checkpoint_location": "checkpoints/{pipeline}"},
        "spark": {"master": "local[2]"},
    }
    if registry_url is not None:
        cfg["source"].update({"format": fmt, "schema_registry": {"url": registry_url}})
        cfg["target"].pop("schema")
    return cfg


def run_demo(seconds: float, events: int, port: int, fresh: bool, fmt: str = "json", registry_port: int = 8095) -> None:
    from icetide.app.runner import run_until_stopped

    home = paths.home()
    demo_dir = home / "demo"
    if fresh and demo_dir.exists():
        shutil.rmtree(demo_dir)
    demo_dir.mkdir(parents=True, exist_ok=True)
    registered = fmt in ("avro", "protobuf", "json_schema")
    for profile in ("spark", "kafka", *(["registry"] if registered else [])):
        with console.status(f"fetching {profile} jars with Maven (first run only)…"):
            jvm.fetch(profile)
    broker = LocalKafka(port=port)
    if fresh:
        broker.reset()
    registry = None
    try:  # the services run in sessions of their own: never left behind
        with console.status(f"starting Kafka on {broker.bootstrap}…"):
            broker.start()
        console.print(f"[green]✓[/] Kafka (KRaft) on {broker.bootstrap}")
        create_topic(broker.bootstrap, TOPIC, partitions=4)
        if registered:
            from icetide.demo.avro_events import avro_values
            from icetide.demo.json_schema_events import json_schema_values
            from icetide.demo.protobuf_events import protobuf_values
            from icetide.services.registry import LocalRegistry

            registry = LocalRegistry(port=registry_port, management_port=registry_port + 1000)
            if fresh:
                registry.reset()
            with console.status("starting the schema registry…"):
                registry.start()
            console.print(f"[green]✓[/] schema registry (Apicurio, Confluent API) on {registry.url}")
            make = {"avro": avro_values, "protobuf": protobuf_values, "json_schema": json_schema_values}[fmt]
            values = make(events, registry.url, TOPIC, bad_every=200)
        else:
            values = sample_values(events, bad_every=200)
        produced = produce(broker.bootstrap, TOPIC, values)
        name = {"json_schema": "JSON Schema"}.get(fmt, fmt.upper())
        console.print(f"[green]✓[/] produced {produced.good} events as {name} (+ {produced.bad} bad records, "
                      f"a new 'device' field from halfway) to '{TOPIC}'")

        cfg_path = demo_dir / "pipeline.yaml"
        cfg_path.write_text(yaml.safe_dump(demo_config(port, registry_url=registry.url if registry else None, fmt=fmt),
                                           sort_keys=False))
        cfg = load_config(cfg_path)
        console.print(f"[green]✓[/] pipeline config: {cfg_path}")
        started = time.monotonic()
        runner, summary = run_until_stopped(cfg, duration=seconds, until_idle=True)
        console.print(f"[green]✓[/] ingested for {time.monotonic() - started:.0f}s: {summary.describe()}")
        if summary.stopped_by in ("SIGINT", "SIGTERM"):  # Ctrl-C: maybe before any table exists
            console.print(f"stopped by {summary.stopped_by}: no report")
            return
        report(runner.spark, cfg.catalog.name)
        health_table(collect_all(runner.spark, cfg, record=True, alert=False), "Table health before maintenance "
                     "(metadata only)")
        maintenance(runner.spark, cfg)
        health_report(runner.spark, cfg, demo_dir)
    finally:
        for service in (broker, registry):
            if service is not None:
                try:
                    service.stop()
                except Exception as e:  # the other one is stopped all the same
                    console.print(f"could not stop {type(service).__name__}: {error_line(e)}", markup=False)


def maintenance(spark, cfg) -> None:  # type: ignore[no-untyped-def]
    """Plan (explained) and run one maintenance cycle on the demo tables."""
    from icetide.maintenance.cycle import run_cycle

    time.sleep(cfg.maintenance.policy.hot_partition_quiet_seconds)
    plans, records = run_cycle(spark, cfg)
    print_plans(plans)
    print_actions(records, title="Maintenance actions")


def health_report(spark, cfg, demo_dir) -> None:  # type: ignore[no-untyped-def]
    """Table health after maintenance, recorded to history, and the HTML report."""
    from icetide.health.report import build

    health_table(collect_all(spark, cfg, record=True, alert=False), "Table health after maintenance "
                 "(metadata only)")
    page = demo_dir / "report.html"
    page.write_text(build(spark, cfg, 24).html)
    console.print(f"[green]✓[/] HTML health report: {page}")


def report(spark, catalog: str) -> None:  # type: ignore[no-untyped-def]
    t = f"{catalog}.demo.events"
    dl = f"{catalog}.demo.dead_letters"
    rows = spark.table(t).count()
    distinct = spark.table(t).select("id").distinct().count()
    files = spark.sql(f"SELECT count(*) n, coalesce(sum(file_size_in_bytes),0) b FROM {t}.files").first()
    snaps = spark.sql(f"SELECT count(*) n FROM {t}.snapshots").first()
    parts = spark.sql(f"SELECT count(*) n FROM {t}.partitions").first()
    tbl = Table("what", "value", title=f"What landed in {t}")
    tbl.add_row("rows (distinct ids)", f"{rows} ({distinct})")
    tbl.add_row("data files / bytes", f"{files['n']} / {files['b']:,}")
    tbl.add_row("partitions (days)", str(parts["n"]))
    tbl.add_row("snapshots", str(snaps["n"]))
    console.print(tbl)
    off = Table("topic", "partition", "next offset held", title="Kafka offsets recorded in the table")
    from icetide.lake.offsets import read_watermark

    wm = read_watermark(spark, t, "demo")
    for (topic, p), o in sorted((wm.offsets if wm else {}).items()):
        off.add_row(topic, str(p), str(o))
    console.print(off)
    dead = Table("error class", "count", "example message", title=f"Dead letters in {dl}")
    for r in spark.sql(
        f"SELECT error_class, count(*) n, first(error_message) m FROM {dl} GROUP BY error_class ORDER BY n DESC"
    ).collect():
        dead.add_row(r["error_class"], str(r["n"]), r["m"])
    console.print(dead)
