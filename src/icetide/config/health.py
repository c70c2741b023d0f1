"""Section ``health``: what is watched, thresholds, history, alerts, metrics."""

from __future__ import annotations

from pydantic import Field, field_validator

from icetide.config.base import Interval, Strict, TableId, check_overrides, merged_for
from icetide.config.thresholds import HealthThresholds
from icetide.errors import IdentifierError
from icetide.identifiers import validate_name


class HealthSettings(Strict):
    """Table health: which tables to watch, thresholds, history, alerts, metrics."""

    namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces `icetide status` and `icetide metrics` watch (default: the target's)",
    )
    history_table: TableId = Field(default="icetide.health", description="namespace.table of health history")
    thresholds: HealthThresholds = Field(default_factory=HealthThresholds, description="Defaults for every table")
    overrides: dict[str, dict[str, float | int | None]] = Field(
        default_factory=dict,
        description="Per-table thresholds: glob on namespace.table (e.g. 'raw.*') → threshold keys",
    )
    webhook_url: str | None = Field(default=None, description="POST alerts as JSON to this URL")
    metrics_port: int = Field(default=9464, gt=0, lt=65536, description="Prometheus endpoint port")
    metrics_host: str = Field(default="127.0.0.1", description="Prometheus endpoint bind address")
    interval: Interval = Field(default="60 seconds", description="Collection interval of `icetide metrics`")
    max_partitions_exported: int = Field(
        default=20, ge=0, description="Per table, the worst N partitions get partition-level metrics"
    )

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for ns in v:
            try:
                validate_name(ns, "namespace")
            except IdentifierError as e:
                raise ValueError(str(e)) from None
        return v

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, v: dict[str, dict[str, float | int | None]]) -> dict[str, dict[str, float | int | None]]:
        check_overrides(HealthThresholds, v)
        return v

    def thresholds_for(self, table: str) -> HealthThresholds:
        return merged_for(self.thresholds, self.overrides, table)
