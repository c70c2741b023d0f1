"""Per-table maintenance policy: defaults, overridden per table glob in config."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

StepName = Literal["expire_snapshots", "remove_orphan_files", "rewrite_data_files",
                   "rewrite_position_delete_files", "rewrite_manifests"]
STEPS: tuple[StepName, ...] = ("expire_snapshots", "remove_orphan_files", "rewrite_data_files",
                               "rewrite_position_delete_files", "rewrite_manifests")
DEFAULT_STEPS: tuple[StepName, ...] = ("expire_snapshots", "rewrite_data_files", "rewrite_position_delete_files",
                                       "rewrite_manifests")
ORPHAN_FLOOR_SECONDS = 3600  # must exceed the longest commit interval of any writer of the table


class MaintenancePolicy(BaseModel):
    """What to do to a table, and when."""

    model_config = ConfigDict(extra="forbid")

    steps: list[StepName] = Field(
        default_factory=lambda: list(DEFAULT_STEPS),
        description="Enabled steps (orphan cleanup is opt-in, as in Amoro)",
    )
    target_file_size_bytes: int | None = Field(
        default=None, gt=0, description="Compaction target; default: the table's write.target-file-size-bytes"
    )
    min_input_files: int = Field(default=5, ge=1, description="Compact a partition with at least this many small files")
    delete_ratio: float = Field(default=0.10, ge=0, description="Apply deletes in a partition above this ratio")
    delete_files: int = Field(default=10, ge=1, description="... or with at least this many delete files")
    strategy: Literal["binpack", "sort", "zorder"] = Field(default="binpack", description="Compaction strategy")
    sort_columns: list[str] = Field(default_factory=list, description="Columns for sort / zorder")
    max_file_group_bytes: int = Field(
        default=1024 * 1024 * 1024, gt=0, description="Bound of one rewrite group (partial progress commits)"
    )
    snapshot_max_age_seconds: float = Field(default=24 * 3600, gt=0, description="Expire snapshots older than this")
    snapshot_retain_last: int = Field(default=20, ge=1, description="Always keep this many snapshots")
    snapshots_trigger: int = Field(default=100, ge=1, description="Expire once more snapshots than this exist")
    orphan_min_age_seconds: float = Field(
        default=3 * 24 * 3600, ge=ORPHAN_FLOOR_SECONDS,
        description="Only files older than this can be orphans (floor 1 h; must exceed the longest "
        "commit interval of every writer; icetide's own in-flight writes are protected regardless)",
    )
    manifests_trigger: int = Field(default=50, ge=2, description="Rewrite manifests above this many")
    hot_partition_quiet_seconds: float = Field(
        default=900, ge=0, description="Never rewrite a partition written within this window"
    )
    priority_boost: float = Field(default=0, description="Added to the table's priority (e.g. heavily queried)")

    @field_validator("sort_columns")
    @classmethod
    def _cols(cls, v: list[str]) -> list[str]:
        for c in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", c):
                raise ValueError(f"sort column {c!r} is not allowed (use A-Z a-z 0-9 _)")
        return v

