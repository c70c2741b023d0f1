"""Per-table maintenance policy: defaults, overridden per table glob in config."""

from __future__ import annotations

import os
import re
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class StepName(StrEnum):
    """A maintenance step; in the order a plan runs them. The value is what config, plans and the
    action log say (for all but ``rewrite_hot_files`` also the name of the Iceberg procedure)."""

    EXPIRE_SNAPSHOTS = "expire_snapshots"
    REMOVE_ORPHAN_FILES = "remove_orphan_files"
    REWRITE_HOT_FILES = "rewrite_hot_files"
    REWRITE_DATA_FILES = "rewrite_data_files"
    REWRITE_POSITION_DELETE_FILES = "rewrite_position_delete_files"
    REWRITE_MANIFESTS = "rewrite_manifests"
    #: Retention of icetide's own append-only tables (a row-level DELETE of whole old day
    #: partitions, see icetide.maintenance.retention); never planned for user tables.
    EXPIRE_ROWS = "expire_rows"

    @property
    def procedure(self) -> str:
        return "rewrite_data_files" if self is StepName.REWRITE_HOT_FILES else self.value

    @property
    def rewrites_data(self) -> bool:
        return self in (StepName.REWRITE_HOT_FILES, StepName.REWRITE_DATA_FILES,
                        StepName.REWRITE_POSITION_DELETE_FILES)


STEPS: tuple[StepName, ...] = tuple(StepName)
DEFAULT_STEPS: tuple[StepName, ...] = tuple(s for s in StepName
                                            if s not in (StepName.REMOVE_ORPHAN_FILES, StepName.EXPIRE_ROWS))
ORPHAN_FLOOR_SECONDS = 3600  # must exceed the longest commit interval of any writer of the table
#: Lowers the floor, for test runs where icetide is a table's only writer (the chaos run proves its
#: in-flight markers with a floor of a minute); never needed in production.
ORPHAN_FLOOR_ENV = "ICETIDE_ORPHAN_FLOOR_SECONDS"


def orphan_floor_seconds() -> float:
    raw = os.environ.get(ORPHAN_FLOOR_ENV)
    try:
        return min(float(ORPHAN_FLOOR_SECONDS), max(0.0, float(raw))) if raw else float(ORPHAN_FLOOR_SECONDS)
    except ValueError:
        raise ValueError(f"{ORPHAN_FLOOR_ENV}={raw!r} is not a number of seconds") from None


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
    hot_delete_ratio: float = Field(
        default=0.30, ge=0,
        description="Hot partitions (a CDC table being written is hot all the time): rewrite a data file to "
        "apply its deletes once this share of its rows is deleted. Above delete_ratio because the stream keeps "
        "deleting rows from the same files: at 0.1, a CDC table whose updates spread over every key rewrote its "
        "largest file about once a minute (benchmarks/steady)",
    )
    strategy: Literal["binpack", "sort", "zorder"] = Field(default="binpack", description="Compaction strategy")
    sort_columns: list[str] = Field(default_factory=list, description="Columns for sort / zorder")
    max_file_group_bytes: int = Field(
        default=1024 * 1024 * 1024, gt=0, description="Bound of one rewrite group (partial progress commits)"
    )
    snapshot_max_age_seconds: float = Field(default=24 * 3600, gt=0, description="Expire snapshots older than this")
    snapshot_retain_last: int = Field(default=20, ge=1, description="Always keep this many snapshots")
    snapshots_trigger: int = Field(default=100, ge=1, description="Expire once more snapshots than this exist")
    snapshot_max_count: int | None = Field(
        default=None, ge=1,
        description="When more than this many snapshots exist, expire down to the newest snapshot_retain_last, "
        "whatever their age (at least snapshot_retain_last; the gap between the two is how many commits pass "
        "between expiries): bounds the metadata every reader parses on a table committed every few seconds, "
        "at the cost of time travel; null: by age only")
    snapshot_expiry: Literal["driver", "procedure"] = Field(
        default="driver",
        description="driver: Iceberg's ExpireSnapshots in the Spark driver, no Spark job (0.1 s against 1.2–3.2 s "
        "on a 66-snapshot table); procedure: the expire_snapshots procedure, which spreads the reachability "
        "analysis and deletes over executors (for tables whose expiries drop many thousands of files)")
    orphan_min_age_seconds: float = Field(
        default=3 * 24 * 3600,
        description="Only files older than this can be orphans (floor 1 h; must exceed the longest "
        "commit interval of every writer; icetide's own in-flight writes are protected regardless)",
    )
    manifests_trigger: int = Field(default=50, ge=2, description="Rewrite manifests above this many")
    hot_partition_quiet_seconds: float = Field(
        default=900, ge=0,
        description="A partition written within this window is hot: only tiered minor compaction "
        "(rewrite_hot_files) touches it; full compaction, sorting and delete rewrites wait until it is cold",
    )
    closed_partition_settle_seconds: float | None = Field(
        default=60, ge=0,
        description="A time partition (hours/days/months/years) older than the newest one written is closed "
        "once it has had no write for this long: it gets the full compaction at once instead of after the "
        "quiet time (late records make it hot again); null: only the quiet time counts",
    )
    closed_partition_settle_commits: int | None = Field(
        default=2, ge=1,
        description="... or once this many writes to the table (commits that add data or deletes; compactions do "
        "not count) have landed since its last write (the stream's batches went elsewhere: with a 10 s trigger, "
        "an hour closes ~20 s after its last write instead of 60 s); "
        "null: only closed_partition_settle_seconds counts",
    )
    tier_fanout: int = Field(
        default=8, ge=2, le=64,
        description="Minor compaction of hot partitions: files are grouped in size tiers a factor of this "
        "apart (a power of two); a tier is merged once it holds this many files. Larger: fewer rewrites "
        "of each byte, more files between merges (8: about 1.5 rewrites per byte in a day of small commits)",
    )
    layout_from_telemetry: bool = Field(
        default=True,
        description="Sort (one column) or z-order (several) cold partitions by the columns queries filter on, "
        "from maintenance.telemetry_table, when the reads saved beat the rewrite (ignored when sort_columns is set)",
    )
    layout_min_scans: int = Field(default=10, ge=1, description="A column counts once this many scans filtered on it")
    layout_max_columns: int = Field(default=2, ge=1, le=4, description="At most this many layout columns")
    layout_depth_trigger: float = Field(
        default=1.5, ge=1.0,
        description="Re-sort a cold partition whose clustering depth on the first column exceeds this "
        "(average number of files whose value ranges overlap a file's)",
    )
    layout_gain_ratio: float = Field(
        default=1.0, gt=0,
        description="Sort only when bytes read saved per telemetry window ≥ this × bytes rewritten",
    )
    priority_boost: float = Field(default=0, description="Added to the table's priority (e.g. heavily queried)")

    @field_validator("tier_fanout")
    @classmethod
    def _fanout(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"tier_fanout must be a power of two (2, 4, 8, 16, 32 or 64), not {v}")
        return v

    @model_validator(mode="after")
    def _cap(self) -> MaintenancePolicy:
        if self.snapshot_max_count is not None and self.snapshot_max_count < self.snapshot_retain_last:
            raise ValueError(f"snapshot_max_count ({self.snapshot_max_count}) must be at least snapshot_retain_last "
                             f"({self.snapshot_retain_last}): it is the high-water mark, retain_last the low")
        return self

    @field_validator("orphan_min_age_seconds")
    @classmethod
    def _orphan_floor(cls, v: float) -> float:
        floor = orphan_floor_seconds()
        if v < floor:
            raise ValueError(f"orphan_min_age_seconds must be at least {floor:.0f} (longer than any writer's "
                             f"commit interval, or its files in flight could be deleted), not {v:g}")
        return v

    @field_validator("sort_columns")
    @classmethod
    def _cols(cls, v: list[str]) -> list[str]:
        for c in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", c):
                raise ValueError(f"sort column {c!r} is not allowed (use A-Z a-z 0-9 _)")
        return v

