"""In-flight markers: a writer's record of the batch it is writing, visible to other processes.

Before icetide writes a table it puts ``metadata/icetide-inflight-<pipeline>.json`` under the
table location (``{"pipeline", "run", "since_ms"}``) and removes it after the commit. Orphan
cleanup in *any* process (a standalone ``icetide maintain`` too) never deletes files newer than
the oldest live marker's ``since_ms``, so the data files of an uncommitted batch survive however
short the age floor is. A marker older than ``STALE_AFTER_MS`` belongs to a writer that crashed;
it no longer protects anything (the crashed batch's files are exactly what cleanup is for).
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from icetide.identifiers import validate_pipeline

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
PREFIX = "icetide-inflight-"
STALE_AFTER_MS = 6 * 3600 * 1000


def _fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm: Any = spark._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    return p.getFileSystem(spark._jsc.hadoopConfiguration()), p  # type: ignore[union-attr]


def location(spark: SparkSession, table: str) -> str:
    jvm: Any = spark._jvm
    return str(jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table).location())


def marker_path(table_location: str, pipeline: str) -> str:
    return f"{table_location.rstrip('/')}/metadata/{PREFIX}{validate_pipeline(pipeline)}.json"


def is_marker(path: str) -> bool:
    return f"/metadata/{PREFIX}" in path


def mark(spark: SparkSession, table_location: str, pipeline: str, run: str, since_ms: int) -> None:
    fs, p = _fs(spark, marker_path(table_location, pipeline))
    out = fs.create(p, True)
    try:
        out.write(json.dumps({"pipeline": pipeline, "run": run, "since_ms": since_ms}).encode())
    finally:
        out.close()


def clear(spark: SparkSession, table_location: str, pipeline: str) -> None:
    fs, p = _fs(spark, marker_path(table_location, pipeline))
    fs.delete(p, False)


def oldest(spark: SparkSession, table_location: str, now_ms: int | None = None) -> int | None:
    """``since_ms`` of the oldest live marker under the table location (None: nothing in flight)."""
    now_ms = now_ms or int(time.time() * 1000)
    fs, p = _fs(spark, f"{table_location.rstrip('/')}/metadata")
    if not fs.exists(p):
        return None
    found: list[int] = []
    for status in fs.listStatus(p):
        name = str(status.getPath().getName())
        if not name.startswith(PREFIX):
            continue
        stream = fs.open(status.getPath())
        try:
            jvm: Any = spark._jvm
            raw = json.loads(str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")))
            since = int(raw["since_ms"])
        except Exception:
            log.warning("unreadable in-flight marker %s; ignored", name)
            continue
        finally:
            stream.close()
        if now_ms - since < STALE_AFTER_MS:
            found.append(since)
    return min(found) if found else None
