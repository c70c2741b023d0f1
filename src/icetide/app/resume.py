"""Where a query without a usable checkpoint resumes: the recorded positions, and what Kafka's
retention deleted above them while the pipeline was away (#41, hole 5).

Never in silence: with ``source.on_data_loss: continue`` the gap is a WARNING, the run's counters
and summary, and a ``kafka_gap`` alert, as a batch's gap is; with ``stop`` the run ends before
anything is read, naming the partitions, the lost ranges and the choice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from icetide.app import run_alerts
from icetide.config.models import PipelineConfig
from icetide.errors import DataLossError
from icetide.ingest import source
from icetide.lake.offsets import TopicPartition

if TYPE_CHECKING:
    from icetide.ingest.sink import BatchWriter

log = logging.getLogger(__name__)


def starting_json(cfg: PipelineConfig, writer: BatchWriter, resume: dict[TopicPartition, int],
                  written: dict[TopicPartition, int] | None = None) -> str:
    """Spark's ``startingOffsets`` for ``resume``; what retention deleted above ``written`` (see
    :func:`~icetide.ingest.source.starting_offsets_json`) reported or, with ``source.on_data_loss:
    stop``, :class:`DataLossError` before the query starts.

    Narrower: a batch that a crash left partial *and* whose checkpoint is lost is assumed written
    up to the highest offset any table holds, so retention deleting its unwritten part in between
    goes unreported (docs/guarantees.md)."""
    if written is None:  # what the tables hold: a checkpoint may lag them by a batch
        written = writer.ledger.held([writer.q(t) for t in writer.tables()])
    offsets, lost = source.starting_offsets_json(cfg.source, resume, written)
    if not lost:
        return offsets
    what = source.describe_lost(lost)
    if cfg.source.on_data_loss == "stop":
        raise DataLossError(
            f"source.on_data_loss: Kafka no longer holds records pipeline '{cfg.name}' had not read (its retention "
            f"deleted them while the pipeline was away): {what}. Nothing was read. To skip them and go on, set "
            "source.on_data_loss: continue (the gap is logged and counted); to keep them, produce them to the "
            "topic again first")
    log.warning("Kafka deleted records before the pipeline read them (retention, while it was away); starting "
                "from the oldest still there (source.on_data_loss: continue). Lost: %s", what)
    gaps = {f"{t}[{p}]": [a, b] for (t, p), (a, b) in lost.items()}
    writer.counters.add_gaps(gaps)
    run_alerts.gap(cfg, None, gaps)
    return offsets
