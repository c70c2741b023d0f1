"""The background maintenance loop: event-driven (commits), with polling for other writers.

Inside ``icetide run`` the ingest notifies the loop after each commit; the loop waits at least
``maintenance.min_interval`` between cycles (so a burst of commits is one cycle) and at most
``maintenance.interval`` (so commits by other writers — Flink, Kafka Connect — are noticed by the
cheap metadata polling every cycle starts with). Cycles run in the Spark scheduler pool
``icetide_maintenance`` (FAIR scheduling), on their own thread; a failing cycle is logged and
never reaches the stream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from icetide.config.models import PipelineConfig, interval_seconds
from icetide.maintenance.cycle import run_cycle

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class MaintenanceLoop:
    def __init__(self, spark: SparkSession, cfg: PipelineConfig, tables: Callable[[], list[str] | None],
                 in_flight_since_ms: Callable[[], int | None] | None = None) -> None:
        self.in_flight_since_ms = in_flight_since_ms
        self.spark = spark
        self.cfg = cfg
        self.tables = tables
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="icetide-maintenance", daemon=True)
        self.cycles = 0
        self.failures = 0
        self.commits_seen = 0
        self.last_records: list[Any] = []

    def start(self) -> MaintenanceLoop:
        self._thread.start()
        return self

    def notify(self, *_: object) -> None:
        """Called after every ingest commit."""
        self.commits_seen += 1
        self._wake.set()

    def stop(self, timeout: float = 300.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        m = self.cfg.maintenance
        every, debounce = interval_seconds(m.interval), interval_seconds(m.min_interval)
        last = 0.0
        while not self._stop.is_set():
            self._wake.wait(every)
            if self._stop.is_set():
                break
            wait = debounce - (time.monotonic() - last)
            if wait > 0 and self._stop.wait(wait):
                break
            self._wake.clear()
            last = time.monotonic()
            try:
                _, records = run_cycle(self.spark, self.cfg, self.tables(),
                                       in_flight_since_ms=self.in_flight_since_ms)
                self.last_records = records
                self.cycles += 1
                done = [f"{r.table}:{r.step}:{r.outcome}" for r in records]
                log.info("maintenance cycle %d: %s", self.cycles, ", ".join(done) or "nothing to do")
            except Exception:
                self.failures += 1
                log.exception("maintenance cycle failed; the stream is unaffected")
