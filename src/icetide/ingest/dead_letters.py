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


def list_groups(spark: SparkSession, cfg: PipelineConfig, filters: Filters) -> Listing:
    dlq, _log = _tables(cfg)
    out = Listing(dlq)
    everything = pending(spark, cfg, Filters(filters.error_class, filters.topic, filters.target_table, True))
    if everything is None:
        return out
    waiting = pending(spark, cfg, Filters(filters.error_class, filters.topic, filters.target_table, False))
    assert waiting is not None
    totals = {(r[0], r[1], r[2]): r for r in everything.groupBy("error_class", "_kafka_topic", "target_table").agg(
        F.count(F.lit(1)).alias("n"), F.min("dead_lettered_at").alias("first"),
        F.max("dead_lettered_at").alias("last"), F.first("error_message").alias("example")).collect()}
    open_ = {(r[0], r[1], r[2]): int(r[3]) for r in waiting.groupBy(
        "error_class", "_kafka_topic", "target_table").count().collect()}
    for key, r in sorted(totals.items(), key=lambda kv: (-int(kv[1]["n"]), str(kv[0]))):
        out.groups.append({
            "error_class": key[0], "topic": key[1], "target_table": key[2], "count": int(r["n"]),
            "pending": open_.get(key, 0), "first": str(r["first"]), "last": str(r["last"]),
            "example_message": r["example"],
        })
    out.total = sum(g["count"] for g in out.groups)
    out.pending = sum(g["pending"] for g in out.groups)
    return out


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
