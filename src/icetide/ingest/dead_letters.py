"""Listing and replaying dead letters.

A replay produces each dead letter's original key, value and headers again, to its original topic
(or ``to_topic``), so it flows through routing, evolution and parsing with the fixed config like
any new record. Replays are recorded in ``dead_letter.replay_log_table`` (append-only: the
dead-letter table itself is never rewritten while the stream appends to it); a dead letter is
pending until a replay of it is recorded. The record is written after Kafka acknowledged every
message, so a crash in between replays those letters again on the next run (at least once, never
lost).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from icetide.config.base import STREAMING_TABLE_DEFAULTS
from icetide.config.models import PipelineConfig
from icetide.identifiers import validate_pipeline, validate_topic
from icetide.ingest.source import client_conf
from icetide.lake.meta import MetaReader
from icetide.lake.readers import as_reader
from icetide.lake.tables import ensure_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPLAY_SCHEMA = StructType([
    StructField("_kafka_topic", StringType()), StructField("_kafka_partition", IntegerType()),
    StructField("_kafka_offset", LongType()), StructField("replay_id", StringType()),
    StructField("to_topic", StringType()), StructField("replayed_at", TimestampType()),
])
KEYS = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]


@dataclass
class Filters:
    error_class: str | None = None
    topic: str | None = None
    target_table: str | None = None
    include_replayed: bool = False

    def condition(self) -> Column:
        cond = F.lit(True)
        if self.error_class:
            cond = cond & (F.col("error_class") == F.lit(self.error_class))
        if self.topic:
            cond = cond & (F.col("_kafka_topic") == F.lit(self.topic))
        if self.target_table:
            cond = cond & (F.col("target_table") == F.lit(self.target_table))
        return cond

    def matches(self, row: dict[str, Any]) -> bool:
        """:meth:`condition` on a row read by a :class:`~icetide.lake.meta.MetaReader`."""
        return ((not self.error_class or row["error_class"] == self.error_class)
                and (not self.topic or row["_kafka_topic"] == self.topic)
                and (not self.target_table or row["target_table"] == self.target_table))


@dataclass
class Listing:
    table: str
    total: int = 0
    pending: int = 0
    groups: list[dict[str, Any]] = field(default_factory=list)


def _tables(cfg: PipelineConfig) -> tuple[str, str]:
    cat = cfg.catalog.name
    return f"{cat}.{cfg.dead_letter.table}", f"{cat}.{cfg.dead_letter.replay_log()}"


def pending(spark: SparkSession, cfg: PipelineConfig, filters: Filters) -> DataFrame | None:
    """Dead letters of this pipeline matching ``filters`` (not yet replayed unless asked)."""
    dlq, log = _tables(cfg)
    if not table_exists(spark, dlq):
        return None
    rows = spark.table(dlq).where((F.col("pipeline") == F.lit(validate_pipeline(cfg.name))) & filters.condition())
    if not filters.include_replayed and table_exists(spark, log):
        rows = rows.join(spark.table(log).select(*KEYS).distinct(), KEYS, "left_anti")
    return rows


def list_groups(source: MetaReader | SparkSession, cfg: PipelineConfig, filters: Filters) -> Listing:
    """Dead letters of this pipeline by class, topic and target: counts, pending, first/last, an example."""
    reader = as_reader(cfg, source)
    dlq, log = cfg.dead_letter.table, cfg.dead_letter.replay_log()
    out = Listing(f"{reader.catalog}.{dlq}")
    if not reader.exists(dlq):
        return out
    replayed = ({(r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) for r in reader.rows(log, KEYS)}
                if reader.exists(log) else set())
    pipeline = validate_pipeline(cfg.name)
    groups: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for r in reader.rows(dlq, ["pipeline", "error_class", "_kafka_topic", "target_table", "dead_lettered_at",
                               "error_message", "_kafka_partition", "_kafka_offset"]):
        if r["pipeline"] != pipeline or not filters.matches(r):
            continue
        g = groups.setdefault((r["error_class"], r["_kafka_topic"], r["target_table"]), {
            "count": 0, "pending": 0, "first": r["dead_lettered_at"], "last": r["dead_lettered_at"],
            "example": r["error_message"]})
        g["count"] += 1
        g["pending"] += (r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) not in replayed
        at = r["dead_lettered_at"]
        if at is not None:
            if g["first"] is None or at < g["first"]:
                g["first"], g["example"] = at, r["error_message"]
            g["last"] = at if g["last"] is None or at > g["last"] else g["last"]
    for key, g in sorted(groups.items(), key=lambda kv: (-kv[1]["count"], str(kv[0]))):
        out.groups.append({
            "error_class": key[0], "topic": key[1], "target_table": key[2], "count": g["count"],
            "pending": g["count"] if filters.include_replayed else g["pending"],
            "first": _when(g["first"]), "last": _when(g["last"]), "example_message": g["example"],
        })
    out.total = sum(g["count"] for g in out.groups)
    out.pending = sum(g["pending"] for g in out.groups)
    return out


def find(source: MetaReader | SparkSession, cfg: PipelineConfig, filters: Filters, partition: int | None = None,
         offset: int | None = None) -> dict[str, Any] | None:
    """The oldest dead letter of this pipeline matching ``filters`` (and the Kafka ``partition`` and
    ``offset`` when given): coordinates, class, message, key, headers and raw value; None if none."""
    reader = as_reader(cfg, source)
    dlq = cfg.dead_letter.table
    if not reader.exists(dlq):
        return None
    pipeline = validate_pipeline(cfg.name)
    found = [r for r in reader.rows(dlq, ["pipeline", "error_class", "error_message", "target_table",
                                          "dead_lettered_at", *KEYS, "_kafka_timestamp", "_kafka_key", "value",
                                          "_kafka_headers"])
             if r["pipeline"] == pipeline and filters.matches(r)
             and (partition is None or r["_kafka_partition"] == partition)
             and (offset is None or r["_kafka_offset"] == offset)]
    if not found:
        return None
    r = min(found, key=lambda x: (x["dead_lettered_at"] is None, x["dead_lettered_at"] or 0, x["_kafka_offset"]))
    return {**r, "dead_lettered_at": _when(r["dead_lettered_at"]), "matching": len(found),
            "_kafka_headers": [(h["key"], h["value"]) for h in (r["_kafka_headers"] or [])]}


def _when(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at is not None else "-"


def replay(spark: SparkSession, cfg: PipelineConfig, filters: Filters, dry_run: bool = False,
           to_topic: str | None = None) -> dict[str, Any]:
    """Produce pending dead letters again; record the replay. Returns counts and the replay id."""
    from confluent_kafka import Producer

    if to_topic is not None:
        validate_topic(to_topic)
    rows = pending(spark, cfg, filters)
    if rows is None:
        return {"records": 0, "replayed": 0, "dry_run": dry_run}
    rows = rows.select(*KEYS, "_kafka_key", "value", "_kafka_headers").persist()
    try:
        n = rows.count()
        if dry_run or n == 0:
            return {"records": n, "replayed": 0, "dry_run": dry_run}
        errors: list[str] = []
        producer = Producer({**client_conf(cfg.source), "enable.idempotence": True, "linger.ms": 20,
                             "message.max.bytes": max(cfg.source.max_value_bytes * 2, 1_000_000)})

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        sent = 0
        for r in rows.toLocalIterator():
            headers: list[tuple[str, str | bytes | None]] = [
                (str(h["key"]), bytes(h["value"]) if h["value"] is not None else None)
                for h in (r["_kafka_headers"] or [])]
            value = bytes(r["value"]) if r["value"] is not None else None
            key = bytes(r["_kafka_key"]) if r["_kafka_key"] is not None else None
            while True:
                try:
                    producer.produce(to_topic or r["_kafka_topic"], value=value, key=key, headers=headers or None,
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            sent += 1
            producer.poll(0)
        left = producer.flush(120)
        if left or errors:
            raise RuntimeError(f"replay incomplete: {left} undelivered, errors: {errors[:3]}; nothing was "
                               "recorded as replayed, run the replay again")
        replay_id = uuid.uuid4().hex[:12]
        _, log = _tables(cfg)
        ensure_table(spark, cfg.catalog.name, cfg.dead_letter.replay_log(), REPLAY_SCHEMA, [],
                     {**STREAMING_TABLE_DEFAULTS})
        now = datetime.now(UTC).replace(tzinfo=None)
        (rows.select(*KEYS).withColumn("replay_id", F.lit(replay_id))
         .withColumn("to_topic", F.coalesce(F.lit(to_topic), F.col("_kafka_topic")))
         .withColumn("replayed_at", F.lit(now)).writeTo(log).append())
        return {"records": n, "replayed": sent, "replay_id": replay_id, "dry_run": False,
                "to_topic": to_topic or "original topics"}
    finally:
        rows.unpersist()
