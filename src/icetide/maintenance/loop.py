"""The background maintenance loop: event-driven (commits), with polling for other writers.

Inside ``icetide run`` the ingest notifies the loop after each commit; the loop waits at least
``maintenance.min_interval`` between cycles (so a burst of commits is one cycle) and at most
``maintenance.interval`` (so commits by other writers — Flink, Kafka Connect — are noticed by the
cheap metadata polling every cycle starts with). When a plan says a closed time partition will settle
before the next regular cycle (the stream moved on to a new hour a moment ago), the loop looks again
then, so the hour is compacted within seconds of settling, not up to an interval later. Cycles run
in the Spark scheduler pool ``icetide_maintenance`` (FAIR scheduling), on their own thread; a
failing cycle is logged and never reaches the stream. ``icetide maintain --watch`` runs the same
loop in the foreground.
Retention of icetide's own logs cuts whole days, so the loop checks it once an hour, not every cycle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from icetide.config.base import interval_seconds
from icetide.config.models import PipelineConfig
from icetide.loops import LoopService
from icetide.maintenance.cycle import run_cycle

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

RETENTION_EVERY_S = 3600.0


class MaintenanceLoop(LoopService):
    name = "maintenance"

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, tables: Callable[[], list[str] | None],
                 in_flight_since_ms: Callable[[], int | None] | None = None, run_first: bool = False) -> None:
        m = cfg.maintenance
        super().__init__(interval_seconds(m.interval), interval_seconds(m.min_interval), run_first=run_first)
        self.spark = spark
        self.cfg = cfg
        self.tables = tables
        self.in_flight_since_ms = in_flight_since_ms
        self.commits_seen = 0
        self.last_records: list[Any] = []
        self.retention_at = float("-inf")  # monotonic seconds of the last retention check

    def notify(self, *_: object) -> None:
        """Called after every ingest commit."""
        self.commits_seen += 1
        self.wake()

    def tick(self) -> None:
        now = time.monotonic()
        retention = now - self.retention_at >= RETENTION_EVERY_S
        plans, records = run_cycle(self.spark, self.cfg, self.tables(), in_flight_since_ms=self.in_flight_since_ms,
                                   retention=retention)
        revisit = min((p.revisit_at_ms for p in plans if p.revisit_at_ms is not None), default=None)
        if revisit is not None:
            # one second late, so the partition has settled when the next cycle plans
            self.due_in(revisit / 1000 - time.time() + 1.0)
        if retention:
            self.retention_at = now
        self.last_records = records
        done = [f"{r.table}:{r.step}:{r.outcome}" for r in records]
        log.info("maintenance cycle %d: %s", self.ticks + 1, ", ".join(done) or "nothing to do")
