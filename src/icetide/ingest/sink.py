"""The ``foreachBatch`` writer: decode, route, dedupe against each table's watermark, commit.

One micro-batch commits each table at most once, tagged with the pipeline, run, batch and offsets
(see :mod:`icetide.ingest.offsets`). A replayed batch is filtered per table against the watermark
the table already holds, so it can never land twice, including after a crash between two tables'
commits.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import Column, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import StructType, _parse_datatype_string

from icetide.config.models import COLUMN_RE, PipelineConfig
from icetide.errors import ConfigError
from icetide.ingest import checkpoint, decode
from icetide.ingest.offsets import (
    PROPERTY_PREFIX,
    BatchRanges,
    Watermark,
    commit_properties,
    read_watermark,
)
from icetide.ingest.tables import ensure_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
_SAFE_PROPERTY_VALUE = frozenset('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-{}[]:," ')


@dataclass
class BatchResult:
    batch: int
    records: int
    written: dict[str, int]
    dead_letters: int
    skipped: list[str]
    seconds: float
    kafka_ts_max: int | None

    def as_event(self, pipeline: str) -> dict[str, object]:
        return {"event": "batch", "pipeline": pipeline, "batch": self.batch, "records": self.records,
                "written": self.written, "dead_letters": self.dead_letters,
                "skipped_replayed": self.skipped, "seconds": round(self.seconds, 3)}


@dataclass
class PipelineCounters:
    """Totals since the process started (exported as metrics, shown on shutdown)."""

    batches: int = 0
    records: int = 0
    written: int = 0
    dead_letters: int = 0
    last: BatchResult | None = None
    per_table: dict[str, int] = field(default_factory=dict)

    def add(self, r: BatchResult) -> None:
        self.batches += 1
        self.records += r.records
        self.written += sum(v for k, v in r.written.items())
        self.dead_letters += r.dead_letters
        for k, v in r.written.items():
            self.per_table[k] = self.per_table.get(k, 0) + v
        self.last = r


class BatchWriter:
    """Callable passed to ``DataStreamWriter.foreachBatch``."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, run_id: str,
                 on_commit: Callable[[str, Watermark], None] | None = None) -> None:
        self.spark = spark
        self.cfg = cfg
        self.run_id = run_id
        cat = cfg.catalog.name
        self.target = f"{cat}.{cfg.target.table}"
        self.dead_letter_table = f"{cat}.{cfg.dead_letter.table}"
        self.schema: StructType | None = None
        self._watermarks: dict[str, Watermark | None] = {}
        self.counters = PipelineCounters()
        self.on_commit = on_commit
        #: When the batch being written started (epoch ms), None between batches: orphan cleanup
        #: never considers files younger than this.
        self.in_flight_since_ms: int | None = None

    # -- schema -----------------------------------------------------------------------------
    def resolve_schema(self, kafka_rows: DataFrame) -> StructType:
        if self.schema is not None:
            return self.schema
        t = self.cfg.target
        if table_exists(self.spark, self.target):
            full = self.spark.table(self.target).schema
            schema = StructType([f for f in full.fields if f.name not in decode.KAFKA_COLUMNS])
        elif t.schema_ddl:
            try:
                parsed = _parse_datatype_string(t.schema_ddl)
            except Exception as e:
                raise ConfigError(f"target.schema: not a valid Spark DDL schema: {e}") from None
            if not isinstance(parsed, StructType):
                raise ConfigError("target.schema: must be a list of columns like 'id STRING, ts TIMESTAMP'")
            schema = parsed
        else:
            schema = self._infer(kafka_rows)
        for f in schema.fields:
            if not COLUMN_RE.fullmatch(f.name) or f.name.startswith("_kafka_"):
                raise ConfigError(
                    f"target.schema: column {f.name[:64]!r} is not allowed (use A-Z a-z 0-9 _, not "
                    "starting with _kafka_); give target.schema explicitly"
                )
        kafka_cols = decode.good_rows(
            decode.parse(kafka_rows.limit(0), schema, 1), schema, self.cfg.target.kafka_metadata_columns
        ).schema
        ensure_table(self.spark, self.cfg.catalog.name, self.cfg.target.table, kafka_cols,
                     t.partition_by, t.table_properties())
        ensure_table(self.spark, self.cfg.catalog.name, self.cfg.dead_letter.table,
                     decode.DEAD_LETTER_SCHEMA, ["days(_kafka_timestamp)"], t.table_properties())
        self.schema = schema
        return schema

    def _infer(self, kafka_rows: DataFrame) -> StructType:
        """Infer the schema from up to 10,000 records of the first batch (JVM JSON inference)."""
        sample = kafka_rows.where(F.col("value").isNotNull()).select(F.col("value").cast("string")).limit(10_000)
        jvm = self.spark._jvm
        assert jvm is not None
        strings = getattr(sample._jdf, "as")(jvm.org.apache.spark.sql.Encoders.STRING())
        jschema = (self.spark._jsparkSession.read().option("inferTimestamp", "true")
                   .option("mode", "DROPMALFORMED").json(strings).schema())
        schema = StructType.fromJson(json.loads(jschema.json()))
        schema = StructType([f for f in schema.fields if f.name != "_corrupt_record"])
        if not schema.fields:
            raise ConfigError("target.schema: no JSON object found in the first batch to infer a schema "
                              "from; set target.schema")
        log.info("inferred schema for %s: %s", self.target, schema.simpleString())
        return schema

    # -- watermarks -------------------------------------------------------------------------
    def watermark(self, table: str) -> Watermark | None:
        if table not in self._watermarks:
            self._watermarks[table] = (
                read_watermark(self.spark, table, self.cfg.name) if table_exists(self.spark, table) else None
            )
        return self._watermarks[table]

    def forget_watermarks(self) -> None:
        """Re-read watermarks from the tables on next use (after a failed or unknown commit)."""
        self._watermarks.clear()

    # -- the batch --------------------------------------------------------------------------
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        self.in_flight_since_ms = int(time.time() * 1000)
        try:
            result = self._process(df, batch_id, started)
        except BaseException:
            self.forget_watermarks()
            raise
        finally:
            self.in_flight_since_ms = None
        if result is not None:
            self.counters.add(result)
            log.info(json.dumps(result.as_event(self.cfg.name)))

    def _process(self, df: DataFrame, batch_id: int, started: float) -> BatchResult | None:
        kafka_rows = decode.with_kafka_columns(df)
        schema = self.resolve_schema(kafka_rows)
        parsed = decode.parse(kafka_rows, schema, self.cfg.source.max_value_bytes)
        ranges = self._ranges(batch_id, parsed)
        if not ranges.ranges:
            return None
        meta = self.cfg.target.kafka_metadata_columns
        good, bad = decode.is_good(), ~decode.is_good()
        # One pass for the common case: the target write also counts good and bad records.
        stats = Observation(f"icetide_{batch_id}_{uuid.uuid4().hex[:8]}")
        observed = parsed.observe(
            stats,
            F.count_if(good).alias("good"), F.count_if(bad).alias("bad"),
            F.max(F.unix_millis("_kafka_timestamp")).alias("ts_max"),
        )
        written: dict[str, int] = {}
        skipped: list[str] = []
        n = self._commit(self.target, observed.where(good), lambda d: decode.good_rows(d, schema, meta),
                         batch_id, ranges, stats)
        if n is None:
            skipped.append(self.target)
            counts = parsed.agg(F.count_if(good).alias("good"), F.count_if(bad).alias("bad"),
                                F.max(F.unix_millis("_kafka_timestamp")).alias("ts_max")).first()
            totals = counts.asDict() if counts is not None else {"good": 0, "bad": 0, "ts_max": None}
        else:
            written[self.target] = n
            totals = stats.get
        dead = 0
        if totals["bad"]:
            # Recomputes the batch from Kafka; only batches that hold bad records pay for it.
            d = self._commit(self.dead_letter_table, parsed.where(bad),
                             lambda x: decode.dead_letter_rows(x, self.cfg.name, self.cfg.target.table),
                             batch_id, ranges)
            if d is None:
                skipped.append(self.dead_letter_table)
            else:
                dead = d
        return BatchResult(batch_id, int(totals["good"] or 0) + int(totals["bad"] or 0), written, dead,
                           skipped, time.monotonic() - started, totals["ts_max"])

    def _ranges(self, batch_id: int, parsed: DataFrame) -> BatchRanges:
        """The batch's offsets from Spark's offset log; a scan of the batch only as a fallback."""
        location = self.cfg.checkpoint_dir()
        offsets = checkpoint.batch_offsets(self.spark, location, batch_id)
        if offsets is None:
            log.warning("offset log of batch %s not readable in %s; scanning the batch", batch_id, location)
            return _scan_ranges(parsed)
        planned = checkpoint.batch_time_ms(self.spark, location, batch_id)
        return BatchRanges(offsets, planned_at_ms=planned)

    def _commit(self, table: str, rows: DataFrame, project: Callable[[DataFrame], DataFrame],
                batch_id: int, ranges: BatchRanges, stats: Observation | None = None) -> int | None:
        """Append the rows not yet in ``table``; None if the table already holds the whole batch."""
        wm = self.watermark(table)
        if wm is not None and wm.covers(ranges):
            log.info("batch %s already in %s (watermark %s); skipped", batch_id, table, wm.encode())
            return None
        if wm is not None:
            keep = _not_below(wm, ranges)
            if keep is not None:
                rows = rows.where(keep)
        new = Watermark(offsets=(wm or Watermark()).advanced(ranges), run=self.run_id, batch=batch_id,
                        batch_ranges=ranges, committed_at_ms=int(time.time() * 1000))
        counted = Observation(f"icetide_{batch_id}_{uuid.uuid4().hex[:8]}")
        log.info("committing batch %s to %s", batch_id, table)
        writer = project(rows).observe(counted, F.count(F.lit(1)).alias("n")).writeTo(table)
        for k, v in commit_properties(self.cfg.name, self.run_id, batch_id, ranges, new.offsets).items():
            writer = writer.option(f"snapshot-property.{k}", v)
        writer.append()
        new.committed_at_ms = int(time.time() * 1000)
        if stats is not None:  # filled in by the write that just finished
            ts = stats.get.get("ts_max")
            new.kafka_ts_max = int(ts) if ts is not None else None
        self._watermarks[table] = new
        self._mirror(table, new)
        if self.on_commit is not None:
            self.on_commit(table, new)
        return int(counted.get["n"])

    def _mirror(self, table: str, wm: Watermark) -> None:
        """Copy the watermark into a table property so it outlives snapshot expiry."""
        value = wm.to_property()
        if not set(value) <= _SAFE_PROPERTY_VALUE:
            raise ValueError(f"refusing to write an unexpected watermark value: {value[:200]}")
        self.spark.sql(
            f"ALTER TABLE {table} SET TBLPROPERTIES ('{PROPERTY_PREFIX}{self.cfg.name}' = '{value}')"
        )


def _scan_ranges(parsed: DataFrame) -> BatchRanges:
    """Offsets per partition by scanning the batch (fallback when the offset log is unreadable)."""
    rows = parsed.groupBy("_kafka_topic", "_kafka_partition").agg(
        F.min("_kafka_offset").alias("lo"), F.max("_kafka_offset").alias("hi")).collect()
    return BatchRanges({(r["_kafka_topic"], int(r["_kafka_partition"])): (int(r["lo"]), int(r["hi"]) + 1)
                        for r in rows})


def _not_below(wm: Watermark, ranges: BatchRanges) -> Column | None:
    """Keep only rows at or above the table's watermark (None: keep everything)."""
    below = [
        (F.col("_kafka_topic") == F.lit(t)) & (F.col("_kafka_partition") == F.lit(p))
        & (F.col("_kafka_offset") < F.lit(wm.get((t, p))))
        for (t, p), (start, _) in ranges.ranges.items()
        if wm.get((t, p)) > start
    ]
    if not below:
        return None
    return ~reduce(lambda a, b: a | b, below)
