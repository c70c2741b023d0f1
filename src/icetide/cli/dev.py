"""The local production-like stack (``icetide dev up|down|status``) and ``icetide submit``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import yaml
from rich.table import Table

from icetide.app.output import EXIT_NOT_RUNNING, console, emit_json, handle_errors, output_option
from icetide.cli.common import config_option


def _stack(kafka_port: int, store_port: int, rest_port: int, spark_port: int,  # type: ignore[no-untyped-def]
           registry_port: int = 8085):
    from icetide.services.stack import DevStack

    return DevStack(kafka_port=kafka_port, store_port=store_port, rest_port=rest_port, spark_port=spark_port,
                    registry_port=registry_port)


def _ports(f: Callable[..., None]) -> Callable[..., None]:
    for opt in reversed([
        click.option("--kafka-port", default=9092, show_default=True),
        click.option("--store-port", default=8333, show_default=True, help="S3 API (Iceberg REST of SeaweedFS: +1)."),
        click.option("--rest-port", default=8181, show_default=True, help="Iceberg's REST catalog server."),
        click.option("--spark-port", default=7077, show_default=True, help="Spark master (web UI: +1)."),
        click.option("--registry-port", default=8085, show_default=True,
                     help="Schema registry (Confluent API at /apis/ccompat/v7; management: +1000)."),
    ]):
        f = opt(f)
    return f


@click.group()
def dev() -> None:
    """A local production-like stack: Kafka, S3 object store, REST catalogs, Spark standalone, schema registry."""


@dev.command()
@_ports
@handle_errors
def up(kafka_port: int, store_port: int, rest_port: int, spark_port: int, registry_port: int) -> None:
    """Start every service (idempotent) and print the config that uses them."""
    from icetide import jvm

    for profile in ("spark", "kafka", "rest", "registry"):
        with console.status(f"fetching {profile} jars with Maven (first run only)…"):
            jvm.fetch(profile)
    stack = _stack(kafka_port, store_port, rest_port, spark_port, registry_port)
    for name, service in stack.services():
        with console.status(f"starting {name}…"):
            service.start()
        console.print(f"[green]✓[/] {name}")
    env = stack.write_env()
    info = stack.describe()
    example = {"source": info["source"], "catalog": info["catalogs"]["iceberg-rest"], "spark": info["spark"]}
    console.print(f"\nCredentials of the object store: [bold]source {env}[/] (mode 0600; not printed)\n"
                  "A pipeline config on this stack (the other catalog, SeaweedFS's own: `icetide dev status -o json`):")
    console.print(yaml.safe_dump(example, sort_keys=False), markup=False, highlight=False)


@dev.command()
@_ports
@handle_errors
def down(kafka_port: int, store_port: int, rest_port: int, spark_port: int, registry_port: int) -> None:
    """Stop every service (data is kept; `dev up` resumes it)."""
    stack = _stack(kafka_port, store_port, rest_port, spark_port, registry_port)
    for name, service in reversed(stack.services()):
        console.print(f"{'[green]stopped[/]' if service.stop() else 'not running'}: {name}")


@dev.command()
@_ports
@output_option
@handle_errors
def status(kafka_port: int, store_port: int, rest_port: int, spark_port: int, registry_port: int,
           output: str) -> None:
    """Which services run, where, and the catalog sections that reach them."""
    stack = _stack(kafka_port, store_port, rest_port, spark_port, registry_port)
    running = {name: service.running() for name, service in stack.services()}
    if output == "json":
        emit_json({"running": running, **stack.describe()})
        if not all(running.values()):
            sys.exit(EXIT_NOT_RUNNING)
        return
    tbl = Table("service", "running", "address", title="icetide dev stack")
    addresses = [stack.kafka.bootstrap, stack.store.endpoint, stack.rest.uri, stack.spark.master_url,
                 stack.registry.url]
    for (name, up_), addr in zip(running.items(), addresses, strict=True):
        tbl.add_row(name, "[green]yes[/]" if up_ else "[red]no[/]", addr)
    console.print(tbl)
    if not all(running.values()):
        sys.exit(EXIT_NOT_RUNNING)


@click.command(context_settings={"ignore_unknown_options": True})
@config_option
@click.option("--dry-run", is_flag=True, help="Print the spark-submit command instead of running it.")
@click.argument("run_args", nargs=-1, type=click.UNPROCESSED)
@handle_errors
def submit(config_path: Path, dry_run: bool, run_args: tuple[str, ...]) -> None:
    """`icetide run` through spark-submit on the cluster of spark.master (client mode).

    RUN_ARGS go to `icetide run` (e.g. --until-idle --for 600).
    """
    from icetide.config import load_config
    from icetide.spark.submit import submit_command

    cfg = load_config(config_path)
    cmd = submit_command(cfg, config_path, list(run_args))
    if dry_run:
        click.echo(shlex.join(cmd))
        return
    from icetide.app.preflight import preflight

    preflight(cfg, "check")  # what `run` would refuse, refused before spark-submit starts a JVM
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    sys.exit(subprocess.call(cmd, env=env))

