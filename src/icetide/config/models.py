"""The whole pipeline configuration: one model per section (each in its own module), unknown keys
rejected. Every field documents itself; ``docs/config.md`` is the reference a user reads."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from icetide.config.base import Strict
from icetide.config.catalog import CatalogConfig, JdbcCatalog
from icetide.config.health import HealthSettings
from icetide.config.maintenance import MaintenanceSettings
from icetide.config.source import KafkaSource
from icetide.config.stream import DeadLetter, SparkSettings, StreamSettings
from icetide.config.target import TargetTable
from icetide.errors import IdentifierError
from icetide.identifiers import validate_pipeline


class PipelineConfig(Strict):
    """A complete icetide pipeline."""

    name: str = Field(description="Stable pipeline identity, recorded in every commit")
    source: KafkaSource
    catalog: CatalogConfig = Field(default_factory=JdbcCatalog)
    target: TargetTable
    dead_letter: DeadLetter = Field(default_factory=DeadLetter)
    stream: StreamSettings = Field(default_factory=StreamSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    #: Folder the config was read from; relative paths resolve against it.
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        try:
            return validate_pipeline(v)
        except IdentifierError as e:
            raise ValueError(str(e)) from None

    @model_validator(mode="after")
    def _formats(self) -> PipelineConfig:
        avro = "avro" in self.source.formats()
        route = self.target.route
        if route is not None and route.by == "record_name" and not avro:
            raise ValueError("target.route.by: record_name needs Avro values (source.format: avro)")
        cdc = self.target.cdc is not None or any("cdc" in v for v in self.target.tables.values())
        for fmt, what in (("json_schema", "JSON Schema"), ("protobuf", "Protobuf")):
            if cdc and fmt in self.source.formats():
                raise ValueError(f"target.cdc: changes in {what} values are not read yet; read the change topics "
                                 "as json or avro (source.format), or land them as rows without target.cdc")
        mixed = len(self.source.formats()) > 1
        if mixed and cdc:
            raise ValueError("target.cdc: a CDC pipeline reads one format; split JSON and Avro change topics into "
                             "two pipelines (source.topic_formats)")
        return self

    def resolve(self, path: str) -> str:
        """Resolve a local path against the config's folder; URIs pass through."""
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", path):
            return path
        p = Path(path)
        return str(p if p.is_absolute() else (self.base_dir / p).resolve())

    def own_tables(self) -> set[str]:
        """``namespace.table`` of every table icetide keeps for its own bookkeeping (dead letters and
        their replay log, health history, maintenance log, query telemetry, batch log): never a
        routing destination. CDC tombstone tables (``<table>_tombstones``) are icetide's too."""
        s, m = self.stream, self.maintenance
        return {t for t in (self.dead_letter.table, self.dead_letter.replay_log(), self.health.history_table,
                            m.log_table, m.telemetry_table, s.batch_log_table) if t}

    def checkpoint_dir(self) -> str:
        return self.resolve(self.stream.checkpoint_location.replace("{pipeline}", self.name))
