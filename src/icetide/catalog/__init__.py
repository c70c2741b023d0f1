"""Iceberg catalogs: one module per backend, chosen by ``catalog.type``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from icetide.catalog import jdbc, rest
from icetide.config.models import PipelineConfig

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

_BACKENDS: dict[str, Callable[..., dict[str, str]]] = {
    "jdbc": jdbc.catalog_properties,
    "rest": rest.catalog_properties,
}


def spark_catalog_conf(cfg: PipelineConfig) -> dict[str, str]:
    """``spark.sql.catalog.<name>*`` settings for the configured catalog."""
    props = _BACKENDS[cfg.catalog.type](cfg.catalog, cfg.resolve)
    prefix = f"spark.sql.catalog.{cfg.catalog.name}"
    # Every SparkSession (and foreachBatch runs in its own) keeps its own catalog cache, which does
    # not see commits made through another session: a stale table means a stale offset ledger
    # after an in-process restart, or stale CDC tombstones. Table loads read fresh metadata instead
    # (catalog.properties.cache-enabled can still turn the cache on).
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.cache-enabled": "false"}
    conf.update({f"{prefix}.{k}": v for k, v in props.items()})
    return conf


_READERS: dict[str, Callable[..., dict[str, str]]] = {
    "jdbc": jdbc.pyiceberg_properties,
    "rest": rest.pyiceberg_properties,
}


def pyiceberg_catalog(cfg: PipelineConfig) -> Catalog:
    """The configured catalog opened with PyIceberg (no JVM); :class:`UnsupportedByReader` when it can't be."""
    from pyiceberg.catalog import load_catalog

    return load_catalog(cfg.catalog.name, **_READERS[cfg.catalog.type](cfg.catalog, cfg.resolve))


def check_reachable(cfg: PipelineConfig, purpose: jdbc.Purpose = "write") -> None:
    """Fail fast, naming the key, if the catalog cannot be used for ``purpose`` (only ``write``
    creates anything: icetide's default folder and a local warehouse)."""
    if cfg.catalog.type == "jdbc":
        # spark.jars none: the cluster provides the jars, so the driver cannot be looked for here
        jars = None if cfg.spark.jars == "none" else (lambda: _classpath(cfg))
        jdbc.check(cfg.catalog, cfg.resolve, purpose, jars, cfg.spark.conf.get("spark.jars.packages", ""))
    else:
        rest.check(cfg.catalog)


def _classpath(cfg: PipelineConfig) -> list[Path]:
    """The jars Spark's driver will have: icetide's fetched ones and the user's own."""
    from icetide import jvm

    conf = cfg.spark.conf
    paths = [p.strip() for p in conf.get("spark.jars", "").split(",") if p.strip()]
    paths += [p for p in conf.get("spark.driver.extraClassPath", "").split(os.pathsep) if p]
    mine = [Path(p.removeprefix("file:")) for p in paths]
    return [*mine, *(jvm.jars("spark") if cfg.spark.jars == "local" else [])]
