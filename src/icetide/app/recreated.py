"""When a run's query starts: are its topics still the ones whose offsets were recorded? (#41)

Compares what Kafka says now (topic ids, partitions, ends) with what the checkpoint recorded (its
topic ids, its newest offsets), or without a checkpoint with what the tables recorded. A topic
deleted and created again then stops the run (``source.on_topic_recreated: stop``) before anything
is written, or (``restart``) has its old offsets set aside in every table of the pipeline and the
checkpoint set aside (renamed): the query starts from the old checkpoint's position for every other
topic, from the new topic's earliest offset for the recreated one.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from icetide.app import run_alerts
from icetide.app.resume import starting_json
from icetide.config.models import PipelineConfig
from icetide.errors import TopicRecreatedError
from icetide.ingest import recreated
from icetide.lake import checkpoint
from icetide.lake.offsets import TopicPartition, Watermark
from icetide.lake.tables import table_exists
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.ingest.sink import BatchWriter

log = logging.getLogger(__name__)


def table_watermarks(spark: SparkSession, writer: BatchWriter) -> dict[str, Watermark]:
    """Every table of the pipeline that holds its offsets (routed tables, dead letters)."""
    out = {}
    for table in (writer.q(t) for t in writer.tables()):
        if table_exists(spark, table):
            wm = writer.watermark(table)
            if wm is not None:
                out[table] = wm
    return out


def ledger_tables(cfg: PipelineConfig, writer: BatchWriter) -> list[str]:
    """Every table that may hold the pipeline's offsets (qualified), CDC tombstone tables included."""
    names = set(writer.tables())
    names |= {f"{t}_tombstones" for t in list(names) if (p := cfg.target.policy_for(t).cdc) is not None
              and p.tombstones}
    return sorted(writer.q(t) for t in names)


def at_start(spark: SparkSession, cfg: PipelineConfig, writer: BatchWriter, has_checkpoint: bool) -> str | None:
    """Arm the run's check of its topics (see :mod:`icetide.ingest.recreated`) and act on a topic
    found recreated: :class:`TopicRecreatedError` (``stop``), or set its old offsets aside in every
    table and, with a checkpoint, set the checkpoint aside and return the query's starting offsets
    (None: start as usual).

    Never unchecked: a topic Kafka does not tell about now (no answer, no id, no end) is checked by
    the first batch that reads it, which writes nothing until Kafka tells (chaos seed 4327: a start
    without an answer resumed a recreated topic at its old offsets, and Spark skipped the new
    topic's first records)."""
    topics = writer.topics
    topics.armed = False  # read what was recorded as it is
    writer.ledger.forget()
    kafka = _probe(cfg)
    ckpt = cfg.checkpoint_dir()
    ids: dict[str, set[str]] = {}
    offsets: dict[TopicPartition, int] = {}
    if has_checkpoint:
        ids = {t: {i} for t, i in checkpoint.read_topic_ids(spark, ckpt).items()}
        offsets = checkpoint.recorded_offsets(spark, ckpt)
    # the topics to know: Kafka's; without its answer, every topic anything was recorded for (the
    # checkpoint's offsets, the tables' ids), so a topic whose id the checkpoint lacks takes the tables'
    wanted = set(kafka.partitions) if kafka is not None else None
    wms = table_watermarks(spark, writer) if not has_checkpoint or wanted is None or wanted - set(ids) else {}
    if wanted is None:
        wanted = {t for t, _ in offsets} | {t for w in wms.values() for t in w.topic_ids}
    missing = wanted - set(ids)
    if not has_checkpoint or missing:  # no checkpoint, or one without these topics' ids (lost, restored)
        for wm in wms.values():
            for t, i in wm.topic_ids.items():
                if not has_checkpoint or t in missing:
                    ids.setdefault(t, set()).add(i)
            if not has_checkpoint:
                for tp, off in wm.offsets.items():
                    offsets[tp] = max(offsets.get(tp, -1), off)
    recorded_ids = {t: sorted(i)[0] for t, i in ids.items() if len(i) == 1}
    if kafka is None:
        unsure = set(ids) | {t for t, _ in offsets}
        topics.arm({}, {}, recorded_ids, unsure, offsets)
        writer.ledger.forget()
        log.warning("could not ask Kafka about the topics at this start; the first batch reading each of %s asks "
                    "again before it writes (a topic deleted and created again is found then)", sorted(unsure))
        return None
    found = {**recreated.recreated_topics(kafka, ids, offsets), **topics.pending}
    if found and cfg.source.on_topic_recreated == "stop":
        raise TopicRecreatedError(recreated.stop_message(cfg.name, found))
    unsure = recreated.undecided(kafka, ids, offsets, found)
    if unsure:
        log.warning("Kafka did not tell the id or the end of %s at this start; the first batch reading each asks "
                    "again before it writes", sorted(unsure))
    topics.arm(kafka.ids, found, recorded_ids, unsure, offsets)
    writer.ledger.forget()  # read again: the old offsets of a recreated topic are set aside as read
    if not found:
        return None
    for r in found.values():
        log.warning("topic %s was deleted and created again since pipeline %s last read it (%s): reading the new "
                    "topic from its start, its old offsets set aside (source.on_topic_recreated: restart)",
                    r.topic, cfg.name, r.describe())
        writer.counters.recreated[r.topic] = r.describe()
    run_alerts.recreated(cfg, {t: r.describe() for t, r in found.items()})
    for table in ledger_tables(cfg, writer):  # every table now, not only those this run writes to
        writer.watermark(table)
    if not has_checkpoint:
        return None  # the tables' offsets (set aside for the recreated topic) are the starting point
    resume = {tp: off for tp, off in checkpoint.resume_position(spark, ckpt).items() if tp[0] not in found}
    aside = checkpoint.set_aside(spark, ckpt)
    offsets_json = starting_json(cfg, writer, resume)
    log.warning("set the checkpoint %s aside as %s (it holds offsets of the deleted topic); starting from %s",
                ckpt, aside, offsets_json)
    return offsets_json


def _probe(cfg: PipelineConfig, attempts: int = 3, wait: float = 2.0) -> recreated.KafkaTopics | None:
    """What Kafka says of the topics now; None if it did not answer (``attempts`` tries)."""
    for attempt in range(1, attempts + 1):
        try:
            return recreated.probe(cfg.source)
        except Exception as e:  # Kafka down or slow while the query (re)starts
            log.warning("could not ask Kafka about the topics (attempt %d of %d): %s", attempt, attempts,
                        error_line(e, 200))
            if attempt < attempts:
                time.sleep(wait)
    return None
