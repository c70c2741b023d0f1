"""Health history: every collection appended to an Iceberg table, queryable by any engine."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from icetide.health.model import TableHealth
from icetide.lake.tables import ensure_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LONGS = ("data_files", "data_bytes", "records", "small_files", "delete_files", "deleted_records",
          "snapshots", "commits_last_hour", "manifests", "manifest_bytes", "metadata_file_bytes",
          "commit_latency_ms", "last_write_ms", "freshness_ms", "kafka_lag")
SCHEMA = StructType(
    # table_name first: see LOG_SCHEMA in icetide.maintenance.executor (partition source ≠ field id 1)
    [StructField("table_name", StringType()), StructField("collected_at", TimestampType()),
     StructField("level", StringType()), StructField("partition", StringType()),
     StructField("score", DoubleType()), StructField("tier", StringType()),
     *[StructField(n, LongType()) for n in _LONGS],
     StructField("delete_ratio", DoubleType()), StructField("avg_file_bytes", DoubleType()),
     StructField("hot", BooleanType()), StructField("reasons", StringType())]
)


def rows(h: TableHealth) -> list[dict[str, Any]]:
    at = datetime.fromtimestamp(h.collected_at_ms / 1000, UTC).replace(tzinfo=None)
    s = h.summary()
    out = [{"collected_at": at, "table_name": h.table, "level": "table", "partition": None,
            "score": h.score, "tier": h.tier, **{n: s.get(n) for n in _LONGS},
            "delete_ratio": h.delete_ratio, "avg_file_bytes": h.avg_file_bytes, "hot": None,
            "reasons": json.dumps(h.reasons)}]
    for p in h.partition_rows():
        out.append({"collected_at": at, "table_name": h.table, "level": "partition", "partition": p["partition"],
                    "score": p["score"], "tier": p["tier"], **{n: p.get(n) for n in _LONGS},
                    "delete_ratio": p["delete_ratio"], "avg_file_bytes": p["avg_file_bytes"], "hot": p["hot"],
                    "reasons": json.dumps(p["reasons"])})
    return out


def record(spark: SparkSession, catalog: str, history_table: str, healths: list[TableHealth]) -> int:
    """Append one collection; returns the number of rows written."""
    data = [r for h in healths for r in rows(h)]
    if not data:
        return 0
    qualified = ensure_table(spark, catalog, history_table, SCHEMA, ["days(collected_at)"],
                             {"format-version": "2", "write.parquet.compression-codec": "zstd"})
    spark.createDataFrame(data, SCHEMA).writeTo(qualified).append()
    return len(data)
