"""``icetide``: ingest Kafka into Iceberg exactly once, and keep the tables healthy."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.table import Table

from icetide import __version__, jvm
from icetide.app.output import (
    console,
    emit_json,
    handle_errors,
    output_option,
    setup_logging,
)
from icetide.config import load_config

config_option = click.option(
    "--config", "-c", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
    help="Pipeline YAML file.",
)


@click.group()
@click.version_option(__version__, prog_name="icetide")
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
def cli(verbose: bool) -> None:
    """icetide: Kafka → Apache Iceberg on Spark, exactly once, with table upkeep."""
    setup_logging(verbose)


@cli.command()
@click.option("--profile", "profiles", multiple=True, type=click.Choice(jvm.PROFILES),
              help="Jar profiles to fetch (default: all).")
@handle_errors
def setup(profiles: tuple[str, ...]) -> None:
    """Fetch the pinned jars (Iceberg, Spark Kafka source, Kafka broker, REST catalog) with Maven."""
    for p in profiles or jvm.PROFILES:
        out = jvm.fetch(p)
        console.print(f"[green]✓[/] {p} jars in {out} ({len(list(out.glob('*.jar')))} jars)")
    if not profiles or "spark" in profiles:
        console.print(f"[green]✓[/] icetide's JVM classes in {jvm.build()}")


@cli.group()
def kafka() -> None:
    """A local single-node Kafka broker (KRaft) for development, the demo and tests."""


def _broker(port: int):  # type: ignore[no-untyped-def]
    from icetide.services.kafka import LocalKafka

    return LocalKafka(port=port)


port_option = click.option("--port", default=9092, show_default=True, help="Broker port (controller: +1).")


@kafka.command("start")
@port_option
@handle_errors
def kafka_start(port: int) -> None:
    """Start the broker on 127.0.0.1 and wait until it serves requests."""
    b = _broker(port).start()
    console.print(f"[green]✓[/] Kafka broker ready on {b.bootstrap} (state in {b.dir})")


@kafka.command("stop")
@port_option
@handle_errors
def kafka_stop(port: int) -> None:
    """Stop the broker (SIGTERM, then SIGKILL after 60 s)."""
    was = _broker(port).stop()
    console.print("stopped" if was else "not running")


@kafka.command("status")
@port_option
@handle_errors
def kafka_status(port: int) -> None:
    """Is the broker running?"""
    b = _broker(port)
    console.print(f"running on {b.bootstrap}" if b.running() else "not running")


@cli.command()
@config_option
@handle_errors
def check(config_path: Path) -> None:
    """Validate a pipeline config and check that Kafka and the catalog are reachable."""
    from icetide.catalog import check_reachable
    from icetide.ingest.source import list_partitions

    cfg = load_config(config_path)
    check_reachable(cfg)
    parts = list_partitions(cfg.source)
    console.print(f"[green]✓[/] {config_path}: valid; Kafka reachable ({len(parts)} topics); catalog ok")


@cli.command()
@config_option
@click.option("--for", "duration", type=float, default=None, help="Stop after this many seconds.")
@click.option("--until-idle", is_flag=True, help="Stop once a trigger finds no new records.")
@handle_errors
def run(config_path: Path, duration: float | None, until_idle: bool) -> None:
    """Run the pipeline: Kafka → Iceberg, exactly once, until SIGTERM/SIGINT."""
    from icetide.app.runner import run_until_stopped

    _, summary = run_until_stopped(load_config(config_path), duration, until_idle)
    console.print(f"stopped ({summary.stopped_by}): {summary.describe()}")


@cli.command()
@config_option
@output_option
@handle_errors
def offsets(config_path: Path, output: str) -> None:
    """Which Kafka offsets each table of the pipeline holds (from the tables themselves)."""
    from icetide.app.runner import table_watermarks
    from icetide.ingest.sink import BatchWriter
    from icetide.spark import build_session

    cfg = load_config(config_path)
    spark = build_session(cfg)
    wms = table_watermarks(spark, BatchWriter(spark, cfg, "inspect"))
    data = {t: {"run": w.run, "batch": w.batch, "committed_at_ms": w.committed_at_ms,
                "next_offsets": json.loads(w.encode())} for t, w in wms.items()}
    if output == "json":
        emit_json(data)
        return
    tbl = Table("table", "topic", "partition", "next offset", "batch", title=f"pipeline {cfg.name}")
    for t, w in wms.items():
        for (topic, part), off in sorted(w.offsets.items()):
            tbl.add_row(t, topic, str(part), str(off), str(w.batch))
    console.print(tbl)


@cli.group("dead-letters")
def dead_letters() -> None:
    """List and replay records that could not be written."""


_dl_filters = [
    click.option("--class", "error_class", default=None, help="Only this error class, e.g. type_mismatch."),
    click.option("--topic", default=None, help="Only records from this topic."),
    click.option("--table", "target_table", default=None, help="Only records routed to this namespace.table."),
]


FnT = TypeVar("FnT", bound=Callable[..., Any])


def _filters(fn: FnT) -> FnT:
    for opt in reversed(_dl_filters):
        fn = opt(fn)
    return fn


@dead_letters.command("list")
@config_option
@_filters
@click.option("--all", "include_replayed", is_flag=True, help="Count replayed dead letters as pending too.")
@output_option
@handle_errors
def dead_letters_list(config_path: Path, error_class: str | None, topic: str | None, target_table: str | None,
                      include_replayed: bool, output: str) -> None:
    """Dead letters grouped by error class, topic and target, with pending (not replayed) counts."""
    from icetide.ingest import dead_letters as dl
    from icetide.spark import build_session

    cfg = load_config(config_path)
    spark = build_session(cfg)
    listing = dl.list_groups(spark, cfg, dl.Filters(error_class, topic, target_table, include_replayed))
    if output == "json":
        emit_json({"table": listing.table, "total": listing.total, "pending": listing.pending,
                   "groups": listing.groups})
        return
    tbl = Table("class", "topic", "target", "count", "pending", "last", "example",
                title=f"{listing.table}: {listing.total} dead letters, {listing.pending} pending")
    for g in listing.groups:
        tbl.add_row(g["error_class"], g["topic"], g["target_table"] or "-", str(g["count"]), str(g["pending"]),
                    g["last"], (g["example_message"] or "")[:80])
    console.print(tbl)


@dead_letters.command("replay")
@config_option
@_filters
@click.option("--to-topic", default=None, help="Produce to this topic instead of each record's original topic.")
@click.option("--dry-run", is_flag=True, help="Count what would be replayed; produce nothing.")
@output_option
@handle_errors
def dead_letters_replay(config_path: Path, error_class: str | None, topic: str | None, target_table: str | None,
                        to_topic: str | None, dry_run: bool, output: str) -> None:
    """Produce pending dead letters again (after fixing config or producers); each is replayed once."""
    from icetide.ingest import dead_letters as dl
    from icetide.spark import build_session

    cfg = load_config(config_path)
    spark = build_session(cfg)
    result = dl.replay(spark, cfg, dl.Filters(error_class, topic, target_table), dry_run=dry_run, to_topic=to_topic)
    if output == "json":
        emit_json(result)
    elif dry_run:
        console.print(f"would replay {result['records']} dead letters")
    else:
        console.print(f"[green]✓[/] replayed {result['replayed']} dead letters to {result.get('to_topic', '-')} "
                      f"(replay {result.get('replay_id', '-')})")


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


_TIER_STYLE = {"healthy": "green", "warning": "yellow", "critical": "bold red"}


@cli.command()
@config_option
@click.option("--namespace", "-n", "namespaces", multiple=True, help="Namespaces to scan (default: health.namespaces, "
              "else the target's namespace).")
@click.option("--record/--no-record", default=False, help="Append this collection to the health history table.")
@output_option
@handle_errors
def status(config_path: Path, namespaces: tuple[str, ...], record: bool, output: str) -> None:
    """Health of every table in the watched namespaces, worst first (metadata only)."""
    from icetide.health.watch import collect_all
    from icetide.ingest.tables import list_tables
    from icetide.spark import build_session

    cfg = load_config(config_path)
    spark = build_session(cfg)
    tables = [t for ns in namespaces for t in list_tables(spark, cfg.catalog.name, ns)] if namespaces else None
    healths = collect_all(spark, cfg, tables, record=record)
    if output == "json":
        emit_json([h.summary() for h in healths])
        return
    tbl = Table("table", "tier", "score", "files", "small", "avg size", "max/partition", "deletes",
                "snapshots", "manifests", "commits/h", title="icetide status (worst first)")
    for h in healths:
        tbl.add_row(h.table, f"[{_TIER_STYLE[h.tier]}]{h.tier}[/]", f"{h.score:.1f}", str(h.data_files),
                    str(h.small_files), _bytes(h.avg_file_bytes), str(h.max_partition_files),
                    f"{h.delete_files} ({h.delete_ratio:.1%})", str(h.snapshots), str(h.manifests),
                    str(h.commits_last_hour))
    console.print(tbl)
    for h in healths:
        if h.tier != "healthy":
            console.print(f"[{_TIER_STYLE[h.tier]}]{h.table}[/]: " + "; ".join(h.reasons))


@cli.command()
@config_option
@click.argument("table")
@output_option
@handle_errors
def health(config_path: Path, table: str, output: str) -> None:
    """Per-partition health of TABLE (namespace.table), metadata only."""
    from icetide.health.collector import collect
    from icetide.identifiers import validate_table
    from icetide.spark import build_session

    cfg = load_config(config_path)
    validate_table(table)
    spark = build_session(cfg)
    h = collect(spark, f"{cfg.catalog.name}.{table}", cfg.health.thresholds_for(table))
    if output == "json":
        emit_json({**h.summary(), "partitions": h.partition_rows()})
        return
    console.print(f"[bold]{h.table}[/]: [{_TIER_STYLE[h.tier]}]{h.tier}[/], score {h.score:.1f}; "
                  f"{h.snapshots} snapshots, {h.manifests} manifests, metadata "
                  f"{_bytes(h.metadata_file_bytes or 0)}, target file {_bytes(h.target_file_bytes)}")
    for r in h.reasons:
        console.print(f"  {r}")
    tbl = Table("partition", "tier", "score", "files", "small", "avg size", "rows", "pos del", "eq del",
                "delete ratio", "hot")
    for p in sorted(h.partitions, key=lambda p: (p.score, p.partition)):
        tbl.add_row(p.partition or "(unpartitioned)", f"[{_TIER_STYLE[p.tier]}]{p.tier}[/]", f"{p.score:.1f}",
                    str(p.data_files), str(p.small_files), _bytes(p.avg_file_bytes), str(p.records),
                    str(p.position_delete_files), str(p.equality_delete_files), f"{p.delete_ratio:.1%}",
                    "hot" if p.hot else "")
    console.print(tbl)


def _print_plans(plans) -> None:  # type: ignore[no-untyped-def]
    if not plans:
        console.print("no tables")
    for i, p in enumerate(plans, 1):
        queried = f", {p.queries} queries in the telemetry window" if p.queries else ""
        console.print(f"[bold]{i}. {p.table}[/]  priority {p.priority:g}  ({p.tier}, score {p.score:.1f}{queried})")
        if not p.steps:
            console.print("   nothing to do")
        for s in p.steps:
            console.print(f"   [cyan]{s.action}[/]: {s.reason}")
            console.print(f"      figures: {json.dumps(s.figures)}")
            console.print(f"      expected: {s.expected}")
            if s.args.get("where"):
                console.print(f"      where: {s.args['where']}")
        for skip in p.skipped:
            console.print(f"   [yellow]left alone[/]: {skip}")


@cli.command()
@config_option
@click.option("--namespace", "-n", "namespaces", multiple=True, help="Namespaces (default: health.namespaces).")
@output_option
@handle_errors
def plan(config_path: Path, namespaces: tuple[str, ...], output: str) -> None:
    """Dry run: what maintenance would do to each table, in priority order, and why."""
    from icetide.ingest.tables import list_tables
    from icetide.maintenance.cycle import plan_all
    from icetide.spark import build_session

    cfg = load_config(config_path)
    spark = build_session(cfg)
    tables = [t for ns in namespaces for t in list_tables(spark, cfg.catalog.name, ns)] if namespaces else None
    plans = plan_all(spark, cfg, tables)
    if output == "json":
        emit_json([p.as_dict() for p in plans])
    else:
        _print_plans(plans)


@cli.command()
@config_option
@click.option("--namespace", "-n", "namespaces", multiple=True, help="Namespaces (default: health.namespaces).")
@click.option("--dry-run", is_flag=True, help="Plan and record, change nothing (orphans: list only).")
@click.option("--watch", is_flag=True, help="Keep running: a cycle every maintenance.interval (polling).")
@output_option
@handle_errors
def maintain(config_path: Path, namespaces: tuple[str, ...], dry_run: bool, watch: bool, output: str) -> None:
    """Run a maintenance cycle against any catalog/namespace: plan, then execute in priority order."""
    from dataclasses import asdict

    from icetide.ingest.tables import list_tables
    from icetide.maintenance.cycle import run_cycle
    from icetide.spark import build_session

    cfg = load_config(config_path)
    spark = build_session(cfg)
    tables = [t for ns in namespaces for t in list_tables(spark, cfg.catalog.name, ns)] if namespaces else None
    if watch:
        from icetide.maintenance.loop import MaintenanceLoop

        MaintenanceLoop(spark, cfg, lambda: tables, run_first=True).stop_on_signals().run()
        return
    plans, records = run_cycle(spark, cfg, tables, dry_run=dry_run)
    if output == "json":
        emit_json({"plans": [p.as_dict() for p in plans], "actions": [asdict(r) for r in records]})
        return
    _print_plans(plans)
    tbl = Table("table", "step", "outcome", "files in → out", "bytes in", "s", "attempts", title="actions")
    for r in records:
        tbl.add_row(r.table, r.step, r.outcome, f"{r.files_in} → {r.files_out}", str(r.bytes_in or ""),
                    f"{r.seconds:.1f}", str(r.attempts))
    console.print(tbl)


@cli.command()
@config_option
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("icetide-report.html"),
              show_default=True, help="HTML file to write.")
@click.option("--hours", default=24 * 7, show_default=True, help="History window.")
@click.option("--collect/--no-collect", default=True, show_default=True,
              help="Collect and record health now before rendering.")
@handle_errors
def report(config_path: Path, out_path: Path, hours: float, collect: bool) -> None:
    """Write a self-contained HTML report with plots over time from the health history."""
    from icetide.health.report import history_rows, maintenance_rows, render
    from icetide.health.watch import collect_all
    from icetide.spark import build_session

    cfg = load_config(config_path)
    spark = build_session(cfg)
    if collect:
        collect_all(spark, cfg, record=True)
    rows = history_rows(spark, cfg.catalog.name, cfg.health.history_table, hours)
    actions = maintenance_rows(spark, cfg.catalog.name, cfg.maintenance.log_table, hours)
    out_path.write_text(render(rows, actions))
    console.print(f"[green]✓[/] wrote {out_path} ({len(rows)} collections)")


@cli.command()
@config_option
@click.option("--once", is_flag=True, help="Collect once, serve for --for seconds, exit (for checks).")
@click.option("--for", "duration", type=float, default=None, help="Stop after this many seconds.")
@handle_errors
def metrics(config_path: Path, once: bool, duration: float | None) -> None:
    """Serve a Prometheus endpoint with health figures, collected every health.interval."""

    from prometheus_client import REGISTRY, start_http_server

    from icetide.config.base import interval_seconds
    from icetide.health.metrics import HealthCollector, MetricsLoop
    from icetide.health.watch import collect_all
    from icetide.spark import build_session

    cfg = load_config(config_path)
    spark = build_session(cfg)
    collector = HealthCollector(cfg.health.max_partitions_exported)
    REGISTRY.register(collector)
    collector.update(collect_all(spark, cfg))
    start_http_server(cfg.health.metrics_port, addr=cfg.health.metrics_host)
    console.print(f"serving metrics on http://{cfg.health.metrics_host}:{cfg.health.metrics_port}/metrics")
    every = float("inf") if once else interval_seconds(cfg.health.interval)
    MetricsLoop(spark, cfg, collector, every).stop_on_signals().run(duration)


@cli.command()
@click.option("--seconds", default=60.0, show_default=True, help="How long to ingest.")
@click.option("--events", default=20_000, show_default=True, help="Sample events to produce.")
@click.option("--port", default=9092, show_default=True, help="Local broker port.")
@click.option("--fresh/--keep", default=True, show_default=True, help="Start from an empty demo folder.")
@handle_errors
def demo(seconds: float, events: int, port: int, fresh: bool) -> None:
    """Start a local Kafka, produce sample events (schema drift, bad records), ingest, report."""
    from icetide.demo.run import run_demo

    run_demo(seconds=seconds, events=events, port=port, fresh=fresh)


def main() -> None:
    cli(prog_name="icetide")


if __name__ == "__main__":
    main()
