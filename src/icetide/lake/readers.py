"""Choosing a :class:`~icetide.lake.meta.MetaReader` backend: Spark when a session is at hand,
PyIceberg otherwise (one module per backend: :mod:`~icetide.lake.meta_spark`,
:mod:`~icetide.lake.meta_pyiceberg`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icetide.identifiers import validate_name
from icetide.lake.meta import MetaReader

if TYPE_CHECKING:
    from icetide.config.models import PipelineConfig


def as_reader(cfg: PipelineConfig, source: Any) -> MetaReader:
    """``source`` itself when it is a reader; a SparkSession becomes the Spark backend over it."""
    if hasattr(source, "sparkContext"):
        return open_reader(cfg, source)
    return source  # type: ignore[no-any-return]


def open_reader(cfg: PipelineConfig, spark: Any = None) -> MetaReader:
    """The Spark backend over ``spark`` when given, else PyIceberg over the configured catalog."""
    validate_name(cfg.catalog.name)
    if spark is not None:
        from icetide.lake.meta_spark import SparkMeta

        return SparkMeta(spark, cfg.catalog.name)
    from icetide.lake.meta_pyiceberg import PyIcebergMeta

    return PyIcebergMeta.for_config(cfg)
