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
from typing import TYPE_CHECKING

from icetide.app import run_alerts
from icetide.app.resume import starting_json
from icetide.config.models import PipelineConfig
from icetide.errors import TopicRecreatedError
from icetide.ingest import recreated
from icetide.lake import checkpoint
from icetide.lake.offsets import TopicPartition, Watermark
from icetide.lake.tables import table_exists

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
    (None: start as usual)."""
    topics = writer.topics
    try:
        kafka = recreated.probe(cfg.source)
    except Exception as e:  # Kafka down while the query restarts: the batches still check what they read
        log.warning("could not ask Kafka about the topics (%s); not checked for recreated topics at this start",
                    str(e).splitlines()[0][:200])
        return None
    topics.armed = False  # read what was recorded as it is
    writer.ledger.forget()
    ckpt = cfg.checkpoint_dir()
    ids: dict[str, set[str]] = {}
    offsets: dict[TopicPartition, int] = {}
    if has_checkpoint:
        ids = {t: {i} for t, i in checkpoint.read_topic_ids(spark, ckpt).items()}
        offsets = checkpoint.recorded_offsets(spark, ckpt)
    missing = set(kafka.partitions) - set(ids)
    if not has_checkpoint or missing:  # no checkpoint, or one without these topics' ids (lost, restored)
        for wm in table_watermarks(spark, writer).values():
            for t, i in wm.topic_ids.items():
                if not has_checkpoint or t in missing:
                    ids.setdefault(t, set()).add(i)
            if not has_checkpoint:
                for tp, off in wm.offsets.items():
                    offsets[tp] = max(offsets.get(tp, -1), off)
    found = {**recreated.recreated_topics(kafka, ids, offsets), **topics.pending}
    if found and cfg.source.on_topic_recreated == "stop":
        raise TopicRecreatedError(recreated.stop_message(cfg.name, found))
    topics.arm(kafka.ids, found, {t: sorted(i)[0] for t, i in ids.items() if len(i) == 1})
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
