"""Helpers shared by the benchmark scripts: machine-independent measurement of streaming runs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@contextlib.contextmanager
def broker(port: int, bootstrap: str | None = None) -> Iterator[str]:
    """The Kafka bootstrap a benchmark produces to: ``bootstrap`` when given (a running broker, left
    as it is: the smoke tests share their session's), else a fresh local KRaft broker on ``port``,
    removed afterwards."""
    if bootstrap:
        yield bootstrap
        return
    from icetide.services.kafka import LocalKafka

    local = LocalKafka(port=port)
    local.reset()
    local.start()
    try:
        yield local.bootstrap
    finally:
        local.reset()


def idle_seconds() -> float:
    """How long a vanilla query must see no new rows before it is stopped (``$ICETIDE_BENCH_IDLE_S``,
    default 20 s; the smoke tests use less)."""
    return float(os.environ.get("ICETIDE_BENCH_IDLE_S", "20"))


def stop_when_idle(query: Any, idle_seconds: float | None = None) -> None:
    """Stop a query once no new rows have arrived for ``idle_seconds`` (any trigger, also 0 s), counted
    from its first rows (a producer that starts late is waited for, up to 5 minutes)."""
    if idle_seconds is None:
        idle_seconds = globals()["idle_seconds"]()
    seen, idle_since, started = -1, None, time.monotonic()
    while True:
        time.sleep(0.5)
        if not query.isActive:  # failed (or stopped): say why instead of waiting for rows forever
            error = query.exception()
            if error is not None:
                raise RuntimeError(f"the query failed: {error}")
            return
        total = sum(p["numInputRows"] for p in query.recentProgress)
        last = query.lastProgress
        waited_enough = total > 0 or time.monotonic() - started > 300
        if total == seen and last is not None and last["numInputRows"] == 0 and waited_enough:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > idle_seconds:
                break
        else:
            seen, idle_since = total, None
    query.stop()


def batch_window(query: Any) -> tuple[float, float, int, int]:
    """(start of the first batch, end of the last, rows read, batches) of a query's non-empty batches."""
    return _window(_batches(query))


def steady_rate(query: Any) -> float | None:
    """Events/s over the non-empty batches after the first (table creation and JVM warm-up excluded)."""
    batches = _batches(query)
    if len(batches) < 3:
        return None
    t0, t1, rows, _ = _window(batches[1:])
    return round(rows / (t1 - t0), 1)


def first_batch_seconds(query: Any) -> float:
    """Seconds the first non-empty batch took (table creation and JVM warm-up included)."""
    return round(float(_batches(query)[0]["durationMs"]["triggerExecution"]) / 1000, 3)


def batch_seconds(query: Any) -> list[float]:
    """Seconds each non-empty batch took, oldest first (the warm-up curve)."""
    return [round(float(p["durationMs"]["triggerExecution"]) / 1000, 3) for p in _batches(query)]


def steady_batch_seconds(query: Any) -> float | None:
    """Median seconds of the non-empty batches after the first."""
    xs = sorted(p["durationMs"]["triggerExecution"] / 1000 for p in _batches(query)[1:])
    return round(xs[len(xs) // 2], 3) if xs else None


def _batches(query: Any) -> list[dict[str, Any]]:
    """A query's non-empty batches, oldest first."""
    return sorted((p for p in query.recentProgress if p["numInputRows"] > 0), key=lambda p: ts(p["timestamp"]))


def _window(batches: list[dict[str, Any]]) -> tuple[float, float, int, int]:
    t0 = min(ts(p["timestamp"]) for p in batches)
    t1 = max(ts(p["timestamp"]) + p["durationMs"]["triggerExecution"] / 1000 for p in batches)
    return t0, t1, sum(p["numInputRows"] for p in batches), len(batches)


def jvm_cpu_seconds(spark: Any) -> float:
    """CPU seconds (user + system) the Spark driver JVM has used so far (Linux /proc)."""
    return process_cpu_seconds(spark._jvm.java.lang.ProcessHandle.current().pid())


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def best_of(fn: Callable[[], Any], n: int = 3) -> float:
    """The shortest of ``n`` timed runs of ``fn``, in seconds."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


#: set to 1 by the test suite's tiny runs: see :func:`one_jvm`
ONE_JVM_ENV = "ICETIDE_BENCH_ONE_JVM"


def profiled(name: str) -> dict[str, str]:
    """Conf for a profiled driver JVM: ``$ICETIDE_BENCH_JFR=<folder>`` records a JFR CPU profile there
    (``name``.jfr), ``$ICETIDE_BENCH_EVENT_LOG=<folder>`` writes Spark's event log there."""
    conf: dict[str, str] = {}
    folder = os.environ.get("ICETIDE_BENCH_JFR")
    if folder:
        jfr = Path(folder) / f"{name}.jfr"
        conf["spark.driver.extraJavaOptions"] = f"-XX:StartFlightRecording=filename={jfr},settings=profile"
    events = os.environ.get("ICETIDE_BENCH_EVENT_LOG")  # Spark's event log: each job's and stage's times
    if events:
        Path(events).mkdir(parents=True, exist_ok=True)
        conf.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": Path(events).as_uri(),
                     "spark.eventLog.compress": "false",
                     "spark.app.name": name})
    return conf


def one_jvm() -> bool:
    """``ICETIDE_BENCH_ONE_JVM=1``: a benchmark's workers run one after another in its own process (one
    JVM; each worker starts its SparkContext and stops it, as in its own process) instead of each in a
    fresh JVM. For the test suite's tiny runs, whose figures mean nothing and whose point is that every
    worker's code runs; never for a measurement (a warm JVM would flatter the systems that run later)."""
    return os.environ.get(ONE_JVM_ENV) == "1"


def stop_active_session() -> None:
    """Stop this process's SparkSession, if any (the next session then starts its own SparkContext in
    the same JVM, with its own catalog settings)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def scratch_session(name: str, namespace: str) -> tuple[Any, Path]:
    """A local[2] Spark session on a fresh embedded catalog (Iceberg JDBC on SQLite) under
    ``~/.cache/icetide/bench/<name>-<id>``, with ``namespace`` created; returns it and that folder."""
    import uuid

    import yaml

    from icetide import paths
    from icetide.config import load_config
    from icetide.spark import build_session

    work = paths.home() / "bench" / f"{name}-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    cfg = {"name": name, "source": {"bootstrap_servers": "localhost:9092", "topics": ["unused"]},
           "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 'catalog.db'}",
                       "warehouse": str(work / "warehouse")},
           "target": {"table": f"{namespace}.unused"}, "stream": {"checkpoint_location": str(work / "checkpoint")},
           "spark": {"master": "local[2]"}}
    (work / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    spark = build_session(load_config(work / f"{name}.yaml"))
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS icetide.{namespace}")
    return spark, work


class BatchPhases(logging.Handler):
    """Keeps each batch event's phase timings (seconds per phase, see BatchResult.timings)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.batches: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith('{"event": "batch"'):
            e = json.loads(text)
            self.batches.append({"batch": e["batch"], "records": e["records"], "seconds": e["seconds"],
                                 "timings": e["timings"]})
