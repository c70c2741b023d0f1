"""Safe orphan cleanup with Iceberg's own ``DeleteOrphanFiles`` action.

Iceberg decides what is an orphan (not referenced by any snapshot, manifest, metadata or statistics
file, under the table location, older than the cutoff). Listing and deleting go through the table's
FileIO; every path is logged, a dry run deletes nothing, and the cutoff is never later than the
start of an icetide write in flight: in this process (``in_flight_since``) or in any other, through the
in-flight markers under the table location (:mod:`icetide.lake.inflight`). So files of an
uncommitted batch survive even when the age floor is short. Other writers (Flink, Kafka Connect)
are protected by the age floor alone, which must exceed their longest commit interval.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from icetide.lake import inflight
from icetide.lake.table_io import TableIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
IN_FLIGHT_MARGIN_MS = 60_000


class _Delete:
    """A ``java.util.function.Consumer<String>`` that Iceberg calls for every orphan."""

    def __init__(self, io: TableIO, table: str, dry_run: bool) -> None:
        self.io, self.table, self.dry_run = io, table, dry_run
        self.paths: list[str] = []

    def accept(self, path: str) -> None:
        if inflight.is_marker(str(path)):  # a writer's in-flight marker is not an orphan
            return
        self.paths.append(str(path))
        log.warning(json.dumps({"event": "orphan_file", "table": self.table, "dry_run": self.dry_run,
                                "path": str(path)}))
        if not self.dry_run:
            self.io.delete(str(path))

    class Java:
        implements: ClassVar[list[str]] = ["java.util.function.Consumer"]


def cutoff(older_than_ms: int, in_flight_since_ms: Callable[[], int | None] | None,
           marked_since_ms: int | None = None) -> int:
    """The effective cutoff: the age floor, moved earlier than any in-flight icetide write."""
    since = [s for s in (in_flight_since_ms() if in_flight_since_ms else None, marked_since_ms) if s is not None]
    return older_than_ms if not since else min(older_than_ms, min(since) - IN_FLIGHT_MARGIN_MS)


def remove_orphans(spark: SparkSession, table: str, older_than_ms: int, dry_run: bool,
                   in_flight_since_ms: Callable[[], int | None] | None = None) -> list[str]:
    """Find (and unless ``dry_run``, delete) orphans of ``table`` older than the cutoff."""
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    assert gateway is not None
    ensure_callback_server_started(gateway)
    jvm = spark._jvm
    assert jvm is not None
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    io = TableIO.of_table(spark, iceberg_table)
    deleter = _Delete(io, table, dry_run)
    action = (jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
              .deleteOrphanFiles(iceberg_table)
              .olderThan(cutoff(older_than_ms, in_flight_since_ms, inflight.oldest(io)))
              .deleteWith(deleter))
    if io.supports_prefix_listing():
        # List through the table's FileIO (S3FileIO on an s3:// warehouse) rather than Hadoop's FileSystem.
        action = action.usePrefixListing(True)
    action.execute()
    return deleter.paths
