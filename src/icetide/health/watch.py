"""Which tables to watch, and one collection round over them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from icetide.config.models import PipelineConfig
from icetide.health import alerts, history
from icetide.health.collector import collect
from icetide.health.model import TableHealth
from icetide.lake.meta import MetaReader
from icetide.lake.readers import as_reader
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def namespaces(cfg: PipelineConfig) -> list[str]:
    return cfg.health.namespaces or cfg.target.namespaces()


#: How long a read command waits for Kafka before showing lag as unreachable
LAG_TIMEOUT_S = 1.0


def add_kafka_lag(source: MetaReader | SparkSession, cfg: PipelineConfig, healths: list[TableHealth]) -> None:
    """Records in Kafka not yet in each table, for the configured pipeline (if Kafka answers), and of
    those the ones Kafka already deleted (retention) before the pipeline read them: a critical
    reason (so an alert) while the pipeline can still be started before more is lost."""
    from icetide.health.collector import watermarks
    from icetide.identifiers import TableRef
    from icetide.ingest.source import high_watermarks, list_partitions, low_watermarks

    reader = as_reader(cfg, source)
    wanted = {h.table: watermarks(reader.properties(TableRef.parse(h.table, reader.catalog).short)).get(cfg.name)
              for h in healths if cfg.name in h.icetide_pipelines}
    tps = sorted({tp for wm in wanted.values() if wm for tp in wm.offsets})
    if not tps:
        return
    try:
        list_partitions(cfg.source, timeout=LAG_TIMEOUT_S)  # fail fast when Kafka is not reachable
        ends = high_watermarks(cfg.source, tps)
        starts = low_watermarks(cfg.source, tps)
    except Exception as e:
        log.warning("kafka lag not computed: %s", error_line(e, 200))
        for h in healths:
            h.kafka_unreachable = bool(wanted.get(h.table))
        return
    for h in healths:
        wm = wanted.get(h.table)
        if wm:
            h.kafka_lag = sum(max(0, ends[tp] - off) for tp, off in wm.offsets.items() if tp in ends)
            h.kafka_deleted_unread = sum(max(0, starts[tp] - off) for tp, off in wm.offsets.items() if tp in starts)
            if h.kafka_deleted_unread:
                h.tier = "critical"  # whatever the layout's score: data is about to be lost
                h.reasons.append(f"critical: Kafka deleted {h.kafka_deleted_unread} records of pipeline {cfg.name} "
                                 "before it read them (retention); they are lost on its next batch "
                                 "(source.on_data_loss)")


def collect_all(source: MetaReader | SparkSession, cfg: PipelineConfig, tables: list[str] | None = None,
                record: bool = False, alert: bool = True, lag: bool = True) -> list[TableHealth]:
    """Collect every watched table, worst first; optionally record history (needs Spark), emit alerts,
    and (``lag``) ask Kafka how far each table is behind."""
    reader = as_reader(cfg, source)
    names = tables if tables is not None else [t for ns in namespaces(cfg) for t in reader.list_tables(ns)]
    if record:
        names = [t for t in names if t != cfg.health.history_table]
    healths = [collect(reader, t, cfg.health.thresholds_for(t)) for t in names]
    if lag:
        add_kafka_lag(reader, cfg, healths)
    healths.sort(key=lambda h: (h.score, -h.max_partition_files))
    if alert:
        alerts.emit([e for h in healths for e in alerts.alerts(h)], cfg.health.webhook_url)
    if record:
        if not hasattr(source, "sparkContext"):
            raise TypeError("recording health history writes a table: pass a SparkSession")
        history.record(source, cfg.catalog.name, cfg.health.history_table, healths)  # type: ignore[arg-type]
    return healths
