"""The Kafka side: reachability, partition discovery, the streaming reader."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from icetide import secrets
from icetide.config.source import KafkaSource
from icetide.errors import ServiceUnreachableError
from icetide.lake.offsets import BatchRanges, TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

def client_conf(src: KafkaSource) -> dict[str, str]:
    conf = {"bootstrap.servers": src.bootstrap_servers}
    # librdkafka understands the common security settings under the same names.
    for k, v in src.options.items():
        if k.startswith(("security.", "sasl.", "ssl.")) and "jaas" not in k:
            conf[k] = v
    return conf


def list_partitions(src: KafkaSource, timeout: float = 10.0) -> dict[str, list[int]]:
    """Topics this source reads, with their partitions; raises if Kafka is unreachable."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[str] = []
    conf: dict[str, Any] = {**client_conf(src), "error_cb": lambda e: errors.append(e.str()), "log_level": 0}
    try:
        md = AdminClient(conf).list_topics(timeout=timeout)
    except KafkaException as e:
        detail = e.args[0].str() if e.args and hasattr(e.args[0], "str") else str(e)
        raise ServiceUnreachableError(
            f"source.bootstrap_servers: cannot reach Kafka at {src.bootstrap_servers} ({detail})"
        ) from None
    if src.topics is not None:
        wanted = [t for t in src.topics]
    else:
        pattern = re.compile(src.topic_pattern or "")
        wanted = [t for t in md.topics if pattern.fullmatch(t)]
    return {t: sorted(md.topics[t].partitions) for t in wanted if t in md.topics and md.topics[t].partitions}


def starting_offsets_json(src: KafkaSource, resume: dict[TopicPartition, int]) -> str:
    """Spark's ``startingOffsets`` JSON: resume points, and the configured default elsewhere.

    Spark requires every partition of every subscribed topic to be listed once specific offsets
    are given; partitions without a resume point start at ``source.starting_offsets``.
    """
    default = -2 if src.starting_offsets == "earliest" else -1
    parts = list_partitions(src)
    low = low_watermarks(src, [(t, p) for t, ps in parts.items() for p in ps if (t, p) in resume])
    out: dict[str, dict[str, int]] = {}
    for topic, ps in parts.items():
        # A resume point older than what Kafka still retains starts at the oldest retained offset
        # (Spark would otherwise fail the query with failOnDataLoss).
        out[topic] = {str(p): max(resume[(topic, p)], low[(topic, p)]) if (topic, p) in resume else default
                      for p in ps}
    return json.dumps(out, sort_keys=True)


def low_watermarks(src: KafkaSource, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Oldest offset Kafka still retains, per partition."""
    return _watermarks(src, tps, 0)


def high_watermarks(src: KafkaSource, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Next offset Kafka will assign, per partition."""
    return _watermarks(src, tps, 1)


def _watermarks(src: KafkaSource, tps: list[TopicPartition], which: int) -> dict[TopicPartition, int]:
    if not tps:
        return {}
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    c = Consumer({**client_conf(src), "group.id": "icetide-offset-probe", "log_level": 0,
                  "enable.auto.commit": False})
    try:
        return {(t, p): int(c.get_watermark_offsets(KafkaTopicPartition(t, p), timeout=10)[which])
                for t, p in tps}
    finally:
        c.close()


def read_stream(spark: SparkSession, src: KafkaSource, starting_offsets: str,
                headers: bool = False) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", src.bootstrap_servers)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true" if headers else "false")
    )
    if src.topics is not None:
        reader = reader.option("subscribe", ",".join(src.topics))
    else:
        reader = reader.option("subscribePattern", src.topic_pattern or "")
    if src.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(src.max_offsets_per_trigger))
    if src.min_partitions:
        reader = reader.option("minPartitions", str(src.min_partitions))
    for k, v in src.options.items():
        reader = reader.option(f"kafka.{k}", v)
    return reader.load()


def batch_tasks(src: KafkaSource, ranges: BatchRanges, cores: int) -> int | None:
    """Tasks to read and write a micro-batch with: about one per ``records_per_task`` records,
    rounded up to a multiple of ``cores`` once more than one (no wave of tasks with idle cores), never
    more than the Kafka partitions that have records; None: leave Spark's one task per partition.

    Each task writes its own file to every table partition it touches, so a 10 s batch of 4,000
    records from 12 Kafka partitions would add 12 files of ~300 records to today's partition."""
    if src.records_per_task is None or src.min_partitions:
        return None
    busy, cores = sum(1 for start, end in ranges.ranges.values() if end > start), max(1, cores)
    want = max(1, -(-ranges.records() // src.records_per_task))
    if want > 1:
        want = -(-want // cores) * cores
    return want if want < busy else None


def redacted(options: dict[str, str]) -> dict[str, str]:
    """Options safe to log: secret-bearing keys masked, other values scrubbed (:mod:`icetide.secrets`)."""
    return secrets.redact_mapping(options)
