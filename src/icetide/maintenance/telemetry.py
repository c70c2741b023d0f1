"""Query telemetry: Iceberg scan reports spooled by the JVM reporter → the telemetry table → per
table and column, how often queries filter on it and how many data files they still read.

The reporter (``io.icetide.iceberg.ScanTelemetry``, registered with the catalog property
``metrics-reporter-impl``) writes JSON lines under the spool location; :func:`load_spool` appends
them to ``maintenance.telemetry_table`` and deletes the files it loaded (at least once: a crash
between the append and the delete loads those reports again). Table names are stored as
``namespace.table``; column names are taken from the filter Iceberg reports (literals sanitized).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType, TimestampType

from icetide.config.base import COLUMN_RE, interval_seconds
from icetide.config.models import PipelineConfig
from icetide.lake.checkpoint import _fs_path
from icetide.lake.meta import MetaReader
from icetide.lake.readers import as_reader
from icetide.lake.tables import ensure_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

REPORTER = "io.icetide.iceberg.ScanTelemetry"
SPOOL_PROPERTY = "icetide.telemetry.location"
_REF = r'ref\(name="([^"]+)"\)'

SPOOL_SCHEMA = StructType([
    StructField("table_name", StringType()), StructField("queried_at_ms", LongType()),
    StructField("snapshot_id", LongType()), StructField("filter", StringType()),
    StructField("projected", ArrayType(StringType())), StructField("result_data_files", LongType()),
    StructField("skipped_data_files", LongType()), StructField("result_delete_files", LongType()),
    StructField("scanned_data_manifests", LongType()), StructField("skipped_data_manifests", LongType()),
    StructField("total_file_bytes", LongType()), StructField("planning_ms", LongType()),
])
SCHEMA = StructType([
    StructField("table_name", StringType()), StructField("queried_at", TimestampType()),
    StructField("snapshot_id", LongType()), StructField("filter", StringType()),
    StructField("filter_columns", ArrayType(StringType())), StructField("projected", ArrayType(StringType())),
    StructField("result_data_files", LongType()), StructField("skipped_data_files", LongType()),
    StructField("result_delete_files", LongType()), StructField("total_file_bytes", LongType()),
    StructField("planning_ms", LongType()),
])


def spool_location(cfg: PipelineConfig) -> str | None:
    """Where the reporter of this catalog spools: ``catalog.properties['icetide.telemetry.location']``,
    else ``<warehouse>/_icetide/telemetry`` for a JDBC catalog with a warehouse path; else None."""
    explicit = cfg.catalog.properties.get(SPOOL_PROPERTY)
    if explicit:
        return cfg.resolve(explicit).rstrip("/")
    warehouse = getattr(cfg.catalog, "warehouse", None)
    if cfg.catalog.type == "jdbc" and warehouse:
        return cfg.resolve(warehouse).rstrip("/") + "/_icetide/telemetry"
    return None


def load_spool(spark: SparkSession, cfg: PipelineConfig) -> int:
    """Append the spooled scan reports to the telemetry table, then delete their files; rows loaded."""
    table, location = cfg.maintenance.telemetry_table, spool_location(cfg)
    if not table or not location:
        return 0
    fs, folder = _fs_path(spark, location)
    if not fs.exists(folder):
        return 0
    files = [s.getPath() for s in fs.listStatus(folder) if s.getPath().getName().endswith(".jsonl")]
    if not files:
        return 0
    raw = spark.read.schema(SPOOL_SCHEMA).json([str(p.toString()) for p in files])
    parts = F.split(F.col("table_name"), r"\.")
    rows = (raw.where(F.size(parts).isin(2, 3))  # catalog.namespace.table (metadata tables have 4 parts)
            .select(F.when(F.size(parts) == 3, F.concat_ws(".", parts[1], parts[2])).otherwise(F.col("table_name"))
                    .alias("table_name"),
                    F.timestamp_millis(F.col("queried_at_ms")).alias("queried_at"), "snapshot_id", "filter",
                    F.array_distinct(F.regexp_extract_all(F.col("filter"), F.lit(_REF), 1)).alias("filter_columns"),
                    "projected", "result_data_files", "skipped_data_files", "result_delete_files",
                    "total_file_bytes", "planning_ms")
            .localCheckpoint())
    n = rows.count()
    if n:
        qualified = ensure_table(spark, cfg.catalog.name, table, SCHEMA, ["days(queried_at)"],
                                 {"format-version": "2"})
        rows.writeTo(qualified).append()
    for p in files:
        fs.delete(p, False)
    log.info("telemetry: loaded %d scan reports from %d spool files", n, len(files))
    return n


@dataclass(frozen=True)
class ColumnDemand:
    """Scans of one table in the window that filtered on one column."""

    column: str
    scans: int
    data_files_read: int  # data files those scans still had to read
    bytes_read: int


def column_demand(source: MetaReader | SparkSession, cfg: PipelineConfig,
                  now_ms: int) -> dict[str, list[ColumnDemand]]:
    """Per ``namespace.table``: the filtered-on columns, most data files read first."""
    reader = as_reader(cfg, source)
    t = cfg.maintenance.telemetry_table
    if not t or not reader.exists(t) or "filter_columns" not in reader.columns(t):
        return {}  # no telemetry yet, or a table fed by another engine without columns
    since = now_ms - int(interval_seconds(cfg.maintenance.telemetry_window) * 1000)
    agg: dict[tuple[str, str], list[int]] = {}
    for r in reader.rows(t, ["table_name", "filter_columns", "result_data_files", "total_file_bytes"],
                         ("queried_at", since)):
        for col in set(r["filter_columns"] or []):
            a = agg.setdefault((str(r["table_name"]), str(col or "")), [0, 0, 0])
            a[0] += 1
            a[1] += int(r["result_data_files"] or 0)
            a[2] += int(r["total_file_bytes"] or 0)
    out: dict[str, list[ColumnDemand]] = {}
    for (table, col), (scans, files, nbytes) in agg.items():
        if COLUMN_RE.fullmatch(col):  # only plain top-level column names ever reach a plan
            out.setdefault(table, []).append(ColumnDemand(col, scans, files, nbytes))
    for v in out.values():
        v.sort(key=lambda d: (-d.data_files_read, -d.scans, d.column))
    return out


def query_counts(source: MetaReader | SparkSession, cfg: PipelineConfig, now_ms: int) -> dict[str, int]:
    """Queries per ``namespace.table`` in the telemetry window (empty without a telemetry table)."""
    reader = as_reader(cfg, source)
    t = cfg.maintenance.telemetry_table
    if not t or not reader.exists(t):
        return {}
    since = now_ms - int(interval_seconds(cfg.maintenance.telemetry_window) * 1000)
    out: dict[str, int] = {}
    for r in reader.rows(t, ["table_name"], ("queried_at", since)):
        name = str(r["table_name"] or "").removeprefix(f"{cfg.catalog.name}.")
        out[name] = out.get(name, 0) + 1
    return out
