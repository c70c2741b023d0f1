"""Shared config building blocks: strict models, identifier and interval types, per-table
overrides, and the table properties icetide sets on tables it creates."""

from __future__ import annotations

import fnmatch
import re
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from icetide.errors import IdentifierError
from icetide.identifiers import validate_table

INTERVAL_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?|d|days?)\s*$")
TRANSFORM_RE = re.compile(
    r"^(?:(?P<fn>years|months|days|hours)\((?P<col1>[A-Za-z_][A-Za-z0-9_]*)\)"
    r"|(?P<pfn>bucket|truncate)\((?P<n>\d+),\s*(?P<col2>[A-Za-z_][A-Za-z0-9_]*)\)"
    r"|(?P<col3>[A-Za-z_][A-Za-z0-9_]*))$"
)
PROPERTY_KEY_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
COLUMN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

#: Table properties icetide sets on tables it creates, tuned for streaming appends. Any of them can
#: be overridden per table under ``target.properties``.
STREAMING_TABLE_DEFAULTS: dict[str, str] = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "write.target-file-size-bytes": str(128 * 1024 * 1024),
    # Each micro-batch is already grouped by Spark's Kafka partitions; a hash shuffle per batch
    # costs more than it saves at streaming batch sizes. Compaction fixes file layout later.
    "write.distribution-mode": "none",
    "write.spark.fanout.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
    "commit.retry.num-retries": "10",
    # icetide's appends, MERGEs and rewrites commit through Iceberg's merging producers: with these two,
    # each commit folds its new manifest into the newest one below 256 KiB (about 1,000 data files),
    # so a table being written holds one manifest per ~1,000 live files, not one per commit, and a
    # commit rewrites at most 256 KiB of manifests. Every manifest costs every scan's planning
    # (PyIceberg: 7 manifests 7.9 ms, 1 manifest 1.8 ms on the same table). benchmarks/manifests:
    # at 0 / 2,000 / 20,000 live files, commits take 49 / 63 / 78 ms against 41 / 47 / ~47 ms when
    # folding at 8 manifests of 8 MiB (Iceberg's default folds at 100).
    "commit.manifest.min-count-to-merge": "2",
    "commit.manifest.target-size-bytes": str(256 * 1024),
}


def _table_id(v: str) -> str:
    try:
        validate_table(v)
    except IdentifierError as e:
        raise ValueError(str(e)) from None
    return v


def _interval(v: str) -> str:
    interval_seconds(v)
    return v


#: ``namespace.table``, validated (see icetide.identifiers).
TableId = Annotated[str, AfterValidator(_table_id)]
#: '10 seconds', '500 ms', '2 minutes'.
Interval = Annotated[str, AfterValidator(_interval)]


M = TypeVar("M", bound=BaseModel)

#: A model validator's message that belongs to one of the model's keys starts with this mark and the
#: key (``keyed``); the loader shows it under ``<model key>.<key>``, not under the model's own key.
KEY_MARK = "\u2063"


def keyed(key: str, message: str) -> str:
    return f"{KEY_MARK}{key}: {message}"


def check_overrides(model: type[BaseModel], overrides: dict[str, dict[str, Any]]) -> None:
    """Each per-table override must be valid on its own for ``model``."""
    for pattern, values in overrides.items():
        try:
            model(**values)
        except ValidationError as e:
            problems = []
            for err in e.errors():
                key = ".".join(str(x) for x in err["loc"])
                what = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
                problems.append(f"{key}: {what}")
            raise ValueError(f"override {pattern!r}: {'; '.join(problems)}") from None


def merged_for(base: M, overrides: dict[str, dict[str, Any]], table: str) -> M:
    """``base``, then every override whose glob matches ``table``, in the order written."""
    merged = base.model_dump()
    for pattern, values in overrides.items():
        if fnmatch.fnmatchcase(table, pattern):
            merged.update(values)
    return type(base)(**merged)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


_UNIT_SECONDS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1.0,
                 "second": 1.0, "seconds": 1.0, "m": 60.0, "minute": 60.0, "minutes": 60.0,
                 "h": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0}


def interval_seconds(text: str) -> float:
    """Parse '10 seconds', '500 ms', '2 minutes' or '30 days' into seconds."""
    m = INTERVAL_RE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not an interval; write e.g. '10 seconds', '500 ms', '2 minutes'")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


_TEMPLATE_PART = r"(?:[a-z0-9_]|\{[a-z_][a-z0-9_]*\})+"
TEMPLATE_RE = re.compile(rf"^(?P<ns>{_TEMPLATE_PART})\.(?P<table>{_TEMPLATE_PART})$")
PLACEHOLDER_RE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
FIELD_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}(?:\.[A-Za-z_][A-Za-z0-9_]{0,127}){0,7}$")
HEADER_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def _check_transforms(v: list[str]) -> list[str]:
    for t in v:
        if not TRANSFORM_RE.fullmatch(t.strip()):
            raise ValueError(
                f"{t!r} is not a partition transform; use a column name, years|months|days|"
                "hours(col), bucket(N, col) or truncate(N, col)"
            )
    return [t.strip() for t in v]


def _check_properties(v: dict[str, str]) -> dict[str, str]:
    for k in v:
        if not PROPERTY_KEY_RE.fullmatch(k):
            raise ValueError(f"property key {k!r} is not allowed (use A-Z a-z 0-9 . _ -)")
    return {k: str(val) for k, val in v.items()}


def _check_columns(v: list[str]) -> list[str]:
    for c in v:
        if not COLUMN_RE.fullmatch(c):
            raise ValueError(f"column {c[:64]!r} is not allowed (use A-Z a-z 0-9 _, starting with a letter or _)")
    return v


Transforms = Annotated[list[str], AfterValidator(_check_transforms)]
Properties = Annotated[dict[str, str], AfterValidator(_check_properties)]
Columns = Annotated[list[str], AfterValidator(_check_columns)]
