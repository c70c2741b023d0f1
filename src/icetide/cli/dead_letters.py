"""``icetide dead-letters``: list, show and replay records that could not be written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.markup import escape
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
    title = f"{listing.table}: {listing.total} dead letters, {listing.pending} pending"
    names = [(g["error_class"], g["topic"], g["target_table"] or "-") for g in listing.groups]
    need = sum(max([len(h), *(len(n[i]) for n in names)]) + 3 for i, h in enumerate(("class", "topic", "target")))
    if need + 7 + 9 + 24 > console.width:  # too narrow for a table with whole names: one block per group
        console.print(title, markup=False, highlight=False)
        for g, (cls, topic, target) in zip(listing.groups, names, strict=True):
            console.print(f"\n{cls}: {g['count']} ({g['pending']} pending), last {g['last']}\n  topic:  {topic}\n"
                          f"  target: {target}\n  {shown(g['example_message'] or '')}", markup=False, highlight=False)
    else:
        wide = console.width >= need + 7 + 9 + 21 + 40
        tbl = Table(title=title, caption=None if wide else "the last-seen time is in -o json")
        for name in ("class", "topic", "target"):
            tbl.add_column(name, no_wrap=True)  # names stay whole; the message wraps instead
        tbl.add_column("count", justify="right", no_wrap=True)
        tbl.add_column("pending", justify="right", no_wrap=True)
        if wide:
            tbl.add_column("last", no_wrap=True)
        tbl.add_column("message (the first of the group)", overflow="fold", min_width=20)
        for g, n in zip(listing.groups, names, strict=True):
            tbl.add_row(*n, str(g["count"]), str(g["pending"]), *([g["last"]] if wide else []),
                        escape(shown(g["example_message"] or "")))
        console.print(tbl)
    if listing.groups:
        console.print("one letter whole: icetide dead-letters show --class CLASS (or --topic, --partition, --offset)")


@dead_letters.command("show")
@config_option
@_filters
@click.option("--partition", type=int, default=None, help="Kafka partition of the record.")
@click.option("--offset", type=int, default=None, help="Kafka offset of the record.")
@engine_option
@output_option
@handle_errors
def dead_letters_show(config_path: Path, error_class: str | None, topic: str | None, target_table: str | None,
                      partition: int | None, offset: int | None, engine: str, output: str) -> None:
    """One dead letter whole: its Kafka coordinates, class, message, key, headers and raw value (the
    oldest that matches)."""
    from icetide.errors import NotFoundError
    from icetide.ingest import dead_letters as dl

    cfg, reader = load_reader(config_path, engine)
    r = dl.find(reader, cfg, dl.Filters(error_class, topic, target_table), partition, offset)
    if r is None:
        raise NotFoundError("no dead letter matches (icetide dead-letters list shows the classes and topics)")
    if output == "json":
        emit_json({k: shown(v) if isinstance(v, bytes) else v for k, v in r.items() if k != "pipeline"}
                  | {"_kafka_headers": [[k, shown(v)] for k, v in r["_kafka_headers"]]})
        return
    lines = [f"dead letter {r['_kafka_topic']}[{r['_kafka_partition']}]@{r['_kafka_offset']} "
             f"(1 of {r['matching']} matching; dead-lettered {r['dead_lettered_at']})",
             f"class:   {r['error_class']}", f"target:  {r['target_table'] or '-'}",
             f"message: {r['error_message']}", f"key:     {shown(r['_kafka_key'])}"]
    lines += [f"header:  {k} = {shown(v)}" for k, v in r["_kafka_headers"]]
    value = r["value"]
    lines.append(f"value ({len(value) if value is not None else 0} bytes):")
    for line in lines:
        console.print(line, markup=False, highlight=False)
    console.print(shown(value, limit=64 * 1024), markup=False, highlight=False, soft_wrap=True)


def shown(data: bytes | str | None, limit: int = 1024) -> str:
    """Bytes as text a terminal cannot misread: UTF-8 with control characters escaped, else hex
    (a record's value is hostile: no escape sequence reaches the terminal)."""
    if data is None:
        return "(null)"
    raw = data.encode() if isinstance(data, str) else bytes(data)
    cut = f" … ({len(raw) - limit} more bytes)" if len(raw) > limit else ""
    raw = raw[:limit]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "hex " + raw.hex(" ") + cut
    return "".join(c if c.isprintable() or c in "\n\t" else f"\\x{ord(c):02x}" for c in text) + cut


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
