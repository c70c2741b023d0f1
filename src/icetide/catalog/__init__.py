"""Iceberg catalogs: one module per backend, chosen by ``catalog.type``."""

from __future__ import annotations

from collections.abc import Callable
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


def check_reachable(cfg: PipelineConfig) -> None:
    """Fail fast, naming the key, if the catalog cannot be used."""
    if cfg.catalog.type == "jdbc":
        jdbc.check(cfg.catalog, cfg.resolve)
    else:
        rest.check(cfg.catalog)
