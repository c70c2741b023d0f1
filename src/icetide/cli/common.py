"""What every command shares: the ``--config`` option and the one place that loads the config and
builds the SparkSession (commands that need no Spark call :func:`icetide.config.load_config` only)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from icetide.config import load_config
from icetide.config.models import PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.lake.meta import MetaReader

log = logging.getLogger(__name__)

#: Where a command finds its config without ``-c``: $ICETIDE_CONFIG, then this file in the current folder.
DEFAULT_CONFIG = "icetide.yaml"


def _find_config(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path:
    if value is not None:
        return value
    if Path(DEFAULT_CONFIG).is_file():
        return Path(DEFAULT_CONFIG)
    raise click.UsageError(f"no pipeline config: pass -c FILE, set ICETIDE_CONFIG, or put {DEFAULT_CONFIG} in "
                           "the current folder")


config_option = click.option(
    "--config", "-c", "config_path", envvar="ICETIDE_CONFIG", callback=_find_config,
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"Pipeline YAML file (default: $ICETIDE_CONFIG, else ./{DEFAULT_CONFIG}).",
)


def load_with_session(config_path: Path) -> tuple[PipelineConfig, SparkSession]:
    """The validated config (bad config fails here, naming the key), then its SparkSession."""
    from icetide.spark import build_session

    cfg = load_config(config_path)
    return cfg, build_session(cfg, "read")


engine_option = click.option(
    "--engine", type=click.Choice(["auto", "pyiceberg", "spark"]), default="auto", show_default=True,
    help="How to read table metadata: PyIceberg (no JVM, fast), Spark, or auto (PyIceberg when it can "
         "open the catalog).")


def load_reader(config_path: Path, engine: str = "auto") -> tuple[PipelineConfig, MetaReader]:
    """The validated config and a read-only view of its catalog; Spark starts only when asked for or
    when PyIceberg cannot open the catalog (``auto``)."""
    from icetide.catalog import check_reachable
    from icetide.errors import UnsupportedByReader
    from icetide.lake.readers import open_reader

    cfg = load_config(config_path)
    check_reachable(cfg, "read")  # one line naming the key, never a traceback, and nothing created
    if engine != "spark":
        try:
            return cfg, open_reader(cfg)
        except UnsupportedByReader as e:
            if engine == "pyiceberg":
                raise
            log.info("reading through Spark: %s", e)
    from icetide.spark import build_session

    return cfg, open_reader(cfg, build_session(cfg, "read"))


namespaces_option = click.option("--namespace", "-n", "namespaces", multiple=True,
                                 help="Namespaces (default: health.namespaces, else the target's namespace).")
tables_option = click.option("--table", "-t", "only_tables", multiple=True,
                             help="Only these tables (namespace.table); with --namespace, those too.")


def table_arg(cfg: PipelineConfig, name: str) -> str:
    """``namespace.table`` from what a user typed: as ``-o json`` prints it, or qualified by the
    catalog (``icetide.raw.orders``); validated before any lookup."""
    from icetide.identifiers import validate_table

    parts = name.split(".")
    if len(parts) == 3 and parts[0] == cfg.catalog.name:
        name = ".".join(parts[1:])
    return ".".join(validate_table(name))


def tables_in(source: MetaReader | SparkSession, cfg: PipelineConfig, namespaces: tuple[str, ...],
              tables: tuple[str, ...] = ()) -> list[str] | None:
    """``namespace.table`` of the named tables and of every table in ``namespaces``; None (the
    watched namespaces) when neither is given. Names are validated before any lookup; a table or
    namespace that does not exist is a :class:`NotFoundError` (one line, exit 2)."""
    from icetide.config.ddl import suggest
    from icetide.errors import NotFoundError
    from icetide.identifiers import validate_name
    from icetide.lake.readers import as_reader

    named = [table_arg(cfg, t) for t in tables]
    if not namespaces and not named:
        return None
    reader = as_reader(cfg, source)
    known_ns: list[str] | None = None
    for ns in namespaces:
        validate_name(ns, "namespace")
        known_ns = known_ns if known_ns is not None else reader.namespaces()
        if ns not in known_ns:
            raise NotFoundError(f"namespace {ns!r} does not exist in catalog {cfg.catalog.name}"
                                f"{suggest(ns, known_ns)} (namespaces: {', '.join(known_ns) or 'none'})")
    for t in named:
        if not reader.exists(t):
            ns, name = t.split(".")
            siblings = reader.list_tables(ns)
            close = suggest(name, [s.split(".")[1] for s in siblings]).replace("'", f"'{ns}.", 1)
            n = len(siblings)
            raise NotFoundError(f"table {t} does not exist in catalog {cfg.catalog.name}{close}"
                                + (f" ({n} table{'' if n == 1 else 's'} in {ns})" if n else f" (no tables in {ns})"))
    return sorted({*named, *(t for ns in namespaces for t in reader.list_tables(ns))})
