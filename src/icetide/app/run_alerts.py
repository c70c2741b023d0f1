"""The alerts a run raises besides health thresholds (log and ``health.webhook_url``); an alert
never stops the stream."""

from __future__ import annotations

import logging

from icetide.config.models import PipelineConfig
from icetide.health.alerts import emit
from icetide.ingest.retention import parse_gap_key
from icetide.secrets import error_line

log = logging.getLogger(__name__)


def gap(cfg: PipelineConfig, batch: int | None, lost: dict[str, list[int]]) -> None:
    """A retention gap is an alert (log and ``health.webhook_url``), like a health threshold
    (``batch`` None: found when the query started, before any batch)."""
    events = []
    for key, (a, b) in sorted(lost.items()):
        tp, table = parse_gap_key(key)  # a table's part: only the records routed to it are lost
        whose = f"the records routed to {table}, if any, among {b - a} offsets" if table else f"{b - a} records"
        events.append({"event": "kafka_gap", "pipeline": cfg.name, "table": table, "partition": tp,
                       "severity": "warning" if table else "critical", "batch": batch, "lost_from": a, "lost_to": b,
                       "records": None if table else b - a,
                       "reason": f"Kafka deleted {whose} of {tp} (offsets {a}-{b - 1}) before the pipeline "
                                 f"read them (source.on_data_loss: {cfg.source.on_data_loss})"})
    try:
        emit(events, cfg.health.webhook_url)
    except Exception as e:  # an alert never stops the stream
        log.warning("could not send the data-loss alert: %s", error_line(e, 200))


def recreated(cfg: PipelineConfig, found: dict[str, str]) -> None:
    """Topics deleted and created again, read again from their start (source.on_topic_recreated: restart)."""
    try:
        emit([{"event": "topic_recreated", "pipeline": cfg.name, "table": None, "partition": None,
               "severity": "warning", "topic": t,
               "reason": f"topic {t} was deleted and created again ({why}): its old offsets are set aside and the "
                         "new topic is ingested from its start (source.on_topic_recreated: restart)"}
              for t, why in sorted(found.items())], cfg.health.webhook_url)
    except Exception as e:  # an alert never stops the stream
        log.warning("could not send the topic-recreated alert: %s", error_line(e, 200))


def config_mistake(cfg: PipelineConfig, batch: int, mistakes: dict[str, str]) -> None:
    """Every record bound for a table was dead-lettered for a reason in the config: an ERROR and an
    alert after the first such batch (the run goes on; ``run`` then ends non-zero)."""
    for table, message in sorted(mistakes.items()):
        log.error("batch %d: nothing can land in %s, every record of it was dead-lettered: %s", batch, table,
                  message)
    try:
        emit([{"event": "config_mistake", "pipeline": cfg.name, "table": t, "partition": None,
               "severity": "critical", "batch": batch, "reason": m} for t, m in sorted(mistakes.items())],
             cfg.health.webhook_url)
    except Exception as e:  # an alert never stops the stream
        log.warning("could not send the config-mistake alert: %s", error_line(e, 200))


def registry(cfg: PipelineConfig, why: str) -> None:
    """The schema registry stopped answering: an alert (batches wait; nothing is dead-lettered)."""
    emit([{"event": "schema_registry_unavailable", "pipeline": cfg.name, "table": None, "partition": None,
           "severity": "warning", "reason": f"the schema registry does not answer ({why}); batches with schema "
           "ids not seen yet wait for it (source.schema_registry.max_wait_s), nothing is dead-lettered"}],
         cfg.health.webhook_url)
