"""``icetide run``: start the streaming query, keep it running, stop it cleanly on SIGTERM."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from icetide.app import adopt, recreated, resume, run_alerts
from icetide.app.failures import fence_line as _fence_line
from icetide.app.failures import first_line as _first_line
from icetide.app.failures import recreated_line as _recreated_line
from icetide.app.failures import spark_kafka_metrics_npe as _spark_kafka_metrics_npe
from icetide.app.failures import terminal as _terminal
from icetide.app.preflight import note_started, preflight_run
from icetide.app.recreated import table_watermarks
from icetide.config.base import interval_seconds
from icetide.config.models import PipelineConfig
from icetide.errors import (
    CheckpointMismatchError,
    FencedError,
    IcetideError,
    ServiceUnreachableError,
    StoppedBeforeStart,
    TopicRecreatedError,
    TransientError,
    is_fenced,
)
from icetide.ingest import source
from icetide.ingest.batch_log import PipelineCounters
from icetide.ingest.sink import BatchWriter
from icetide.lake import checkpoint
from icetide.lake.offsets import resume_offsets
from icetide.loops import RestartBudget
from icetide.maintenance.loop import MaintenanceLoop
from icetide.spark import build_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('ch') else 's'}"


@dataclass
class RunSummary:
    run_id: str
    counters: PipelineCounters
    stopped_by: str

    def describe(self) -> str:
        c = self.counters
        gaps = ", ".join(f"{tp} {a}-{b - 1}" for tp, gs in sorted(c.gaps.items()) for a, b in gs)
        # a table's part ("topic[p] for ns.table") is a gap of that table's records, if any: not a count
        lost = (f"; {c.lost_records} records deleted by Kafka before they were read ({gaps})" if c.lost_records
                else f"; records Kafka deleted before they were read may be missing from some tables ({gaps})"
                if c.gaps else "")
        waited = f"; waited {c.registry_wait_s:.0f} s for the schema registry" if c.registry_wait_s >= 1 else ""
        again = "".join(f"; topic {t} was deleted and created again ({why}): read from its start"
                        for t, why in sorted(c.recreated.items()))
        return (f"{plural(c.batches, 'batch')}, {plural(c.records, 'record')}, {c.written} written, "
                f"{c.dead_letters} dead-lettered{lost}{waited}{again}")


def run_until_stopped(cfg: PipelineConfig, duration: float | None = None,
                      until_idle: bool = False, idle_after: float | None = None) -> tuple[Runner, RunSummary]:
    """Run a pipeline in the foreground: SIGTERM/SIGINT stop it after the current batch (exit 0)."""
    early: list[str] = []  # a signal that arrives while Spark starts

    def remember(signum: int, frame: FrameType | None) -> None:
        early.append(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, remember)
    signal.signal(signal.SIGINT, remember)
    runner = Runner(cfg, stopped=lambda: bool(early))
    runner.install_signal_handlers()
    if early:
        runner.request_stop(early[0])
    try:
        return runner, runner.run(duration=duration, until_idle=until_idle, idle_after=idle_after)
    finally:
        runner.close()


def starting_offsets(spark: SparkSession, cfg: PipelineConfig, writer: BatchWriter,
                     wait: Callable[[float], bool | None] = time.sleep) -> str:
    """Where the query starts when it has no checkpoint (ignored by Spark when one exists); a topic
    deleted and created again since it was read first stops the run or sets the checkpoint aside."""
    ckpt = cfg.checkpoint_dir()
    has_checkpoint = checkpoint.exists(spark, ckpt)
    if not has_checkpoint:
        adopt.refuse_foreign_offsets(spark, cfg, writer, wait)
    aside = recreated.at_start(spark, cfg, writer, has_checkpoint)  # a topic deleted and created again (#41)
    if aside is not None:
        return aside
    if has_checkpoint:
        log.info("resuming from checkpoint %s", ckpt)
        return cfg.source.starting_offsets
    wms = table_watermarks(spark, writer)
    if not wms:
        log.info("new pipeline: starting at %s offsets", cfg.source.starting_offsets)
        return cfg.source.starting_offsets
    if cfg.stream.on_missing_checkpoint == "fail" and cfg.source.adopt_offsets_from is None:
        held = {t: json.loads(w.encode()) for t, w in wms.items()}
        raise CheckpointMismatchError(
            f"stream.checkpoint_location: no checkpoint at {ckpt}, but tables already hold offsets of "
            f"pipeline '{cfg.name}': {json.dumps(held)}. Restore the checkpoint, or set "
            "stream.on_missing_checkpoint: resume to continue from the offsets recorded in the tables"
        )
    offsets = resume.starting_json(cfg, writer, resume_offsets(list(wms.values())))
    log.warning("no checkpoint at %s: resuming from the offsets recorded in the tables: %s", ckpt, offsets)
    return offsets


class Runner:
    """Owns the SparkSession and the streaming query of one pipeline."""

    def __init__(self, cfg: PipelineConfig, spark: SparkSession | None = None,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self.cfg = cfg
        # Fail fast, naming the key, before starting Spark (a pipeline that has run waits for its
        # services until ``stopped``: a signal)
        preflight_run(cfg, stopped=stopped)
        with _termination_left_to_python():
            self.spark = spark or build_session(cfg)
        self.run_id = uuid.uuid4().hex[:12]
        self.maintenance = None
        if cfg.maintenance.in_run:
            self.maintenance = MaintenanceLoop(self.spark, cfg, lambda: self.writer.tables(),
                                               in_flight_since_ms=lambda: self.writer.in_flight_since_ms)
        self.writer = BatchWriter(self.spark, cfg, self.run_id,
                                  on_commit=self.maintenance.notify if self.maintenance else None,
                                  on_gap=lambda b, lost: run_alerts.gap(cfg, b, lost),
                                  on_registry_outage=lambda why: run_alerts.registry(cfg, why),
                                  on_config_mistake=lambda b, m: run_alerts.config_mistake(cfg, b, m))
        self._stop = threading.Event()
        self._idle_after = 2.0  # seconds without new records that end an until_idle run (set by run())
        self._stopped_by = "completed"
        self.query: StreamingQuery | None = None
        #: Query restarts after failures (transient, and Spark's known metrics NPE).
        self.restarts = 0
        #: Times another process of the pipeline fenced this run out (each followed by a standby).
        self.fenced = 0

    def request_stop(self, reason: str = "requested") -> None:
        if not self._stop.is_set():  # the first reason wins: a SIGINT is not later called "idle"
            self._stopped_by = reason
        self._stop.set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            log.warning("received %s: stopping after the current batch", signal.Signals(signum).name)
            self.request_stop(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _start(self) -> StreamingQuery:
        cfg = self.cfg
        route = cfg.target.route
        start = starting_offsets(self.spark, cfg, self.writer, self._stop.wait)
        self.writer.one_pass.create_declared()  # a declared table exists before the first batch
        kafka = source.read_stream(self.spark, cfg.source, start, headers=route is not None and route.by == "header")
        query = (
            kafka.writeStream.foreachBatch(self.writer)
            .queryName(f"icetide_{cfg.name.replace('-', '_')}")
            .option("checkpointLocation", cfg.checkpoint_dir())
            .trigger(processingTime=cfg.stream.trigger_interval)
            .start()
        )
        self.writer.topics.remember(self.spark, cfg.checkpoint_dir())  # the topics' ids, with the checkpoint
        return query

    def _start_or_wait(self, budget: RestartBudget) -> StreamingQuery | None:
        """:meth:`_start`, with a transient failure (the catalog restarting while the query starts:
        chaos seed 1202) waited out like a failed query; None when a stop was asked meanwhile."""
        while True:
            if self._stop.is_set():  # asked while the preflight's last check or Spark's start ran
                return None
            try:
                return self._start()
            except StoppedBeforeStart:  # a stop asked while the start waited (adopt_offsets_from)
                return None
            except Exception as e:
                waitable = isinstance(e, ServiceUnreachableError) or not isinstance(e, IcetideError) or not e.terminal
                if not waitable or _terminal(e) or not budget.failed(self.writer.counters.batches):
                    raise
                self.restarts += 1
                log.warning("the query could not start (%s); again %d/%d in %.0fs", _first_line(e), budget.used,
                            budget.attempts, budget.backoff())
                if self._stop.wait(budget.backoff()):
                    return None

    def run(self, duration: float | None = None, until_idle: bool = False,
            idle_after: float | None = None) -> RunSummary:
        """Run until SIGTERM/SIGINT, ``duration`` seconds, or (``until_idle``) no new data for
        ``idle_after`` seconds (default: two triggers, at least 2 s)."""
        self._idle_after = idle_after if idle_after is not None else max(2.0, self.cfg.stream.trigger_seconds() * 2)
        deadline = None if duration is None else time.monotonic() + duration
        budget = RestartBudget(self.cfg.stream.restart_attempts)
        known = again = 0
        if self.maintenance is not None:
            self.maintenance.start()
        while True:
            started = self._start_or_wait(budget)
            if started is None:
                break
            self.query = started
            note_started(self.cfg)
            src = self.cfg.source
            log.info("pipeline %s started (run %s, query %s): %s from %s, options %s", self.cfg.name, self.run_id,
                     self.query.id, src.topics or src.topic_pattern, src.bootstrap_servers,
                     source.redacted(src.options))
            try:
                self._watch(deadline, until_idle)
                break
            except IcetideError:
                raise
            except Exception as e:
                self.writer.forget_watermarks()
                if "TopicRecreatedError" in str(e):  # found by a batch (#41)
                    if self.cfg.source.on_topic_recreated == "stop" or not self.writer.topics.pending or again > 10:
                        raise TopicRecreatedError(_recreated_line(e)) from None
                    again += 1
                    log.warning("%s", _recreated_line(e))
                    continue
                if is_fenced(e):
                    self.fenced += 1
                    if self.cfg.stream.on_fenced == "exit":
                        raise FencedError(f"{_fence_line(e)}; this run stops (stream.on_fenced: exit) so that "
                                          "no batch lands twice. Stop the other run, or wait, then start again"
                                          ) from None
                    if not self._standby(e, deadline):
                        break
                    continue
                if _spark_kafka_metrics_npe(e) and known < 10:
                    # SPARK-55271: Spark 4.1's Kafka source fails progress reporting after a batch
                    # replayed from the checkpoint. The batch itself committed; restart at once.
                    known += 1
                    self.restarts += 1
                    log.warning("restarting after Spark's Kafka metrics NPE (SPARK-55271)")
                    continue
                self.restarts += 1
                if not budget.failed(self.writer.counters.batches) or _terminal(e):
                    raise
                wait = budget.backoff()
                log.warning("query failed (%s); restart %d/%d in %.0fs", _first_line(e), budget.used,
                            budget.attempts, wait)
                if self._stop.wait(wait):
                    break
        return RunSummary(self.run_id, self.writer.counters, self._stopped_by)

    def _standby(self, e: BaseException, deadline: float | None) -> bool:
        """Wait while another run of the pipeline keeps committing; True to take over, False to stop."""
        after = interval_seconds(self.cfg.stream.takeover_after)
        log.warning("fenced: %s. Standing by: this run takes over once no other run has committed for %.0fs",
                    _fence_line(e), after)
        while True:
            if self._stop.wait(min(max(after / 4, 1.0), 15.0)):
                return False
            if deadline is not None and time.monotonic() >= deadline:
                self.request_stop("duration")
                return False
            self.writer.forget_watermarks()
            try:
                others = [w.committed_at_ms for w in table_watermarks(self.spark, self.writer).values()
                          if w.run != self.run_id]
            except TransientError as t:  # e.g. this run's topic ids are older than the tables': start again
                log.warning("standing by: %s; taking over restarts the query, which learns them afresh", t)
                return True
            quiet = time.time() - max(others, default=0) / 1000
            if quiet >= after:
                log.warning("no other run of pipeline %s has committed for %.0fs: taking over", self.cfg.name, quiet)
                return True

    def _watch(self, deadline: float | None, until_idle: bool) -> None:
        q = self.query
        assert q is not None
        idle_since: float | None = None
        while True:
            if q.awaitTermination(1):
                exc = q.exception()
                if exc is not None:
                    raise exc
                return
            if deadline is not None and time.monotonic() >= deadline:
                self.request_stop("duration")
            if until_idle:
                p = q.lastProgress
                if p is not None and p.get("numInputRows", 0) == 0 and not q.status["isTriggerActive"]:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > self._idle_after:
                        self.request_stop("idle")
                else:
                    idle_since = None
            if self._stop.is_set():
                self._stop_gracefully(q)
                return

    def _stop_gracefully(self, q: StreamingQuery) -> None:
        """Let the running batch finish (at most ``stream.stop_timeout``), then stop the query."""
        end = time.monotonic() + interval_seconds(self.cfg.stream.stop_timeout)
        while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < end:
            time.sleep(0.2)
        q.stop()
        log.info("pipeline %s stopped (%s)", self.cfg.name, self._stopped_by)

    def close(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()
        self.writer.flush_mirrors()
        if self.maintenance is not None:
            self.maintenance.stop()


@contextlib.contextmanager
def _termination_left_to_python() -> Iterator[None]:
    """Start the Spark JVM with SIGTERM ignored (a disposition it keeps), so that a SIGTERM sent to the
    whole process group (systemd, ``docker stop``, ``kill -- -PGID``) reaches only the Python driver,
    which finishes or abandons the batch and then stops the JVM. A SIGTERM arriving meanwhile waits
    (blocked) and is delivered once the handler is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
