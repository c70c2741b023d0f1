"""The Kafka side: reachability, partition discovery, the streaming reader."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from icetide import secrets
from icetide.config.source import KafkaSource
from icetide.errors import ServiceUnreachableError, TransientError
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


def starting_offsets_json(src: KafkaSource, resume: dict[TopicPartition, int],
                          written: dict[TopicPartition, int] | None = None) -> tuple[str, Lost]:
    """Spark's ``startingOffsets`` JSON for a pipeline that has run before: its resume points, and
    the earliest offset elsewhere.

    Spark requires every partition of every subscribed topic to be listed once specific offsets
    are given. A partition without a resume point has never been read by the pipeline, so all of
    it is new: a partition added to a topic it read starts at offset 0 (what retention deleted of
    it is a reported gap), one of a topic a pattern matches now at its earliest offset.
    ``source.starting_offsets`` applies only to a pipeline's very first start (and Spark itself
    starts partitions it discovers while running at their earliest offset).

    Also returns what retention deleted that the pipeline had not written (the caller reports it,
    or stops): above ``written`` (per partition, the highest offset any table holds; default the
    resume point, which may lie below it to finish a partial batch).
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
    upto = {tp: max(r, (written or {}).get(tp, r)) for tp, r in resume.items()}
    gone = {tp: (upto[tp], lo) for tp, lo in sorted(low.items()) if lo > upto[tp]}
    return json.dumps(out, sort_keys=True), gone


def low_watermarks(src: KafkaSource, tps: list[TopicPartition], timeout: float = 10) -> dict[TopicPartition, int]:
    """Oldest offset Kafka still retains, per partition."""
    return _watermarks(src, tps, 0, timeout)


def high_watermarks(src: KafkaSource, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Next offset Kafka will assign, per partition."""
    return _watermarks(src, tps, 1)


def lost_ranges(ranges: BatchRanges, low: dict[TopicPartition, int], read: set[TopicPartition] | None = None
                ) -> Lost:
    """Per partition, the part of a batch's planned range Kafka no longer holds: [start, oldest
    retained) cut at the range's end (retention deleted it before the pipeline read it). Only the
    partitions of ``read`` (None: all), those the query had a position in before this batch: a
    partition new to the query (added, or of a topic a pattern matches now) starts at its oldest
    retained record, and what retention deleted of it before was never the pipeline's to read."""
    out = {}
    for tp, (start, end) in sorted(ranges.ranges.items()):
        if read is not None and tp not in read:
            continue
        lo = low.get(tp)
        if lo is not None and end > start and lo > start:
            out[tp] = (start, min(lo, end))
    return out


def above(lost: Lost, held: dict[TopicPartition, int]) -> Lost:
    """``lost`` without what the tables already hold (``held``: per partition, the highest offset
    any table of the pipeline holds)."""
    out = {}
    for tp, (a, b) in sorted(lost.items()):
        start = max(a, held.get(tp, a))
        if b > start:
            out[tp] = (start, b)
    return out


def scan_ranges(parsed: DataFrame) -> BatchRanges:
    """Offsets per partition by scanning the batch (fallback when the offset log is unreadable)."""
    from pyspark.sql import functions as F

    rows = parsed.groupBy("_kafka_topic", "_kafka_partition").agg(
        F.min("_kafka_offset").alias("lo"), F.max("_kafka_offset").alias("hi")).collect()
    return BatchRanges({(r["_kafka_topic"], int(r["_kafka_partition"])): (int(r["lo"]), int(r["hi"]) + 1)
                        for r in rows})


def beyond(lost: Lost, reported: Lost) -> Lost:
    """What of ``lost`` is not already in ``reported`` (both per partition, [start, end))."""
    return above(lost, {tp: b for tp, (_, b) in reported.items()})


def describe_lost(lost: dict[TopicPartition, tuple[int, int]]) -> str:
    return ", ".join(f"{t}[{p}] offsets {a}-{b - 1} ({b - a} records)" for (t, p), (a, b) in sorted(lost.items()))


class RetentionRace(TransientError):
    """Kafka deleted records of a batch's range while the batch read them (after its probe), before
    any of its commits began: the batch is replayed, and its probe then reports exactly what is gone."""

    replays_batch = True  # not a commit conflict: retrying the commit would not help


def add_lost(lost: Lost, new: Lost) -> None:
    """Extend ``lost`` by ``new`` in place (a range that continues a reported one joins it)."""
    for tp, (a, b) in new.items():
        lost[tp] = (lost[tp][0], max(b, lost[tp][1])) if tp in lost else (a, b)


class Recheck:
    """Right before each commit of one batch (:attr:`icetide.ingest.ledger.Ledger.before_commit`):
    what Kafka deleted of the batch's range since its probe, beyond what was reported. Spark's reader
    skips what is gone (``on_data_loss: continue``), so without this a deletion racing the read would
    go unreported. While no commit of the batch has begun, and once per batch, a race raises
    :class:`RetentionRace` (replay: the replay's probe reports it exactly), and every later commit of
    the batch raises too, so none lands; after a commit began, the new range is added to ``lost``
    (some of it may have been read before it was deleted: reported all the same, never silently).
    Commits of one batch run in parallel threads: one lock orders them."""

    def __init__(self, probe: RetentionProbe, ranges: BatchRanges, read: set[TopicPartition] | None, lost: Lost,
                 held: Callable[[], dict[TopicPartition, int]], may_replay: bool) -> None:
        self.probe, self.ranges, self.read, self.lost, self.held = probe, ranges, read, lost, held
        self.may_replay, self.started, self.raced = may_replay, 0, False
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            if self.raced:
                raise RetentionRace("a commit of this batch found records Kafka deleted while it read them")
            new = beyond(self.probe.lost(self.ranges, self.read), self.lost)
            if new and self.started == 0 and self.may_replay:
                new = above(new, self.held())  # what the tables held before this batch was never lost
                if new:
                    self.raced = True
                    raise RetentionRace(f"Kafka deleted records of this batch while it read them "
                                        f"({describe_lost(new)}): replaying the batch, which reports what is gone")
            if new:
                log.warning("Kafka deleted records of the batch while its commits were landing; reported as lost: "
                            "%s", describe_lost(new))
                add_lost(self.lost, new)
            self.started += 1


class RetentionProbe:
    """The oldest offset Kafka retains per partition, from one admin client kept for the run (one
    ``ListOffsets`` request for all of a batch's partitions: a batch asks before it reads, and again
    before each commit, :func:`recheck`)."""

    def __init__(self, src: KafkaSource) -> None:
        self.src = src
        self._admin: Any = None

    def lost(self, ranges: BatchRanges, read: set[TopicPartition] | None = None) -> Lost:
        """What of ``ranges`` Kafka no longer holds (empty when it could not be asked); ``read``: see
        :func:`lost_ranges`."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        tps = [tp for tp, (start, end) in ranges.ranges.items() if end > start and (read is None or tp in read)]
        if not tps:
            return {}
        try:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient({**client_conf(self.src), "log_level": 0})
            asked = self._admin.list_offsets({KafkaTopicPartition(t, p): OffsetSpec.earliest() for t, p in tps},
                                             request_timeout=10)
            low = {(k.topic, k.partition): int(f.result(15).offset) for k, f in asked.items()}
        except Exception:  # the read itself will tell; a probe never fails a batch
            self.close()
            return {}
        return lost_ranges(ranges, low, read)

    def close(self) -> None:
        self._admin = None  # an AdminClient has no close(): dropping it stops its threads


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


def read_stream(spark: SparkSession, src: KafkaSource, starting_offsets: str,
                headers: bool = False) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", src.bootstrap_servers)
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
