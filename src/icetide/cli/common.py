"""What every command shares: the ``--config`` option and the one place that loads the config and
builds the SparkSession (commands that need no Spark call :func:`icetide.config.load_config` only)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from icetide.config import load_config
from icetide.config.models import PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

config_option = click.option(
    "--config", "-c", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
    help="Pipeline YAML file.",
)


def load_with_session(config_path: Path) -> tuple[PipelineConfig, SparkSession]:
    """The validated config (bad config fails here, naming the key), then its SparkSession."""
    from icetide.spark import build_session

    cfg = load_config(config_path)
    return cfg, build_session(cfg)


namespaces_option = click.option("--namespace", "-n", "namespaces", multiple=True,
                                 help="Namespaces (default: health.namespaces, else the target's namespace).")
tables_option = click.option("--table", "-t", "only_tables", multiple=True,
                             help="Only these tables (namespace.table); with --namespace, those too.")


def tables_in(spark: SparkSession, cfg: PipelineConfig, namespaces: tuple[str, ...],
              tables: tuple[str, ...] = ()) -> list[str] | None:
    """``namespace.table`` of the named tables and of every table in ``namespaces``; None (the
    watched namespaces) when neither is given. Names are validated before any lookup."""
    from icetide.identifiers import validate_table
    from icetide.lake.tables import list_tables

    named = [".".join(validate_table(t)) for t in tables]
    if not namespaces and not named:
        return None
    return sorted({*named, *(t for ns in namespaces for t in list_tables(spark, cfg.catalog.name, ns))})
