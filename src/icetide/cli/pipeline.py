"""Commands that set up and run a pipeline: setup, kafka, check, run, offsets, demo."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table

from icetide import jvm
from icetide.app.output import (
    EXIT_CONFIG,
    EXIT_NOT_RUNNING,
    EXIT_RUNTIME,
    console,
    emit_json,
    handle_errors,
    output_option,
)
from icetide.cli.common import config_option, engine_option, load_reader
from icetide.config import load_config
from icetide.secrets import scrub


@click.command()
@click.option("--profile", "profiles", multiple=True, type=click.Choice(jvm.PROFILES),
              help="Jar profiles to fetch (default: all).")
@handle_errors
def setup(profiles: tuple[str, ...]) -> None:
    """Fetch the pinned jars (Iceberg, Spark Kafka source, Kafka broker, REST catalog, schema registry) with Maven."""
    for p in profiles or jvm.PROFILES:
        with console.status(f"fetching the {p} jars with Maven…"):
            out = jvm.fetch(p)
        files = [f for f in out.iterdir() if f.is_file()]
        console.print(f"[green]✓[/] {p} in {out} ({len(files)} file{'' if len(files) == 1 else 's'})")
    if not profiles or "spark" in profiles:
        with console.status("building icetide's JVM classes…"):
            built = jvm.build()
        console.print(f"[green]✓[/] icetide's JVM classes in {built}")


@click.group()
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
@output_option
@handle_errors
def kafka_status(port: int, output: str) -> None:
    """Is the broker running?"""
    b = _broker(port)
    running = b.running()
    if output == "json":
        emit_json({"running": running, "bootstrap": b.bootstrap})
    else:
        console.print(f"running on {b.bootstrap}" if running else "not running")
    if not running:
        sys.exit(EXIT_NOT_RUNNING)


@click.command()
@config_option
@output_option
@handle_errors
def check(config_path: Path, output: str) -> None:
    """Preflight a pipeline config: the config and its columns, the catalog (nothing created), Kafka and
    its topics, and (Avro) the schema registry: what `run` checks before it starts Spark."""
    from icetide.app.preflight import preflight
    from icetide.errors import IcetideError

    if output == "json":
        try:
            cfg = load_config(config_path)
        except IcetideError as e:
            emit_json({"config": str(config_path), "valid": False,
                       "checks": [{"name": "config", "outcome": "error", "detail": str(e)}]})
            sys.exit(EXIT_CONFIG if e.terminal else EXIT_RUNTIME)
        pre = preflight(cfg, "check", collect=True)
        checks = [{"name": "config", "outcome": "ok", "detail": f"pipeline {cfg.name}"}]
        checks += [{"name": c.name, "outcome": c.outcome, "detail": c.detail} for c in pre.checks]
        emit_json({"config": str(config_path), "valid": not pre.errors, "pipeline": cfg.name,
                   "catalog": cfg.catalog.type, "topics": pre.topics, "subjects": pre.subjects,
                   "warnings": pre.warnings, "checks": checks})
        if pre.errors:
            sys.exit(EXIT_CONFIG if all(e.terminal for e in pre.errors) else EXIT_RUNTIME)
        return
    cfg = load_config(config_path)
    pre = preflight(cfg, "check")
    registry = f"; schema registry ok ({len(pre.subjects)} subjects)" if cfg.source.schema_registry else ""
    topics = f"{len(pre.topics)} topic{'' if len(pre.topics) == 1 else 's'}"
    console.print(f"[green]✓[/] {config_path}: valid; Kafka reachable ({topics}); catalog ok{registry}")
    for s in pre.subjects:
        console.print(f"  subject {s['subject']}: version {s['version']} (id {s['id']}), "
                      f"compatibility {s['compatibility']}", markup=False, highlight=False)
    for w in pre.warnings:
        console.print(f"[yellow]![/] {w}")


@click.command()
@config_option
@click.option("--for", "duration", type=float, default=None, help="Stop after this many seconds.")
@click.option("--until-idle", is_flag=True, help="Stop once no new records have come for --idle-after seconds.")
@click.option("--idle-after", type=click.FloatRange(min=0), default=None,
              help="With --until-idle: seconds without new records before stopping (default: two triggers, "
                   "at least 2 s).")
@handle_errors
def run(config_path: Path, duration: float | None, until_idle: bool, idle_after: float | None) -> None:
    """Run the pipeline: Kafka → Iceberg, exactly once, until SIGTERM/SIGINT."""
    from icetide.app.runner import run_until_stopped
    from icetide.errors import ConfigError, StoppedBeforeStart

    try:
        _, summary = run_until_stopped(load_config(config_path), duration, until_idle, idle_after)
    except StoppedBeforeStart as e:  # a supervisor's stop during the start's wait: a clean stop
        console.print(scrub(str(e)), markup=False, highlight=False)
        return
    console.print(f"stopped ({summary.stopped_by}): {summary.describe()}")
    mistakes = summary.counters.unlanded_mistakes()
    if mistakes:  # a config mistake kept a table's every record out: never exit 0 for that
        table, message = sorted(mistakes.items())[0]
        k = len(mistakes) - 1
        more = f" (and {k} more table{'' if k == 1 else 's'})" if k else ""
        raise ConfigError(f"{message}{more}; nothing landed in {table}: its records are in the dead-letter "
                          "table; fix the config, then `icetide dead-letters replay`")


@click.command()
@config_option
@engine_option
@output_option
@handle_errors
def offsets(config_path: Path, engine: str, output: str) -> None:
    """Which Kafka offsets each table of the pipeline holds (from the tables themselves)."""
    from icetide.ingest.source import low_watermarks
    from icetide.lake.pipelines import pipeline_watermarks

    cfg, reader = load_reader(config_path, engine)
    wms = pipeline_watermarks(reader, cfg)
    tps = sorted({tp for w in wms.values() for tp in w.offsets})
    try:  # what Kafka still holds: a next offset below it was deleted unread (retention)
        oldest: dict[tuple[str, int], int] | None = low_watermarks(cfg.source, tps, timeout=2) if tps else {}
    except Exception:
        oldest = None

    def unread_deleted(tp: tuple[str, int], off: int) -> int | None:
        return None if oldest is None or tp not in oldest else max(0, oldest[tp] - off)

    data = {t: {"run": w.run, "batch": w.batch, "committed_at_ms": w.committed_at_ms,
                "next_offsets": json.loads(w.encode()),
                "kafka_oldest": None if oldest is None else {f"{a}[{b}]": oldest.get((a, b)) for a, b in w.offsets},
                "deleted_unread": {f"{a}[{b}]": unread_deleted((a, b), o) for (a, b), o in w.offsets.items()}}
            for t, w in wms.items()}
    if output == "json":
        emit_json(data)
        return
    def cells(topic: str, part: int, off: int) -> list[str]:
        lost = unread_deleted((topic, part), off)
        gone = "Kafka unreachable" if oldest is None else f"[red]{lost}[/red]" if lost else "0"
        return [str(part), str(off), str(oldest.get((topic, part), "?")) if oldest else "?", gone]

    numbers = ("partition", "next offset", "kafka oldest", "deleted unread")
    longest = max([0, *(len(t) + len(tp[0]) for t, w in wms.items() for tp in w.offsets)])
    if longest + 6 + 58 + 8 <= console.width:  # one table, every name whole
        tbl = Table("table", "topic", *numbers, "batch", title=f"pipeline {cfg.name}")
        for t, w in wms.items():
            for (topic, part), off in sorted(w.offsets.items()):
                tbl.add_row(t, topic, *cells(topic, part, off), str(w.batch))
        console.print(tbl)
    else:  # narrow: a heading per table and topic (names whole), the numbers below it
        console.print(f"pipeline {cfg.name}", markup=False)
        for t, w in wms.items():
            for topic in sorted({tp[0] for tp in w.offsets}):
                console.print(f"\n{t} ← {topic} (batch {w.batch})", markup=False, highlight=False)
                tbl = Table(*numbers)
                for (tp, part), off in sorted(w.offsets.items()):
                    if tp == topic:
                        tbl.add_row(*cells(tp, part, off))
                console.print(tbl)
    if any(unread_deleted(tp, o) for w in wms.values() for tp, o in w.offsets.items()):
        console.print("[yellow]Kafka deleted records the pipeline has not read (retention). On its next batch the "
                      "run goes on from the oldest records still there and reports the gap (source.on_data_loss: "
                      "continue), or stops naming them (stop).[/yellow]")


@click.command()
@click.option("--seconds", default=60.0, show_default=True, help="How long to ingest.")
@click.option("--events", default=20_000, show_default=True, help="Sample events to produce.")
@click.option("--port", default=9092, show_default=True, help="Local broker port.")
@click.option("--fresh/--keep", default=True, show_default=True, help="Start from an empty demo folder.")
@click.option("--format", "fmt", type=click.Choice(["json", "avro", "protobuf", "json_schema"]), default="json",
              show_default=True, help="avro, protobuf, json_schema: values through a local schema registry (a second "
              "schema version mid-stream).")
@click.option("--registry-port", default=8095, show_default=True,
              help="Local schema registry port (--format avro|protobuf|json_schema).")
@handle_errors
def demo(seconds: float, events: int, port: int, fresh: bool, fmt: str, registry_port: int) -> None:
    """Start a local Kafka, produce sample events (schema drift, bad records), ingest, report."""
    from icetide.demo.run import run_demo

    run_demo(seconds=seconds, events=events, port=port, fresh=fresh, fmt=fmt, registry_port=registry_port)
