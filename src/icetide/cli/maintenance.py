"""Maintenance commands: plan (dry run) and maintain."""

from __future__ import annotations

from pathlib import Path

import click

from icetide.app.output import console, emit_json, handle_errors, output_option
from icetide.app.render import print_actions, print_plans
from icetide.cli.common import (
    config_option,
    engine_option,
    load_reader,
    load_with_session,
    namespaces_option,
    tables_in,
    tables_option,
)


@click.command()
@config_option
@namespaces_option
@tables_option
@engine_option
@output_option
@handle_errors
def plan(config_path: Path, namespaces: tuple[str, ...], only_tables: tuple[str, ...], engine: str,
         output: str) -> None:
    """Dry run: what maintenance would do to each table, in priority order, and why (reads only)."""
    from icetide.maintenance.cycle import plan_all

    cfg, reader = load_reader(config_path, engine)
    plans = plan_all(reader, cfg, tables_in(reader, cfg, namespaces, only_tables))
    if output == "json":
        emit_json([p.as_dict() for p in plans])
    else:
        print_plans(plans)


@click.command()
@config_option
@namespaces_option
@tables_option
@click.option("--dry-run", is_flag=True, help="Plan and record, change nothing (orphans: list only).")
@click.option("--watch", is_flag=True, help="Keep running: a cycle every maintenance.interval (polling).")
@output_option
@handle_errors
def maintain(config_path: Path, namespaces: tuple[str, ...], only_tables: tuple[str, ...], dry_run: bool, watch: bool,
             output: str) -> None:
    """Run a maintenance cycle against any catalog/namespace: plan, then execute in priority order."""
    from dataclasses import asdict

    from icetide.maintenance.cycle import run_cycle

    cfg, spark = load_with_session(config_path)
    tables = tables_in(spark, cfg, namespaces, only_tables)
    if watch:
        from icetide.maintenance.loop import MaintenanceLoop

        MaintenanceLoop(spark, cfg, lambda: tables, run_first=True).stop_on_signals().run()
        return
    with console.status("planning…") as status:
        def step(table: str, i: int, n: int) -> None:
            status.update(f"maintaining {table} ({i + 1}/{n})…")

        plans, records = run_cycle(spark, cfg, tables, dry_run=dry_run, progress=step)
    if output == "json":
        emit_json({"plans": [p.as_dict() for p in plans], "actions": [asdict(r) for r in records]})
        return
    print_plans(plans)
    print_actions(records)
