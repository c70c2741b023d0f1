"""Reading a table's metadata and icetide's own small tables, the same way with or without a JVM.

:class:`MetaReader` is what health figures, plans, offsets, dead-letter listings and the report read
through. Two backends return the same raw facts: :mod:`icetide.lake.meta_spark` (Spark's Iceberg
metadata tables, for code that already holds a SparkSession) and :mod:`icetide.lake.meta_pyiceberg`
(PyIceberg over the same catalog, for read-only commands that should not start a JVM). Every figure is
computed once, above this interface, from these facts.

Invariants both backends keep (tests/integration/test_readers.py compares them on the same tables):

- table arguments are ``namespace.table`` (validated here) and answers are about the current snapshot;
- a partition is named by :func:`partition_key`: the JSON Spark's ``to_json(partition)`` writes
  (fields by partition field id, nulls left out, no spaces), ``""`` for an unpartitioned table;
- times are epoch milliseconds; datetimes read from tables are timezone-aware UTC.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from icetide.identifiers import validate_table

if TYPE_CHECKING:
    import pyarrow as pa

#: Columns of :meth:`MetaReader.files`, one row per live data or delete file.
FILE_COLUMNS = ("partition", "content", "file_size_in_bytes", "record_count")


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    committed_at_ms: int
    #: as in the metadata JSON: ``operation`` (append, overwrite, delete, replace) and the writer's keys
    summary: dict[str, str]
    #: 0 for the current snapshot, 1 for its parent, …; None when not an ancestor of the current one
    ancestry: int | None

    @property
    def writes(self) -> bool:
        """New data or deletes; False for a ``replace`` (a compaction only rewrites what is there)."""
        return self.summary.get("operation") != "replace"


@dataclass(frozen=True)
class Manifests:
    count: int
    bytes: int
    delete_manifests: int


@dataclass(frozen=True)
class SpecField:
    name: str  # the field's name in the partition struct, e.g. event_time_day
    transform: str  # identity, days, hours, months, years, bucket, truncate, void
    source: str  # the source column


@dataclass(frozen=True)
class FileBounds:
    partition: str
    size: int
    lower: Any
    upper: Any


class MetaReader(Protocol):
    """Read-only access to one catalog (its Spark catalog name is ``catalog``)."""

    catalog: str

    def fresh(self) -> MetaReader:
        """A reader that sees commits made since this one loaded its tables."""
        ...

    def list_tables(self, namespace: str) -> list[str]: ...
    def namespaces(self) -> list[str]: ...
    def exists(self, table: str) -> bool: ...
    def columns(self, table: str) -> list[str]: ...
    def properties(self, table: str) -> dict[str, str]: ...
    def partitioned(self, table: str) -> bool: ...
    def spec(self, table: str) -> list[SpecField]: ...
    def files(self, table: str) -> pa.Table: ...
    def partition_writes(self, table: str) -> dict[str, int]: ...
    def snapshots(self, table: str) -> list[Snapshot]: ...
    def manifests(self, table: str) -> Manifests: ...
    def metadata_file_bytes(self, table: str) -> int | None: ...
    def file_bounds(self, table: str, column: str) -> list[FileBounds]: ...
    def rows(self, table: str, columns: list[str], since: tuple[str, int] | None = None) -> list[dict[str, Any]]:
        """Rows of a small table (icetide's own logs), projected; ``since`` = (timestamp column, epoch ms)."""
        ...


_TRANSFORMS = {"day": "days", "hour": "hours", "month": "months", "year": "years"}


def spec_field(name: str, transform: str, source: str) -> SpecField:
    """A spec field from Iceberg's own spelling of the transform (``day``, ``bucket[4]``, …)."""
    kind = transform.split("[")[0]
    return SpecField(name, _TRANSFORMS.get(kind, kind), source)


def short(table: str) -> str:
    """``namespace.table``, validated (a catalog prefix is not accepted here)."""
    return ".".join(validate_table(table))


def partition_key(values: Mapping[str, Any] | None, order: list[str] | None = None) -> str:
    """The canonical name of a partition: Spark's ``to_json(partition)`` (see the module docstring)."""
    if values is None:
        return ""
    names = order if order is not None else list(values)
    out = {n: _json_value(values[n]) for n in names if n in values and values[n] is not None}
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def _json_value(v: Any) -> Any:
    if isinstance(v, datetime):
        v = v.astimezone(UTC) if v.tzinfo else v
        return v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, bytes):
        return v.hex()
    return v


def utc(v: Any) -> Any:
    """Datetimes as timezone-aware UTC (naive ones are UTC already: icetide's Spark session time zone)."""
    if isinstance(v, datetime):
        return v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)
    return v
