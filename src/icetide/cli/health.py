"""Read commands on table health: status, health, report, metrics."""

from __future__ import annotations

from pathlib import Path

import click

from icetide.app.output import console, emit_json, handle_errors, output_option
from icetide.app.render import TIER_STYLE, health_table, human_bytes, partition_table
from icetide.cli.common import config_option, engine_option, load_reader, load_with_session, tables_in


@click.command()
@config_option
@click.option("--namespace", "-n", "namespaces", multiple=True, help="Namespaces to scan (default: health.namespaces, "
              "else the target's namespace).")
@click.option("--record/--no-record", default=False, help="Append this collection to the health history table "
              "(starts Spark to write it).")
@engine_option
@output_option
@handle_errors
def status(config_path: Path, namespaces: tuple[str, ...], record: bool, engine: str, output: str) -> None:
    """Health of every table in the watched namespaces, worst first (metadata only)."""
    from icetide.health.watch import collect_all

    if record:
        cfg, spark = load_with_session(config_path)
        healths = collect_all(spark, cfg, tables_in(spark, cfg, namespaces), record=True)
    else:
        cfg, reader = load_reader(config_path, engine)
        healths = collect_all(reader, cfg, tables_in(reader, cfg, namespaces))
    if output == "json":
        emit_json([h.summary() for h in healths])
        return
    health_table(healths)


@click.command()
@config_option
@click.argument("table")
@engine_option
@output_option
@handle_errors
def health(config_path: Path, table: str, engine: str, output: str) -> None:
    """Per-partition health of TABLE (namespace.table), metadata only."""
    from icetide.health.collector import collect

    cfg, reader = load_reader(config_path, engine)
    [table] = tables_in(reader, cfg, (), (table,)) or [table]
    h = collect(reader, table, cfg.health.thresholds_for(table))
    if output == "json":
        emit_json({**h.summary(), "partitions": h.partition_rows()})
        return
    console.print(f"[bold]{table}[/]: [{TIER_STYLE[h.tier]}]{h.tier}[/], score {h.score:.1f}; "
                  f"{h.snapshots} snapshots, {h.manifests} manifests, metadata "
                  f"{human_bytes(h.metadata_file_bytes or 0)}, target file {human_bytes(h.target_file_bytes)}")
    for r in h.reasons:
        console.print(f"  {r}")
    partition_table(h)


@click.command()
@config_option
@click.option("--out", "-o", "out_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("icetide-report.html"), show_default=True, help="HTML file to write.")
@click.option("--hours", default=24 * 7, show_default=True, help="History window.")
@click.option("--collect/--no-collect", default=False, show_default=True,
              help="Collect and record health first (starts Spark to write the history table).")
@engine_option
@handle_errors
def report(config_path: Path, out_path: Path, hours: float, collect: bool, engine: str) -> None:
    """Write a self-contained HTML report with interactive charts over time from the health history."""
    from icetide.health.report import build

    if collect:
        from icetide.health.watch import collect_all
        from icetide.lake.readers import open_reader

        cfg, spark = load_with_session(config_path)
        collect_all(spark, cfg, record=True)
        reader = open_reader(cfg, spark)
    else:
        cfg, reader = load_reader(config_path, engine)
    page = build(reader, cfg, hours)
    out_path.write_text(page.html)
    n = page.collections
    console.print(f"[green]✓[/] wrote {out_path} ({n} collection{'' if n == 1 else 's'})")
    if n == 0:
        console.print("[yellow]![/] no health history in this window: record some with `icetide status --record` "
                      "or `icetide report --collect`")


@click.command()
@config_option
@click.option("--once", is_flag=True, help="Collect once, serve for --for seconds, exit (for checks).")
@click.option("--for", "duration", type=float, default=None, help="Stop after this many seconds.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port (default: health.metrics_port).")
@click.option("--host", default=None, help="Address to bind (default: health.metrics_host).")
@engine_option
@handle_errors
def metrics(config_path: Path, once: bool, duration: float | None, port: int | None, host: str | None,
            engine: str) -> None:
    """Serve a Prometheus endpoint with health figures, collected every health.interval."""

    from prometheus_client import REGISTRY, start_http_server

    from icetide.config.base import interval_seconds
    from icetide.errors import ServiceUnreachableError
    from icetide.health.metrics import HealthCollector, MetricsLoop
    from icetide.health.watch import collect_all

    cfg, reader = load_reader(config_path, engine)
    collector = HealthCollector(cfg.health.max_partitions_exported)
    REGISTRY.register(collector)
    collector.update(collect_all(reader, cfg))
    port, host = port or cfg.health.metrics_port, host or cfg.health.metrics_host
    try:
        start_http_server(port, addr=host)
    except OSError as e:
        raise ServiceUnreachableError(f"health.metrics_port: cannot serve on {host}:{port} ({e.strerror}); "
                                      "pick another with --port") from None
    console.print(f"serving metrics on http://{host}:{port}/metrics")
    every = float("inf") if once else interval_seconds(cfg.health.interval)
    MetricsLoop(reader, cfg, collector, every).stop_on_signals().run(duration)


@click.command()
@config_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=8765, show_default=True, help="Port to serve on.")
@click.option("--interval", default=5.0, show_default=True, help="Seconds between collections.")
@click.option("--hours", default=24.0, show_default=True, help="Recorded history shown with the live series.")
@click.option("--for", "duration", type=float, default=None, help="Stop after this many seconds.")
@engine_option
@handle_errors
def ui(config_path: Path, host: str, port: int, interval: float, hours: float, duration: float | None,
       engine: str) -> None:
    """Serve a live dashboard: tables worst-first, partitions, series, the plan, actions, dead letters."""
    from icetide.app.dashboard import DashboardLoop, serve

    cfg, reader = load_reader(config_path, engine)
    loop = DashboardLoop(reader, cfg, interval, hours)
    loop.tick()  # the first state before the page is served
    server = serve(loop, host, port)
    console.print(f"icetide dashboard on http://{host}:{server.server_address[1]}/ (Ctrl-C to stop)")
    try:
        loop.stop_on_signals().run(duration)
    finally:
        server.shutdown()
