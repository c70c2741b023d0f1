"""Health thresholds and score weights (documented in docs/health.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class HealthThresholds(BaseModel):
    """When a figure turns a table or partition to warning or critical."""

    model_config = ConfigDict(extra="forbid")

    partition_files_warning: int = Field(default=500, gt=0, description="Data files in one partition")
    partition_files_critical: int = Field(default=1000, gt=0, description="Planning dominates beyond this")
    small_file_ratio: float = Field(
        default=0.75, gt=0, le=1,
        description="A data file is small below this fraction of write.target-file-size-bytes "
        "(the same bound rewrite_data_files uses for min-file-size-bytes)",
    )
    delete_ratio_warning: float = Field(default=0.10, ge=0, description="Deleted rows / data rows")
    delete_ratio_critical: float = Field(default=0.30, ge=0, description="Iceberg's delete-ratio-threshold")
    snapshots_warning: int = Field(default=500, gt=0, description="Snapshots kept in metadata")
    snapshots_critical: int = Field(default=2000, gt=0)
    manifests_warning: int = Field(default=500, gt=0, description="Manifests in the current snapshot")
    manifests_critical: int = Field(default=2000, gt=0)
    freshness_sla_seconds: float | None = Field(
        default=None, gt=0, description="Alert when the newest commit is older than this"
    )
    hot_partition_seconds: float = Field(
        default=900, gt=0, description="A partition written within this window is hot"
    )
