"""The Kafka side: reachability, partition discovery, the streaming reader."""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

from icetide import secrets
from icetide.config.source import KafkaSource
from icetide.errors import ServiceUnreachableError
from icetide.lake.offsets import BatchRanges, TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


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


def id_text(uuid: object) -> str:
    """A Kafka topic id as Kafka's own tools print it (URL-safe base64; librdkafka prints the standard
    alphabet, whose ``+`` and ``/`` no table property may hold); "" for none or Uuid.ZERO (unknown)."""
    text = str(uuid).replace("+", "-").replace("/", "_") if uuid is not None else ""
    return "" if text == "AAAAAAAAAAAAAAAAAAAAAA" else text


def topic_ids(src: KafkaSource, topics: list[str], timeout: float = 10.0) -> dict[str, str]:
    """Kafka's id of each topic (URL-safe base64, as Kafka prints it), where the broker tells it; one request.
    A topic deleted and created again under its name gets a new id."""
    if not topics:
        return {}
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**client_conf(src), "log_level": 0})
    out = {}
    for topic, future in admin.describe_topics(TopicCollection(sorted(topics)), request_timeout=timeout).items():
        try:
            desc = future.result(timeout)
        except Exception:  # deleted meanwhile, not authorized, a broker without topic ids
            continue
        text = id_text(desc.topic_id)
        if text:
            out[topic] = text
    return out


def end_offsets(src: KafkaSource, tps: list[TopicPartition], timeout: float = 10.0) -> dict[TopicPartition, int]:
    """Next offset Kafka will assign, per partition, in one request (one per partition as a fallback)."""
    if not tps:
        return {}
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

    try:
        admin = AdminClient({**client_conf(src), "log_level": 0})
        futures = admin.list_offsets({KafkaTopicPartition(t, p): OffsetSpec.latest() for t, p in tps},
                                     request_timeout=timeout)
        return {(k.topic, k.partition): int(f.result(timeout).offset) for k, f in futures.items()}
    except Exception:
        return _watermarks(src, tps, 1, timeout)


def topic_names(src: KafkaSource, timeout: float = 10.0) -> list[str]:
    """Every topic the broker has (for a "did you mean" when a configured one is missing)."""
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {**client_conf(src), "log_level": 0}
    return sorted(AdminClient(conf).list_topics(timeout=timeout).topics)


Lost = dict[TopicPartition, tuple[int, int]]


def starting_offsets_json(src: KafkaSource, resume: dict[TopicPartition, int]) -> tuple[str, Lost]:
    """Spark's ``startingOffsets`` JSON for a pipeline that has run before: its resume points, and
    the earliest offset elsewhere.

    Spark requires every partition of every subscribed topic to be listed once specific offsets
    are given. A partition without a resume point has never been read by the pipeline, so all of
    it is new: a partition added to a topic it read starts at offset 0 (what retention deleted of
    it is a reported gap), one of a topic a pattern matches now at its earliest offset.
    ``source.starting_offsets`` applies only to a pipeline's very first start (and Spark itself
    starts partitions it discovers while running at their earliest offset).

    Also returns what retention deleted above the resume points (the caller parts it by what the
    tables hold, :func:`icetide.ingest.retention.split_lost`, and reports it, or stops): a resume
    point may lie below what some tables hold, to finish a batch a crash left partial.
    """
    default = -2
    parts = list_partitions(src)
    known = {t for t, _ in resume}  # a partition added to a topic read before is read from offset 0
    resume = {**{(t, p): 0 for t, ps in parts.items() if t in known for p in ps}, **resume}
    low = low_watermarks(src, [(t, p) for t, ps in parts.items() for p in ps if (t, p) in resume])
    out: dict[str, dict[str, int]] = {}
    for topic, ps in parts.items():
        # A resume point older than what Kafka still retains starts at the oldest retained offset
        # (Spark would otherwise fail the query with failOnDataLoss).
        out[topic] = {str(p): max(resume[(topic, p)], low[(topic, p)]) if (topic, p) in resume else default
                      for p in ps}
    gone = {tp: (resume[tp], lo) for tp, lo in sorted(low.items()) if lo > resume[tp]}
    return json.dumps(out, sort_keys=True), gone


def low_watermarks(src: KafkaSource, tps: list[TopicPartition], timeout: float = 10) -> dict[TopicPartition, int]:
    """Oldest offset Kafka still retains, per partition."""
    return _watermarks(src, tps, 0, timeout)


def high_watermarks(src: KafkaSource, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Next offset Kafka will assign, per partition."""
    return _watermarks(src, tps, 1)


def scan_ranges(parsed: DataFrame) -> BatchRanges:
    """Offsets per partition by scanning the batch (fallback when the offset log is unreadable)."""
    from pyspark.sql import functions as F

    rows = parsed.groupBy("_kafka_topic", "_kafka_partition").agg(
        F.min("_kafka_offset").alias("lo"), F.max("_kafka_offset").alias("hi")).collect()
    return BatchRanges({(r["_kafka_topic"], int(r["_kafka_partition"])): (int(r["lo"]), int(r["hi"]) + 1)
                        for r in rows})


def _watermarks(src: KafkaSource, tps: list[TopicPartition], which: int, timeout: float = 10
                ) -> dict[TopicPartition, int]:
    if not tps:
        return {}
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    c = Consumer({**client_conf(src), "group.id": "icetide-offset-probe", "log_level": 0,
                  "enable.auto.commit": False})
    try:
        return {(t, p): int(c.get_watermark_offsets(KafkaTopicPartition(t, p), timeout=timeout)[which])
                for t, p in tps}
    finally:
        c.close()


#: Kafka's ``fetch.max.wait.ms`` unless ``source.options`` sets it. Spark reads bounded offset
#: ranges, so a fetch the broker holds waiting for more data (the consumer's prefetch past the end of
#: the log) only delays the task: at Kafka's default, 500 ms per partition a task reads to the log's
#: end (measured: a CDC batch of 25,000 changes read in 2.3 s, 0.6 s at 20 ms).
FETCH_MAX_WAIT_MS = "50"


def kafka_options(src: KafkaSource) -> dict[str, str]:
    """Spark's Kafka source options that reach the brokers (the stream's and discovery's reads)."""
    return {"kafka.bootstrap.servers": src.bootstrap_servers, "kafka.fetch.max.wait.ms": FETCH_MAX_WAIT_MS,
            **{f"kafka.{k}": v for k, v in src.options.items()}}


def read_stream(spark: SparkSession, src: KafkaSource, starting_offsets: str,
                headers: bool = False) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka_options(src))
        .option("startingOffsets", starting_offsets)
        # 'continue': Spark skips what retention deleted and the sink reports it (RetentionProbe)
        .option("failOnDataLoss", "true" if src.on_data_loss == "stop" else "false")
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
