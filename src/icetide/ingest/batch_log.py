"""Per-batch figures: the batch event, the counters since start, and the rows kept in
``stream.batch_log_table``."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from icetide.config.base import STREAMING_TABLE_DEFAULTS, interval_seconds
from icetide.config.models import PipelineConfig
from icetide.config.target import TargetTable
from icetide.ingest.retention import parse_gap_key
from icetide.lake.tables import ensure_table
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

BATCH_LOG_SCHEMA = StructType([
    StructField("pipeline", StringType()), StructField("run", StringType()), StructField("batch", LongType()),
    StructField("table_name", StringType()), StructField("records_written", LongType()),
    StructField("dead_letters", LongType()), StructField("evolutions", ArrayType(StringType())),
    StructField("created", BooleanType()), StructField("dead_letter_classes", StringType()),
    StructField("batch_seconds", DoubleType()), StructField("logged_at", TimestampType()),
    # records Kafka deleted before the batch read them: {"topic[p]": [from, to)} (source.on_data_loss)
    StructField("kafka_gaps", StringType()),
])


@dataclass
class BatchResult:
    batch: int
    records: int
    written: dict[str, int]
    dead_letters: int
    skipped: list[str]
    seconds: float
    kafka_ts_max: int | None
    dead_letter_classes: dict[str, int] = field(default_factory=dict)
    evolved: dict[str, list[str]] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    inferred: list[str] = field(default_factory=list)  # tables whose records' schema was inferred
    #: Kafka tombstones (null values) skipped: on CDC tables (Debezium's marker after a delete), under
    #: route.by: record_name, and on append tables with target.on_tombstone: skip.
    tombstones_skipped: int = 0
    #: Records Kafka deleted before the batch read them (source.on_data_loss: continue): "topic[p]" → [from, to)
    lost: dict[str, list[int]] = field(default_factory=dict)
    #: Tables whose records were all dead-lettered for a reason in the config, not in the records:
    #: table → the message naming the key (e.g. a partition column the records do not have)
    config_refused: dict[str, str] = field(default_factory=dict)

    def as_event(self, pipeline: str) -> dict[str, object]:
        return {"event": "batch", "pipeline": pipeline, "batch": self.batch, "records": self.records,
                "written": self.written, "dead_letters": self.dead_letters,
                "dead_letter_classes": self.dead_letter_classes, "created": self.created,
                "evolved": self.evolved, "inferred": self.inferred, "skipped_replayed": self.skipped,
                "tombstones_skipped": self.tombstones_skipped, "lost": self.lost,
                "config_refused": self.config_refused, "seconds": round(self.seconds, 3),
                "timings": self.timings}


@dataclass
class PipelineCounters:
    """Totals since the process started (exported as metrics, shown on shutdown)."""

    batches: int = 0
    records: int = 0
    written: int = 0
    dead_letters: int = 0
    tombstones_skipped: int = 0
    #: Records Kafka deleted before the pipeline read them, and the gaps: "topic[p]" → [[from, to), ...]
    lost_records: int = 0
    #: Seconds batches waited for the schema registry (outages; Avro)
    registry_wait_s: float = 0.0
    gaps: dict[str, list[list[int]]] = field(default_factory=dict)
    last: BatchResult | None = None
    per_table: dict[str, int] = field(default_factory=dict)
    #: table → the config mistake that kept its records out (first seen), see BatchResult.config_refused
    config_mistakes: dict[str, str] = field(default_factory=dict)
    #: Topics found deleted and created again, read again from their start: topic → the evidence (#41)
    recreated: dict[str, str] = field(default_factory=dict)

    def unreported(self, lost: dict[str, list[int]]) -> list[dict[str, list[int]]]:
        """What of each gap this run has not recorded yet (a query start retried after a failure finds
        the same gap again, grown as retention goes on: each offset is counted and alerted once), as
        gaps of one range per key: a key whose new part comes in pieces gives one per piece."""
        pieces: dict[str, list[list[int]]] = {}
        for tp, (a, b) in lost.items():
            for s, e in sorted(self.gaps.get(tp, [])):
                if e <= a or s >= b:
                    continue
                if s > a:
                    pieces.setdefault(tp, []).append([a, s])
                a = max(a, e)
            if a < b:
                pieces.setdefault(tp, []).append([a, b])
        rounds: list[dict[str, list[int]]] = []
        for tp, ps in pieces.items():
            for i, piece in enumerate(ps):
                if len(rounds) <= i:
                    rounds.append({})
                rounds[i][tp] = piece
        return rounds

    def add_gaps(self, lost: dict[str, list[int]]) -> None:
        """Records Kafka deleted before the pipeline read them: "topic[p]" → [from, to). A table's
        part ("topic[p] for ns.table", see :mod:`icetide.ingest.retention`) lost only the records
        routed to that table, if any: a gap, but not a count."""
        for tp, (a, b) in lost.items():
            if parse_gap_key(tp)[1] is None:
                self.lost_records += b - a
            self.gaps.setdefault(tp, []).append([a, b])

    def add(self, r: BatchResult) -> None:
        self.batches += 1
        self.records += r.records
        self.written += sum(v for k, v in r.written.items())
        self.dead_letters += r.dead_letters
        self.tombstones_skipped += r.tombstones_skipped
        self.add_gaps(r.lost)
        for k, v in r.written.items():
            self.per_table[k] = self.per_table.get(k, 0) + v
        for t, msg in r.config_refused.items():
            self.config_mistakes.setdefault(t, msg)
        self.last = r

    def unlanded_mistakes(self) -> dict[str, str]:
        """Config mistakes of tables nothing has landed in during this run."""
        return {t: m for t, m in self.config_mistakes.items() if not self.per_table.get(t)}


class Laps:
    """Seconds per phase of one batch (``timings`` in the batch event)."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._clock = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.timings[name] = round(now - self._clock, 3)
        self._clock = now


class BatchLog:
    """The rows of ``stream.batch_log_table``: one per table written and one for the dead letters."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, run_id: str) -> None:
        self.spark = spark
        self.cfg = cfg
        self.run_id = run_id
        self._ready = False
        self._every = interval_seconds(cfg.stream.batch_log_interval)
        self._pending: list[tuple[Any, ...]] = []
        self._flushed_at = time.monotonic()
        self._lock = threading.Lock()
        self._writer: threading.Thread | None = None  # the append in flight, off the stream's thread

    def append(self, r: BatchResult) -> None:
        """Keep the batch's figures for ``stream.batch_log_table``: appended with the other batches'
        at most every ``stream.batch_log_interval``, and by :meth:`flush` (never fails the stream)."""
        table = self.cfg.stream.batch_log_table
        if not table:
            return
        now = datetime.now(UTC).replace(tzinfo=None)
        gaps = json.dumps(r.lost, sort_keys=True) if r.lost else None
        rows: list[tuple[Any, ...]] = [
            (self.cfg.name, self.run_id, r.batch, t, n, 0, r.evolved.get(t, []), t in r.created, "{}", r.seconds, now,
             gaps) for t, n in sorted(r.written.items())]
        if r.dead_letters:
            rows.append((self.cfg.name, self.run_id, r.batch, self.cfg.dead_letter.table, 0, r.dead_letters, [],
                         False, json.dumps(r.dead_letter_classes, sort_keys=True), r.seconds, now, gaps))
        if not rows and gaps:  # a batch whose whole range Kafka had deleted still leaves its record
            rows.append((self.cfg.name, self.run_id, r.batch, None, 0, 0, [], False, "{}", r.seconds, now, gaps))
        if not rows:
            return
        with self._lock:
            self._pending.extend(rows)
            due = time.monotonic() - self._flushed_at >= self._every
            if not due or (self._writer is not None and self._writer.is_alive()):
                return
            self._flushed_at = time.monotonic()
            # Off the micro-batch: its append (a Spark job and an Iceberg commit, ~1.5 s) is not the stream's time.
            self._writer = threading.Thread(target=self._write, name="icetide-batch-log", daemon=True)
            self._writer.start()

    def flush(self) -> None:
        """Append every row kept so far, after the append in flight (when the run stops)."""
        writer = self._writer
        if writer is not None:
            writer.join()
        self._write()

    def _write(self) -> None:
        table = self.cfg.stream.batch_log_table
        with self._lock:
            rows, self._pending = self._pending, []
            self._flushed_at = time.monotonic()
        if not table or not rows:
            return
        try:
            if not self._ready:  # one catalog lookup per run, not per batch
                q = ensure_table(self.spark, self.cfg.catalog.name, table, BATCH_LOG_SCHEMA, ["days(logged_at)"],
                                 {**STREAMING_TABLE_DEFAULTS})
                if "kafka_gaps" not in self.spark.table(q).columns:  # a batch log of an earlier icetide
                    self.spark.sql(f"ALTER TABLE {q} ADD COLUMN kafka_gaps STRING")
                    self.spark.catalog.refreshTable(q)
                self._ready = True
            self.spark.createDataFrame(rows, BATCH_LOG_SCHEMA).writeTo(f"{self.cfg.catalog.name}.{table}").append()
        except Exception as e:  # figures are a convenience; the data is committed
            log.warning("could not append to %s: %s", table, error_line(e, 300))


#: A batch's records of a table with a configured schema, all type mismatches, that make a config
#: mistake rather than a few bad records (BatchResult.config_refused)
SCHEMA_MISMATCH_MIN = 100


def schema_mismatches(target: TargetTable, batch: int, written: dict[str, int],
                      dead: dict[str | None, dict[str, int]]) -> dict[str, str]:
    """Tables with a configured schema that no record of this batch matched: nothing written and
    at least :data:`SCHEMA_MISMATCH_MIN` records, every one a type mismatch. That lies in the
    schema (or in every producer), not in a stray record."""
    out = {}
    for table, classes in dead.items():
        n = classes.get("type_mismatch", 0)
        if (table and not written.get(table) and n >= SCHEMA_MISMATCH_MIN and set(classes) == {"type_mismatch"}
                and target.policy_for(table).schema_ddl):
            key = "target.schema" if table == target.table else "target.schema (or target.tables)"
            out[table] = (f"{key}: no record for {table} matches it: all {n} records of batch {batch} were "
                          "dead-lettered as type_mismatch; fix the schema (or the producers)")
    return out
