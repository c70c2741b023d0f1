"""Read commands on table health: status, health, report, metrics."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from icetide.app.output import console, emit_json, handle_errors, output_option
from icetide.app.render import TIER_STYLE, health_table, human_bytes
from icetide.cli.common import config_option, load_with_session, tables_in


@click.command()
@config_option
@click.option("--namespace", "-n", "namespaces", multiple=True, help="Namespaces to scan (default: health.namespaces, "
              "else the target's namespace).")
@click.option("--record/--no-record", default=False, help="Append this collection to the health history table.")
@output_option
@handle_errors
def status(config_path: Path, namespaces: tuple[str, ...], record: bool, output: str) -> None:
    """Health of every table in the watched namespaces, worst first (metadata only)."""
    from icetide.health.watch import collect_all

    cfg, spark = load_with_session(config_path)
    tables = tables_in(spark, cfg, namespaces)
    healths = collect_all(spark, cfg, tables, record=record)
    if output == "json":
        emit_json([h.summary() for h in healths])
        return
    health_table(healths)


@click.command()
@config_option
@click.argument("table")
@output_option
@handle_errors
def health(config_path: Path, table: str, output: str) -> None:
    """Per-partition health of TABLE (namespace.table), metadata only."""
    from icetide.health.collector import collect
    from icetide.identifiers import validate_table

    validate_table(table)
    cfg, spark = load_with_session(config_path)
    h = collect(spark, f"{cfg.catalog.name}.{table}", cfg.health.thresholds_for(table))
    if output == "json":
        emit_json({**h.summary(), "partitions": h.partition_rows()})
        return
    console.print(f"[bold]{h.table}[/]: [{TIER_STYLE[h.tier]}]{h.tier}[/], score {h.score:.1f}; "
                  f"{h.snapshots} snapshots, {h.manifests} manifests, metadata "
                  f"{human_bytes(h.metadata_file_bytes or 0)}, target file {human_bytes(h.target_file_bytes)}")
    for r in h.reasons:
        console.print(f"  {r}")
    tbl = Table("partition", "tier", "score", "files", "small", "avg size", "rows", "pos del", "eq del",
                "delete ratio", "hot")
    for p in sorted(h.partitions, key=lambda p: (p.score, p.partition)):
        tbl.add_row(p.partition or "(unpartitioned)", f"[{TIER_STYLE[p.tier]}]{p.tier}[/]", f"{p.score:.1f}",
                    str(p.data_files), str(p.small_files), human_bytes(p.avg_file_bytes), str(p.records),
                    str(p.position_delete_files), str(p.equality_delete_files), f"{p.delete_ratio:.1%}",
                    "hot" if p.hot else "")
    console.print(tbl)


@click.command()
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

    cfg, spark = load_with_session(config_path)
    if collect:
        collect_all(spark, cfg, record=True)
    rows = history_rows(spark, cfg.catalog.name, cfg.health.history_table, hours)
    actions = maintenance_rows(spark, cfg.catalog.name, cfg.maintenance.log_table, hours)
    out_path.write_text(render(rows, actions))
    console.print(f"[green]✓[/] wrote {out_path} ({len(rows)} collections)")


@click.command()
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

    cfg, spark = load_with_session(config_path)
    collector = HealthCollector(cfg.health.max_partitions_exported)
    REGISTRY.register(collector)
    collector.update(collect_all(spark, cfg))
    start_http_server(cfg.health.metrics_port, addr=cfg.health.metrics_host)
    console.print(f"serving metrics on http://{cfg.health.metrics_host}:{cfg.health.metrics_port}/metrics")
    every = float("inf") if once else interval_seconds(cfg.health.interval)
    MetricsLoop(spark, cfg, collector, every).stop_on_signals().run(duration)
