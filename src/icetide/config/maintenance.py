"""Section ``maintenance``: the control plane's schedule, budget, telemetry and per-table policy."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from icetide.config.base import Interval, Strict, TableId, check_overrides, merged_for
from icetide.config.policy import MaintenancePolicy


class MaintenanceSettings(Strict):
    """The maintenance control plane: policy, per-table overrides, budget, action log."""

    policy: MaintenancePolicy = Field(default_factory=MaintenancePolicy, description="Defaults for every table")
    overrides: dict[str, dict[str, object]] = Field(
        default_factory=dict, description="Per-table policy: glob on namespace.table → policy keys"
    )
    log_table: TableId = Field(default="icetide.maintenance", description="namespace.table of the action log")
    rewrites_per_cycle: int = Field(default=1, ge=1, description="Data/delete rewrites per cycle")
    rewrite_bytes_per_cycle: int = Field(default=50 * 1024**3, gt=0, description="Bytes rewritten per cycle")
    telemetry_table: TableId | None = Field(
        default=None,
        description="namespace.table of query telemetry (table_name STRING, queried_at TIMESTAMP, ...) that "
        "engines append to; tables queried more are maintained first",
    )
    telemetry_window: Interval = Field(default="24 hours", description="Queries counted over this window")
    own_table_retention: Interval | None = Field(
        default="30 days",
        description="Each cycle deletes rows older than this (whole days) from icetide's own logs: the batch "
        "log, health history, this action log and query telemetry (null: keep forever). Dead letters have "
        "their own setting (dead_letter.retention)",
    )
    in_run: bool = Field(default=False, description="Run maintenance inside `icetide run`, beside ingestion")
    interval: Interval = Field(default="10 minutes", description="At most this long between cycles (polling)")
    min_interval: Interval = Field(default="60 seconds", description="At least this long between cycles")
    plan_with: Literal["auto", "pyiceberg", "spark"] = Field(
        default="auto",
        description="How each cycle reads table metadata to plan: PyIceberg (no Spark job; about a quarter of "
        "the CPU), Spark, or auto: PyIceberg when it can open the catalog, Spark otherwise and for the rest of a "
        "cycle in which PyIceberg failed. Rewrites always run on Spark",
    )

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, v: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
        check_overrides(MaintenancePolicy, v)
        return v

    def policy_for(self, table: str) -> MaintenancePolicy:
        return merged_for(self.policy, self.overrides, table)
