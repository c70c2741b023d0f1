"""``icetide dead-letters``: list and replay records that could not be written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.table import Table

from icetide.app.output import console, emit_json, handle_errors, output_option
from icetide.cli.common import config_option, engine_option, load_reader, load_with_session


@click.group("dead-letters")
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
@engine_option
@output_option
@handle_errors
def dead_letters_list(config_path: Path, error_class: str | None, topic: str | None, target_table: str | None,
                      include_replayed: bool, engine: str, output: str) -> None:
    """Dead letters grouped by error class, topic and target, with pending (not replayed) counts."""
    from icetide.ingest import dead_letters as dl

    cfg, reader = load_reader(config_path, engine)
    listing = dl.list_groups(reader, cfg, dl.Filters(error_class, topic, target_table, include_replayed))
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

    cfg, spark = load_with_session(config_path)
    with console.status("replaying dead letters…" if not dry_run else "counting dead letters…"):
        result = dl.replay(spark, cfg, dl.Filters(error_class, topic, target_table), dry_run=dry_run, to_topic=to_topic)
    if output == "json":
        emit_json(result)
    elif dry_run:
        console.print(f"would replay {result['records']} dead letters")
    else:
        console.print(f"[green]✓[/] replayed {result['replayed']} dead letters to {result.get('to_topic', '-')} "
                      f"(replay {result.get('replay_id', '-')})")
